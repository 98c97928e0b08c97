"""Executing the named queries of pgqueue/sql (the loader is statements.py, the errors
translate.py, the DDL helpers queries.py): every statement a stage module or the Queue runs
goes through these five, and LISTEN; a transaction block through `transaction`.
"""
from __future__ import annotations

import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from operator import itemgetter
from typing import Any, TypeVar

import psycopg
from psycopg import sql as pg_sql
from psycopg.rows import AsyncRowFactory, RowMaker, dict_row
from typing_extensions import LiteralString

from pgqueue.db.statements import Params, Query, get
from pgqueue.db.translate import translate

R = TypeVar("R")
#: The channel pgqueue's enqueues NOTIFY (pgqueue/sql/enqueue.sql): idle workers and the
#: dashboard's live refresh LISTEN on it.
NOTIFY_CHANNEL = "pgqueue_jobs"
AsyncConn = psycopg.AsyncConnection[Any]

#: Callers' connections whose statements from here are never prepared: their transactions go
#: through a pooler (the queue found one), whatever the connection's own prepare_threshold.
_UNPREPARED: weakref.WeakSet[AsyncConn] = weakref.WeakSet()


def never_prepare(conn: AsyncConn) -> None:
    """Prepare none of the statements run here on `conn` (a caller's connection through a
    pooler): the connection itself, and the caller's own statements, are left as they are."""
    _UNPREPARED.add(conn)


def _prepare(conn: AsyncConn, query: Query) -> bool | None:
    """psycopg's `prepare` for a query: None (its connection's threshold decides), or False."""
    return None if query.prepare and conn not in _UNPREPARED else False


async def _run(conn: AsyncConn, name: str, params: Params,
               row_factory: AsyncRowFactory[R]) -> list[R]:
    query = get(name)
    sql: LiteralString = query.sql
    try:
        async with conn.cursor(row_factory=row_factory) as cur:
            await cur.execute(sql, params, prepare=_prepare(conn, query))
            return await cur.fetchall() if cur.description is not None else []
    except psycopg.Error as exc:
        raise translate(exc, conn.info.user, query) from exc


@asynccontextmanager
async def transaction(conn: AsyncConn) -> AsyncIterator[None]:
    """conn.transaction() (a savepoint inside one), whose BEGIN, COMMIT and ROLLBACK raise
    pgqueue's errors too: a connection lost at the commit is ConnectionFailed, never a raw
    psycopg error."""
    try:
        async with conn.transaction():
            yield
    except psycopg.Error as exc:
        raise translate(exc, conn.info.user) from exc


async def fetch(conn: AsyncConn, name: str, params: Params = None) -> list[dict[str, Any]]:
    """Run a named query and return its rows as dicts."""
    return await _run(conn, name, params, dict_row)


async def fetch_shaped(conn: AsyncConn, name: str, params: Params,
                       columns: Sequence[str]) -> list[tuple[Any, ...]]:
    """Run a named query and return its rows as tuples of `columns` (a shape of
    pgqueue/shapes.py), each value picked by its column's name: for the hot paths (a lease
    of 500 rows: no dict per row), in the shape's order whatever the query's."""
    return await _run(conn, name, params, shaped(name, columns))


def shaped(name: str, columns: Sequence[str]) -> Callable[[Any], RowMaker[tuple[Any, ...]]]:
    """A row factory giving each row as a tuple of `columns`, found by name in the result's
    description (once per result); a column the query does not return names the query."""
    def factory(cursor: Any) -> RowMaker[tuple[Any, ...]]:
        if cursor.description is None:  # no result yet (a pipeline), or none: no row to make
            return tuple
        names = [c.name for c in cursor.description]
        missing = [c for c in columns if c not in names]
        if missing:
            raise RuntimeError(f"query {name!r} returns no column {', '.join(missing)} "
                               f"(it returns {', '.join(names)})")
        at = [names.index(c) for c in columns]
        if len(at) == 1:
            only = at[0]
            return lambda values: (values[only],)
        return itemgetter(*at)

    return factory


#: By server and database: whether it is a Citus cluster's (schema_on_citus), asked once.
_ON_CITUS: dict[tuple[str, int, str], bool] = {}


async def on_citus(conn: AsyncConn) -> bool:
    """Whether the connection's database is a Citus cluster's (asked once per database)."""
    key = (conn.info.host, conn.info.port, conn.info.dbname)
    found = _ON_CITUS.get(key)
    if found is None:
        found = _ON_CITUS[key] = bool(await scalar(conn, "schema_on_citus"))
    return found


async def fetch_shaped_then(conn: AsyncConn, name: str, params: Params, columns: Sequence[str],
                            then: str, then_params: Params) -> list[tuple[Any, ...]]:
    """Run a named query, then another, in one round trip (a pipeline); the first one's rows
    as tuples of `columns` (as fetch_shaped). Both are one transaction (a pipeline's
    statements up to its Sync are): the second's effects (a NOTIFY) come when the first
    commits, and not if it fails."""
    first, second = get(name), get(then)
    try:
        async with conn.pipeline():
            cur = conn.cursor(row_factory=shaped(name, columns))
            await cur.execute(first.sql, params, prepare=_prepare(conn, first))
            await conn.execute(second.sql, then_params, prepare=False)
        return await cur.fetchall()
    except psycopg.Error as exc:
        raise translate(exc, conn.info.user, first) from exc


async def fetch_each(conn: AsyncConn, name: str,
                     params: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Run a named query once per parameter set, in one round trip (a pipeline), and return
    each one's rows as dicts: a call about several streams is a statement per stream, which on
    Citus each runs on the node holding its stream. Outside a transaction block each statement
    is a transaction of its own, between a BEGIN and a COMMIT sent with it: a pipeline's
    statements up to its Sync are otherwise one transaction, which on Citus commits on every
    node they ran on by two-phase commit. Inside one, they are part of it. A statement that
    fails ends the pipeline: those before it are committed, those after it are not run."""
    if len(params) == 1:
        return [await _run(conn, name, params[0], dict_row)]
    query = get(name)
    sql: LiteralString = query.sql
    own = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    try:
        async with conn.pipeline():
            cursors = []
            for one in params:
                if own:
                    await conn.execute("BEGIN")
                cur = conn.cursor(row_factory=dict_row)
                await cur.execute(sql, one, prepare=_prepare(conn, query))
                cursors.append(cur)
                if own:
                    await conn.execute("COMMIT")
        return [await cur.fetchall() for cur in cursors]
    except psycopg.Error as exc:
        if own and conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
            await conn.execute("ROLLBACK")  # the failed statement's own block
        raise translate(exc, conn.info.user, query) from exc


async def fetch_one(conn: AsyncConn, name: str,
                    params: Params = None) -> dict[str, Any] | None:
    """Run a named query and return its first row, or None."""
    rows = await fetch(conn, name, params)
    return rows[0] if rows else None


async def scalar(conn: AsyncConn, name: str, params: Params = None) -> Any:
    """Run a named query and return the first column of its first row (None when no row)."""
    row = await fetch_one(conn, name, params)
    return None if row is None else next(iter(row.values()))


async def listen(conn: AsyncConn, channel: str) -> None:
    """LISTEN on a channel (the name goes through psycopg.sql.Identifier)."""
    try:
        await conn.execute(pg_sql.SQL("LISTEN {}").format(pg_sql.Identifier(channel)))
    except psycopg.Error as exc:
        raise translate(exc) from exc
