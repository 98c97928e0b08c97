# DO NOT EDIT: generated from pgqueue/db/connection_async.py by tools/generate.py; edit that file.
"""Connections: open them with errors that name the server (never the password), and check
that the database carries the schema this library was written for.
"""
from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from pgqueue.db import run
from pgqueue.db.dsn import describe, dsn_list, hide_secrets, redact
from pgqueue.db.pool import QueuePool, behind_pooler
from pgqueue.errors import ConnectionFailed, NotLeader, SchemaMissing, SchemaTooNew

__all__ = ["CONNECT_TIMEOUT", "DISTRIBUTION", "SCHEMA_REVISION", "check_schema", "connect",
           "conninfo_to_dict", "describe", "dsn_list", "find_leader", "open_pool", "redact",
           "refused_for_good", "timeout_seconds"]
Conn = psycopg.Connection[Any]

#: The alembic revision this library's SQL was written against (revision ids are integers).
#: A database at a newer revision is accepted when every revision past this one was marked
#: backward-compatible (pgqueue.schema_history.compatible_from says so).
SCHEMA_REVISION = "0021"
#: The name this library is installed by (the import name and the command are `pgqueue`; the
#: distribution name `pgqueue` on PyPI belongs to an unrelated project).
DISTRIBUTION = "pgqueue-py"
#: How long a connection attempt may take by default (seconds): a call made while the server
#: is unreachable fails within it (plus the statement's own time).
CONNECT_TIMEOUT = 5.0
#: The server's refusals that waiting will not mend (libpq reports no SQLSTATE for them).
_PERMANENT = re.compile(
    r'FATAL:\s+(database "[^"]*" does not exist|role "[^"]*" does not exist'
    r'|password authentication failed|.*authentication failed for user|no pg_hba\.conf entry'
    r'|permission denied for database|role "[^"]*" is not permitted to log in)')


def refused_for_good(exc: psycopg.OperationalError) -> bool:
    """Whether a failed connection attempt was a refusal that waiting will not mend (no such
    database or role, authentication), as opposed to an unreachable or restarting server."""
    return _PERMANENT.search(str(exc)) is not None


def timeout_seconds(value: float) -> int:
    """A connect_timeout as libpq takes it: whole seconds, at least 1."""
    return max(1, math.ceil(value))


def connect(dsn: str, *, autocommit: bool = True, connect_timeout: float | None = None,
            **kwargs: Any) -> Conn:
    """Open one connection within `connect_timeout` seconds (None: the DSN's connect_timeout,
    else CONNECT_TIMEOUT); a failure raises ConnectionFailed naming host and port
    (`permanent` when the server refused it for good). It prepares no statement unless told
    (`prepare_threshold`): it may go through a pooler in transaction mode, where a prepared
    statement is lost, and it serves maintenance, scrapes and tools, not the hot path (the
    pools' connections prepare, unless behind a pooler)."""
    kwargs.setdefault("prepare_threshold", None)
    try:
        if connect_timeout is not None:
            kwargs["connect_timeout"] = timeout_seconds(connect_timeout)
        elif "connect_timeout" not in dsn or "connect_timeout" not in conninfo_to_dict(dsn):
            kwargs["connect_timeout"] = timeout_seconds(CONNECT_TIMEOUT)
        return psycopg.Connection.connect(dsn, autocommit=autocommit, **kwargs)
    except psycopg.ProgrammingError as exc:
        raise ValueError(f"dsn: cannot parse the connection string: {hide_secrets(str(exc))}"
                         ) from None
    except psycopg.OperationalError as exc:
        text = str(exc).strip()
        reason = text.splitlines()[-1] if text else type(exc).__name__
        permanent = _PERMANENT.search(text)
        if permanent:
            reason = permanent.group(0).removeprefix("FATAL:").strip()
        raise ConnectionFailed(f"cannot connect to Postgres at {describe(dsn)}: {reason}",
                               permanent=permanent is not None) from None


def check_schema(conn: Conn) -> None:
    """Refuse a database without the schema, with one older than this library needs, or with
    a newer one that is not backward-compatible with it (a rolling upgrade runs the previous
    release on a compatible newer schema)."""
    revision = run.scalar(conn, "schema_revision")
    if revision is None:
        raise SchemaMissing(
            "the database has no pgqueue schema; run `pgqueue db upgrade` (or pgqueue.migrate(dsn))"
        )
    if int(revision) < int(SCHEMA_REVISION):
        raise SchemaMissing(
            f"the database's pgqueue schema is revision {revision}, older than the "
            f"{SCHEMA_REVISION} this library needs; run `pgqueue db upgrade`"
        )
    if int(revision) > int(SCHEMA_REVISION):
        since = run.scalar(conn, "schema_compatible_from")
        if since is None or int(since) > int(SCHEMA_REVISION):
            raise SchemaTooNew(
                f"the database's pgqueue schema is revision {revision}, newer than this "
                f"library's {SCHEMA_REVISION} and not compatible with it (it runs code of "
                f"revision {since or revision} on); upgrade the {DISTRIBUTION} package "
                f"(pip install -U {DISTRIBUTION})"
            )


def _read_committed(conn: Conn) -> None:
    """A new pooled connection runs at READ COMMITTED, whatever the server's default (the
    kinds' limits need it: pgqueue.lease); once per connection, not per call. Not behind a
    pooler: a session setting would stay on whichever server connection ran it, for the
    pooler's other clients (`pgqueue db check` says when the server's default is another)."""
    run.fetch(conn, "session_read_committed")


def open_pool(dsn: str, *, max_size: int = 4, name: str = "pgqueue",
              connect_timeout: float = CONNECT_TIMEOUT,
              pooled: bool | None = None) -> QueuePool:
    """A checked pool of autocommit connections: reachability and schema are verified first,
    so a bad DSN or schema fails here with a clear message instead of a pool timeout. A call
    waits at most `connect_timeout` seconds for a connection (the pool's timeout); after an
    outage the pool's connections are back within a fraction of a second of the server
    (pool.py). `pooled`: whether the DSN goes through a pooler such as PgBouncer (None:
    detected), whose connections must not prepare statements."""
    with connect(dsn, connect_timeout=connect_timeout) as conn:
        check_schema(conn)
        if pooled is None:
            pooled = behind_pooler(conn)
    pool = QueuePool(
        dsn,
        pooled=pooled,
        refused=refused_for_good,
        min_size=1,
        max_size=max(1, max_size),
        kwargs={"autocommit": True, "connect_timeout": timeout_seconds(connect_timeout)},
        configure=None if pooled else _read_committed,
        name=name,
        open=False,
        timeout=connect_timeout,
        # No check on checkout: it would cost a round trip per call. A connection broken by a
        # server restart fails on use, is discarded when returned, and the call is retried.
        reconnect_timeout=60.0,
    )
    try:
        pool.open(wait=True, timeout=max(connect_timeout, 1.0))
    except BaseException:  # a timeout, or the caller cancelled: no pool tasks outlive it
        pool.close()
        raise
    return pool


def find_leader(dsns: Sequence[str], *, connect_timeout: float = CONNECT_TIMEOUT) -> str:
    """The first DSN whose database is in leader role. Unreachable ones are passed over;
    with one DSN it is returned as is (its role is checked by every write)."""
    if len(dsns) == 1:
        return dsns[0]
    problems: list[str] = []
    for dsn in dsns:
        try:
            with connect(dsn, connect_timeout=connect_timeout) as conn:
                row = run.fetch_one(conn, "node_get")
        except (ConnectionFailed, SchemaMissing) as exc:
            problems.append(str(exc))
            continue
        if row is not None and row["role"] == "leader":
            return dsn
        problems.append(f"{describe(dsn)} is a replica")
    raise NotLeader("no leader among the given databases: " + "; ".join(problems))
