"""The worker's database: a connection pool on the leader among its DSNs, one call with
failover (a pool timeout or a replica's refusal moves the pool to the leader), and calls
retried with backoff until they succeed or the worker stops.

Lock: `_failover_lock` lets one failover happen at a time. It is held across connecting to the
candidate leaders (that is the point: nobody else opens a pool meanwhile) and guards nothing
else, so no other lock is taken while it is held (see docs/internals.md, the lock order). `dsn` and
`pool` are rebound only under it; a reader uses the reference it read.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from psycopg_pool import PoolTimeout

from pgqueue.db import connection, queries
from pgqueue.db.pool import QueuePool
from pgqueue.errors import ConnectionFailed, Contention, NotLeader, PgQueueError
from pgqueue.telemetry.outage import FIRST_DELAY_SECONDS, Outage, jittered, next_delay

log = logging.getLogger("pgqueue.worker")

T = TypeVar("T")


class WorkerDb:
    """The pool and its failover; `moved(leader)` is called after the pool moved."""

    def __init__(self, dsns: Sequence[str], *, pool_size: int, worker_id: Callable[[], int],
                 finished: threading.Event, moved: Callable[[str], None],
                 connect_timeout: float, outage: Outage, pooled: bool | None = None) -> None:
        self.dsns = list(dsns)
        self._pooled = pooled
        self.connect_timeout = connect_timeout
        #: the outage every loop of the worker reports to (one log line a minute at most)
        self.outage = outage
        self.dsn = self.dsns[0]
        self.pool: QueuePool | None = None
        self._pool_size = pool_size
        self._worker_id = worker_id
        self._finished = finished
        self._moved = moved
        self._failover_lock = threading.Lock()

    def _open_pool(self, dsn: str) -> QueuePool:
        return connection.open_pool(dsn, max_size=self._pool_size, name="pgqueue-worker",
                                    connect_timeout=self.connect_timeout, pooled=self._pooled)

    @property
    def pooled(self) -> bool:
        """Whether the pool reaches the server through a pooler (given, or detected)."""
        return self.pool is not None and self.pool.pooled

    def open(self) -> QueuePool:
        """Find the leader and open the pool on it."""
        self.dsn = connection.find_leader(self.dsns, connect_timeout=self.connect_timeout)
        self.pool = self._open_pool(self.dsn)
        return self.pool

    def failover(self) -> None:
        """The database turned out to be a replica: move to the leader among self.dsns.

        Several threads can find out at once; the lock lets one of them move and the others
        then see the new leader (see the module docstring)."""
        with self._failover_lock:
            try:
                leader = connection.find_leader(self.dsns, connect_timeout=self.connect_timeout)
            except PgQueueError as exc:
                log.warning("worker %s: no leader to move to yet: %s", self._worker_id(), exc)
                return
            if leader == self.dsn:
                return
            old = self.pool
            self.dsn = leader
            self.pool = self._open_pool(leader)
        if old is not None:
            old.close()
        log.warning("worker %s: moved to the leader at %s", self._worker_id(),
                    connection.describe(leader),
                    extra={"pgqueue": {"event": "failover", "leader": connection.describe(leader)}})
        self._moved(leader)

    def db(self, fn: Callable[[queries.Conn], T]) -> T:
        pool = self.pool
        assert pool is not None
        try:
            with pool.connection(timeout=self.connect_timeout) as conn:
                return fn(conn)
        except PoolTimeout as exc:
            if len(self.dsns) > 1:
                self.failover()
            raise ConnectionFailed(
                f"no connection to Postgres at {connection.describe(self.dsn)}: {exc}",
                waited=True) from None
        except NotLeader as exc:
            if len(self.dsns) < 2:
                raise
            self.failover()
            raise ConnectionFailed(f"{exc}; moving to the leader") from None

    def retry(self, fn: Callable[[], T], what: str, *, deadline: float | None = None,
               until: threading.Event | None = None) -> T | None:
        """Call fn until it succeeds; None when the worker finishes, `until` is set, or the
        deadline passes first. An unreachable database is an outage (outage.py: logged once
        when it starts, at most once a minute, once when it ends; capped jittered backoff,
        none after a call that waited its whole connect timeout in the pool: the pool hands
        the next one a connection the moment the server is back); a permanent refusal (no
        such database or role, authentication) is raised at once."""
        delay = FIRST_DELAY_SECONDS
        until = until or self._finished
        while True:
            try:
                found = fn()
            except (ConnectionFailed, PoolTimeout, Contention) as exc:
                if isinstance(exc, ConnectionFailed) and exc.permanent:
                    raise
                if until.is_set() or (deadline is not None and time.monotonic() > deadline):
                    log.warning("worker %s: giving up on %s: %s", self._worker_id(), what, exc)
                    return None
                if isinstance(exc, Contention):
                    log.warning("worker %s: %s failed (%s); retrying in %.1fs",
                                self._worker_id(), what, exc, delay)
                else:
                    self.outage.failed(what, exc)
                if not (isinstance(exc, ConnectionFailed) and exc.waited):
                    until.wait(jittered(delay))
                    delay = next_delay(delay)
                continue
            self.outage.ok(what)
            return found

    def retry_db(self, fn: Callable[[queries.Conn], T], what: str, *,
                  deadline: float | None = None, until: threading.Event | None = None) -> T | None:
        """One database call, retried as `retry` does (held.RetryDb)."""
        return self.retry(lambda: self.db(fn), what, deadline=deadline, until=until)
