# DO NOT EDIT: generated from pgqueue/db/sqlalchemy_conn_async.py by tools/generate.py; edit that file.
"""The psycopg connection under a SQLAlchemy 2 connection or session a caller holds, for its
`conn=` (pgqueue/db/callers.py). SQLAlchemy is imported only when the caller's object is one of
its own (it is an optional extra)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

#: Which queue this flavour serves, and what the other one is for, in error messages.
QUEUE, OTHER = "Queue", "an async one needs AsyncQueue"


def from_sqlalchemy(conn: object, refuse: Callable[[object, str], TypeError]
                    ) -> psycopg.Connection[Any]:
    """Begins the transaction when none is open: a SQLAlchemy connection begins its own at its
    first statement, and this one is ours, so without it commit() would commit nothing and
    the job would be lost."""
    from sqlalchemy.engine import Connection
    from sqlalchemy.orm import Session

    if isinstance(conn, Session):
        conn = conn.connection()  # begins the session's transaction if none is open
    if not isinstance(conn, Connection):
        # names outside the f-string: the generator renames names, not text in strings
        takes = (Connection.__name__, Session.__name__)
        raise refuse(conn, f"of SQLAlchemy, {QUEUE} takes {takes[0]} and {takes[1]} ({OTHER})")
    driver = conn.dialect.driver
    if driver not in ("psycopg", "psycopg_async"):
        raise refuse(conn, f"its dialect's driver is {driver}, not psycopg (use a "
                           f"postgresql+psycopg:// URL)")
    if not conn.in_transaction():
        conn.begin()
    raw = conn.connection
    driver_conn = raw.driver_connection
    wanted = psycopg.Connection
    if not isinstance(driver_conn, wanted):
        raise refuse(conn, f"its driver connection is not a psycopg.{wanted.__name__}")
    return driver_conn
