# DO NOT EDIT: generated from pgqueue/db/pool_async.py by tools/generate.py; edit that file.
"""The connection pool: psycopg_pool's, with connections that come back as soon as the server
does, and which knows whether a pooler (PgBouncer) stands between it and the server.

psycopg_pool retries a failed connection attempt after 1 s, then doubles its wait with no cap
short of `reconnect_timeout`, and while that attempt waits no caller may start another: after
20 s down, the first call ran 9-10 s after the server was back. Its connections here are of
a class whose `connect` itself tries again every RECONNECT_SECONDS while the server cannot be
reached, until it connects, the server refuses it for good (no such database or role, bad
password: the pool's own backoff then applies), or the pool closes. So the pool sees no failed
attempt to back off from, and a caller waiting for a connection gets one within
RECONNECT_SECONDS of the server accepting connections again. Only public API is used: the
pool's `connection_class` and `kwargs`, and psycopg's `Connection.connect`.

A pooler in transaction mode hands each transaction to any of its server connections, so a
statement psycopg prepared on one is missing, or already there, on the next (PgBouncer before
1.21 forwards no prepared statement), and a LISTEN hears nothing. Behind one (`pooled`), the
pool's connections never prepare. It is detected at open: a pooler answers the client with a
backend process id of its own (for cancel requests), which is not the server's.
"""
from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool
from typing_extensions import Self

from pgqueue.db import run

Conn = psycopg.Connection[Any]
#: Whether a failed connection attempt was refused for good (connection.refused_for_good).
Refused = Callable[[psycopg.OperationalError], bool]

class _OwnLines(logging.Filter):
    """Drops psycopg_pool's warnings about pgqueue's own pools (a line per stale connection
    discarded, per failed attempt): whoever uses the pool says the outage once instead
    (telemetry/outage.py). Other pools' lines pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno > logging.WARNING or "pgqueue" not in record.getMessage()


_POOL_LOG = logging.getLogger("psycopg.pool")
if not any(type(f).__name__ == "_OwnLines" for f in _POOL_LOG.filters):  # once (and pool.py)
    _POOL_LOG.addFilter(_OwnLines())

#: How often a pooled connection tries again while the server cannot be reached (seconds;
#: each wait is jittered down to half of it, so processes that lost the same server do not
#: come back in step).
RECONNECT_SECONDS = 0.25


class Reconnecting:
    """Whether a pool's connection attempts go on: until the pool closes. `refused(exc)` is
    the rule for giving up at once (a refusal waiting will not mend)."""

    def __init__(self, refused: Refused) -> None:
        self.closing = False
        self.refused = refused


class PoolConnection(psycopg.Connection[Any]):
    """A pool's connection (see the module docstring): `connect` tries again until it
    connects, the server refuses it for good, or `reconnecting.closing`."""

    @classmethod
    def connect(cls, conninfo: str = "", *,  # type: ignore[override]
                reconnecting: Reconnecting | None = None, **kwargs: Any) -> Self:
        while True:
            try:
                return super().connect(conninfo, **kwargs)
            except psycopg.OperationalError as exc:
                if reconnecting is None or reconnecting.closing or reconnecting.refused(exc):
                    raise
            wait = RECONNECT_SECONDS * random.uniform(0.5, 1.0)
            time.sleep(wait)


class QueuePool(ConnectionPool[PoolConnection]):
    """psycopg_pool's pool, of connections that reconnect at once (above); `pooled`: whether a
    pooler stands between it and the server (its connections then never prepare statements)."""

    def __init__(self, conninfo: str, *, pooled: bool, refused: Refused,
                 kwargs: dict[str, Any], **options: Any) -> None:
        self.pooled = pooled
        self._reconnecting = Reconnecting(refused)
        kwargs = {**kwargs, "reconnecting": self._reconnecting}
        if pooled:
            kwargs["prepare_threshold"] = None
        super().__init__(conninfo, connection_class=PoolConnection, kwargs=kwargs,
                         **options)

    def close(self, timeout: float = 5.0) -> None:
        """Stop the connection attempts in progress, then close as psycopg_pool does."""
        self._reconnecting.closing = True
        super().close(timeout)


def behind_pooler(conn: Conn) -> bool:
    """Whether `conn` reaches the server through a pooler: its backend process id, as the
    handshake gave it, is not the server's own (a pooler makes one up for its clients)."""
    return bool(run.scalar(conn, "backend_pid") != conn.info.backend_pid)

