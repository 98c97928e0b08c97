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
        return _from_sqlalchemy(conn)
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
        return await _from_sqlalchemy_async(conn)
    raise refuse_async(conn)


async def _from_sqlalchemy_async(conn: object) -> psycopg.AsyncConnection[Any]:
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

    if isinstance(conn, AsyncSession):
        conn = await conn.connection()  # begins the session's transaction if none is open
    if not isinstance(conn, AsyncConnection):
        raise refuse_async(conn, "of SQLAlchemy, AsyncQueue takes an AsyncConnection or an "
                                 "AsyncSession (a sync one needs Queue)")
    driver = conn.dialect.driver
    if driver != "psycopg_async" and driver != "psycopg":
        raise refuse_async(conn, f"its dialect's driver is {driver}, not psycopg (use a "
                                 f"postgresql+psycopg:// URL)")
    if not conn.in_transaction():
        await conn.begin()  # as for a sync Connection: else commit() would commit nothing
    raw = await conn.get_raw_connection()
    driver_conn = raw.driver_connection
    if not isinstance(driver_conn, psycopg.AsyncConnection):
        raise refuse_async(conn, "its driver connection is not a psycopg.AsyncConnection")
    return driver_conn


def _from_sqlalchemy(conn: object) -> psycopg.Connection[Any]:
    from sqlalchemy.engine import Connection
    from sqlalchemy.orm import Session

    if isinstance(conn, Session):
        # begins the session's transaction if none is open: the job commits with it
        conn = conn.connection()
    if not isinstance(conn, Connection):
        raise refuse(conn, "of SQLAlchemy, only a Connection or a Session is accepted "
                           "(an async one needs an async API; Queue is synchronous)")
    driver = conn.dialect.driver
    if driver != "psycopg":
        raise refuse(conn, f"its dialect's driver is {driver}, not psycopg (use a "
                           f"postgresql+psycopg:// URL)")
    if not conn.in_transaction():
        # A Connection begins its transaction at its first statement; this one is ours, so
        # begin it here, or conn.commit() would commit nothing and the job would be lost.
        conn.begin()
    driver_conn = conn.connection.driver_connection
    if not isinstance(driver_conn, psycopg.Connection):
        raise refuse(conn, "its driver connection is not a psycopg.Connection")
    return driver_conn


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
