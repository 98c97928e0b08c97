"""The psycopg connection under a SQLAlchemy 2 connection or session a caller holds, for its
`conn=` (pgqueue/db/callers.py). SQLAlchemy is imported only when the caller's object is one of
its own (it is an optional extra)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

#: Which queue this flavour serves, and what the other one is for, in error messages.
QUEUE, OTHER = "AsyncQueue", "a sync one needs Queue"  # async-only
# sync-only: QUEUE, OTHER = "Queue", "an async one needs AsyncQueue"


async def from_sqlalchemy(conn: object, refuse: Callable[[object, str], TypeError]
                          ) -> psycopg.AsyncConnection[Any]:
    """Begins the transaction when none is open: a SQLAlchemy connection begins its own at its
    first statement, and this one is ours, so without it commit() would commit nothing and
    the job would be lost."""
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession  # async-only
    # sync-only: from sqlalchemy.engine import Connection
    # sync-only: from sqlalchemy.orm import Session

    if isinstance(conn, AsyncSession):
        conn = await conn.connection()  # begins the session's transaction if none is open
    if not isinstance(conn, AsyncConnection):
        # names outside the f-string: the generator renames names, not text in strings
        takes = (AsyncConnection.__name__, AsyncSession.__name__)
        raise refuse(conn, f"of SQLAlchemy, {QUEUE} takes {takes[0]} and {takes[1]} ({OTHER})")
    driver = conn.dialect.driver
    if driver not in ("psycopg", "psycopg_async"):
        raise refuse(conn, f"its dialect's driver is {driver}, not psycopg (use a "
                           f"postgresql+psycopg:// URL)")
    if not conn.in_transaction():
        await conn.begin()
    raw = await conn.get_raw_connection()  # async-only
    # sync-only: raw = conn.connection
    driver_conn = raw.driver_connection
    wanted = psycopg.AsyncConnection
    if not isinstance(driver_conn, wanted):
        raise refuse(conn, f"its driver connection is not a psycopg.{wanted.__name__}")
    return driver_conn
