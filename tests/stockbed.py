"""The server users run, for the suite: Debian's PostgreSQL 15 as packaged, JIT on.

The embedded wheel's server has no `llvmjit.so`, so in its test bed nothing is ever
JIT-compiled; a stock server (a distribution's package, a container image, a managed service)
compiles every statement the planner costs above `jit_above_cost`. This bed runs Debian's
`postgresql-15` (`.ci/run` installs it when missing) with the package's own settings, JIT and
its thresholds untouched; only durability is relaxed, as in the embedded bed, and
`pg_stat_statements` is loaded (tracking nested statements too), so that a test can ask which
statements of its database were compiled.

A module marked `pytest.mark.layouts("single", "stock")` runs each database test on both
servers; on this one the `dsn` fixture fails the test at teardown when any statement of its
database was JIT-compiled (`jit_compiled`). Without the package the stock tests skip on a
developer's machine and fail under CI.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from psycopg.conninfo import conninfo_to_dict

from pgqueue.db import connection
from pgqueue.db.embedded import EmbeddedServer
from tests.pgbed import TEST_SETTINGS, Bed

#: Where Debian's package puts the server's binaries ($PGQUEUE_STOCK_BIN for another one).
STOCK_BIN = Path(os.environ.get("PGQUEUE_STOCK_BIN", "/usr/lib/postgresql/15/bin"))
#: The Debian package that holds it (pg_stat_statements and llvmjit.so included).
STOCK_PACKAGE = "postgresql-15"

#: What the bed adds to the package's defaults: durability relaxed, as in the embedded bed
#: (no JIT setting among them), and the statement counters every JIT check reads.
STOCK_SETTINGS = {
    **TEST_SETTINGS,
    "shared_preload_libraries": "'pg_stat_statements'",
    "pg_stat_statements.track": "all",
    "pg_stat_statements.max": "20000",
}


class StockUnavailable(RuntimeError):
    """No stock server here (the package is not installed)."""


@dataclass(frozen=True)
class Compiled:
    """A statement that was JIT-compiled, as pg_stat_statements counts it."""

    query: str
    calls: int
    jit_functions: int

    def __str__(self) -> str:
        text = " ".join(self.query.split())
        return f"{self.calls} calls, {self.jit_functions} functions compiled: {text[:300]}"


class StockBed(Bed):
    """A Bed on the stock server, which can say what each database had JIT-compiled."""

    def jit_compiled(self, dsn: str) -> list[Compiled]:
        """Every statement run in `dsn`'s database that was JIT-compiled, nested ones included
        (a statement of a pgqueue function is counted apart from the call)."""
        dbname = str(conninfo_to_dict(dsn)["dbname"])
        with connection.connect(self.server_dsn) as conn:
            rows = conn.execute(
                "SELECT s.query, s.calls, s.jit_functions FROM pg_stat_statements s "
                "JOIN pg_database d ON d.oid = s.dbid "
                "WHERE d.datname = %s AND s.jit_functions > 0 ORDER BY s.calls DESC",
                (dbname,)).fetchall()
        return [Compiled(str(q), int(c), int(f)) for q, c, f in rows]


def start_stock() -> tuple[StockBed, EmbeddedServer]:
    """Start the stock server in a new directory, check that it can JIT, migrate a template."""
    if not (STOCK_BIN / "postgres").exists():
        raise StockUnavailable(
            f"no stock PostgreSQL at {STOCK_BIN} (apt-get install -y {STOCK_PACKAGE})")
    server = EmbeddedServer(Path(tempfile.mkdtemp(prefix="pgqueue-stock-")),
                            settings=STOCK_SETTINGS, bin_dir=STOCK_BIN)
    dsn = server.start()
    try:
        with connection.connect(dsn) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            row = conn.execute("SELECT pg_jit_available(), current_setting('jit')").fetchone()
        if row is None or not row[0] or row[1] != "on":
            raise RuntimeError(f"the stock server at {STOCK_BIN} cannot JIT (pg_jit_available, "
                               f"jit: {row}): its package lacks llvmjit.so")
        return StockBed(dsn, server), server
    except BaseException:
        server.stop("immediate")
        shutil.rmtree(server.root, ignore_errors=True)
        raise


def session_stock() -> Iterator[StockBed]:
    bed, server = start_stock()
    try:
        yield bed
    finally:
        bed.close()
        server.stop("immediate")
        shutil.rmtree(server.root, ignore_errors=True)
