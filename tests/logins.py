"""Login roles for the access tests: one per pgqueue role, plus one holding none.

Roles are the server's, so they are made once per session (named after the process, so two
suites on one server never share them) and dropped at its end. Each has a password, used in
its DSN, so the same tests run against a server that checks passwords (PGQUEUE_TEST_DSN) as
against the embedded one (trust on loopback).
"""
from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass

from psycopg import sql as pg_sql
from psycopg.conninfo import make_conninfo

from pgqueue.db import access, connection, queries
from tests.pgbed import Bed

#: The short names tests use, lowest first; "none" holds no pgqueue role.
LEVELS = ("none", "reader", "producer", "worker", "operator")


@dataclass
class Logins:
    """The session's login roles by short name, and their password."""

    names: dict[str, str]
    password: str

    def dsn(self, dsn: str, who: str) -> str:
        """`dsn` (a test database) as the login role `who` (a LEVELS name)."""
        return make_conninfo(dsn, user=self.names[who], password=self.password)

    @staticmethod
    def allowed(who: str, needs: str) -> bool:
        """Whether the login `who` holds the pgqueue role `needs` (roles include lower ones)."""
        return LEVELS.index(who) >= LEVELS.index(needs)


def session_logins(bed: Bed) -> Iterator[Logins]:
    password = secrets.token_urlsafe(16)
    names = {who: f"pgqueue_t{os.getpid()}_{who}" for who in LEVELS}
    with connection.connect(bed.server_dsn) as conn:
        for who, name in names.items():
            conn.execute(pg_sql.SQL("DROP ROLE IF EXISTS {}").format(pg_sql.Identifier(name)))
            conn.execute(pg_sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                pg_sql.Identifier(name), pg_sql.Literal(password)))
            if who != "none":
                queries.grant_role(conn, access.role_name(who), name)
    try:
        yield Logins(names, password)
    finally:
        with connection.connect(bed.server_dsn) as conn:
            for name in names.values():
                # what the test databases granted them goes with the databases; what is left
                # (a database still open) is dropped with them
                conn.execute(pg_sql.SQL("DROP OWNED BY {} CASCADE").format(pg_sql.Identifier(name)))
                conn.execute(pg_sql.SQL("DROP ROLE IF EXISTS {}").format(pg_sql.Identifier(name)))
