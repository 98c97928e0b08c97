"""Access: the pgqueue roles (pgqueue/sql/access.sql) and granting them to login roles.

Each part of a deployment connects as a login role granted one pgqueue role: a web service
that enqueues as pgqueue_producer, workers as pgqueue_worker, the dashboard and metrics as
pgqueue_reader (or pgqueue_operator with an admin token), operators' CLI as pgqueue_operator.
The schema owner alone migrates and runs the replica tasks. `grant` is what `pgqueue db grant`
runs; it needs a role that may grant the pgqueue roles (their creator, a superuser, or one
holding them WITH ADMIN OPTION).
"""
from __future__ import annotations

from pgqueue.db import connection, queries

ROLES = queries.ROLES


def role_name(role: str) -> str:
    """A pgqueue role by its name or its short name (reader, producer, worker, operator)."""
    if not isinstance(role, str):
        raise TypeError(f"role must be a str, got {type(role).__name__}")
    full = role if role.startswith("pgqueue_") else f"pgqueue_{role}"
    if full not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)} (or reader, producer, worker, "
                         f"operator), got {role[:80]!r}")
    return full


def login_name(login: str) -> str:
    """A login role's name as given, checked (Postgres names hold 1 to 63 bytes, no NUL)."""
    if not isinstance(login, str):
        raise TypeError(f"login must be a str, got {type(login).__name__}")
    if not login or "\x00" in login or len(login.encode("utf-8")) > 63:
        raise ValueError(f"login must be a role name of 1 to 63 bytes without NUL, got "
                         f"{login[:80]!r}")
    return login


def grant_sql(role: str, login: str) -> str:
    """The statement that grants `role` to `login`, for psql (names quoted as identifiers)."""
    return queries.grant_role_sql(role_name(role), login_name(login)).as_string(None) + ";"


def grant(dsn: str, role: str, login: str) -> str:
    """Grant the pgqueue role `role` to the login role `login`; returns the statement run."""
    full, who = role_name(role), login_name(login)
    with connection.connect(dsn) as conn:
        queries.grant_role(conn, full, who)
    return grant_sql(full, who)
