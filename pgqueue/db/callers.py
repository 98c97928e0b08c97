"""What a caller may pass as `conn=`: the psycopg connection under the transaction it holds.

A producer enqueues in its own transaction so the job exists only if its business row does.
Callers hold that transaction in whatever layer wrote the row: a psycopg Connection, a
SQLAlchemy 2 Connection or Session (psycopg dialect), or Django's connection inside
transaction.atomic(). This module finds the psycopg connection under each, without importing
SQLAlchemy or Django unless the caller's object comes from them (both are optional extras),
and refuses anything else with a TypeError naming `conn` and what is accepted.
"""
from __future__ import annotations

from typing import Any

import psycopg

from pgqueue.db import sqlalchemy_conn
from pgqueue.db import sqlalchemy_conn_async as aio_sqlalchemy_conn

ACCEPTED = ("a psycopg.Connection, a SQLAlchemy Connection or Session on the psycopg dialect, "
            "or Django's connection inside transaction.atomic()")


def refuse(conn: object, why: str = "") -> TypeError:
    kind = f"{type(conn).__module__}.{type(conn).__qualname__}"
    return TypeError(f"conn must be {ACCEPTED}; got {kind}{': ' + why if why else ''}")


def psycopg_connection(conn: object) -> psycopg.Connection[Any]:
    """The psycopg connection whose transaction `conn` is, for a statement in it."""
    if isinstance(conn, psycopg.Connection):
        return conn
    if isinstance(conn, psycopg.AsyncConnection):
        raise refuse(conn, "an async connection needs an async API; Queue is synchronous")
    module = type(conn).__module__
    if module.startswith("sqlalchemy."):
        return sqlalchemy_conn.from_sqlalchemy(conn, refuse)
    if module.startswith("django."):
        return _from_django(conn)
    raise refuse(conn)


ACCEPTED_ASYNC = ("a psycopg.AsyncConnection, or a SQLAlchemy AsyncConnection or AsyncSession "
                  "on the psycopg dialect")


def refuse_async(conn: object, why: str = "") -> TypeError:
    kind = f"{type(conn).__module__}.{type(conn).__qualname__}"
    return TypeError(f"conn must be {ACCEPTED_ASYNC}; got {kind}{': ' + why if why else ''}")


async def async_psycopg_connection(conn: object) -> psycopg.AsyncConnection[Any]:
    """AsyncQueue's `conn=`: the psycopg AsyncConnection whose transaction `conn` is."""
    if isinstance(conn, psycopg.AsyncConnection):
        return conn
    if isinstance(conn, psycopg.Connection):
        raise refuse_async(conn, "a sync connection needs Queue; AsyncQueue is async")
    if type(conn).__module__.startswith("sqlalchemy."):
        return await aio_sqlalchemy_conn.from_sqlalchemy(conn, refuse_async)
    raise refuse_async(conn)


def _from_django(conn: object) -> psycopg.Connection[Any]:
    vendor = getattr(conn, "vendor", None)
    if vendor is None or not hasattr(conn, "in_atomic_block"):
        raise refuse(conn, "of Django, only django.db.connection (or connections[alias]) is "
                           "accepted")
    if vendor != "postgresql":
        raise refuse(conn, f"it is a {vendor} database, not PostgreSQL")
    if not conn.in_atomic_block:
        raise refuse(conn, "Django's connection is in autocommit mode here: enqueue inside "
                           "transaction.atomic(), or without conn= on pgqueue's own connection")
    conn.ensure_connection()  # type: ignore[attr-defined]
    driver_conn = conn.connection  # type: ignore[attr-defined]
    if not isinstance(driver_conn, psycopg.Connection):
        raise refuse(conn, "its database backend does not run on psycopg 3 (Django 4.2 or "
                           "later with psycopg installed does)")
    return driver_conn
