# DO NOT EDIT: generated from pgqueue/client/queue_async.py by tools/generate.py; edit that file.
"""AsyncQueue, and Queue generated from it: the public API over one stream of one database.

A thin facade: each method validates its arguments, borrows a pooled autocommit connection
and calls one stage module, so every call is one statement and one round trip. This module
holds producing and consuming (enqueue, lease, renew, ack, nack, reclaim); the operator-side
calls are in queue_operate.py, and which calls run again after a lost connection in
failover.py.

AsyncQueue connects at `async with` or at its first call (a constructor cannot await); Queue
connects in its constructor, so a bad DSN or schema fails there.
"""
from __future__ import annotations

import copy
import datetime as dt
import logging
import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import TracebackType
from typing import Any, TypeVar

import psycopg
from psycopg_pool import PoolTimeout

from pgqueue import validate
from pgqueue.client import enqueue, lease, reclaim, settle
from pgqueue.client.queue_operate import QueueOperations
from pgqueue.db import callers, connection, run
from pgqueue.db.failover import follow_leader
from pgqueue.db.pool import QueuePool
from pgqueue.db.run import Conn
from pgqueue.db.translate import translate
from pgqueue.errors import ConnectionFailed, LeaseLost, PgQueueError
from pgqueue.models import Checkpoint, Lease, NewJob
from pgqueue.telemetry import tracing
from pgqueue.telemetry.outage import Outage

R = TypeVar("R")
log = logging.getLogger("pgqueue.queue")


class Queue(QueueOperations):
    """One stream of a pgqueue database. Safe to share (between tasks; Queue: between
    threads); use as a context manager or close().

    `dsn` may be a list of DSNs (a leader and its replicas): the queue uses the one in leader
    role and moves on when it turns out to be a replica.

    `connect_timeout` (seconds, default 5; it overrides the DSN's own) bounds how long a call
    waits to reach the server: while it is unreachable every call raises ConnectionFailed
    within that bound plus the statement's own time, rather than waiting for it to return.

    `pooled`: whether the DSN goes through a pooler in transaction mode (PgBouncer and the
    like), where no statement may be prepared; None (the default) detects it when connecting
    (`pooled` then says what was found). Behind one, the statements it runs on a caller's
    connection (`conn=`) are not prepared either."""

    def __init__(self, dsn: str | Sequence[str], stream: str = "default", *,
                 pool_size: int = 4, connect_timeout: float = connection.CONNECT_TIMEOUT,
                 pooled: bool | None = None) -> None:
        if pooled is not None and not isinstance(pooled, bool):
            raise TypeError(f"pooled must be True, False or None, got {pooled!r}")
        self._pooled = pooled
        self.dsns = connection.dsn_list(dsn)
        self.stream = validate.stream(stream)
        self._pool_size = validate.integer(pool_size, "pool_size", low=1, high=1000)
        self.connect_timeout = validate.seconds(connect_timeout, "connect_timeout", positive=True)
        self._lock = threading.Lock()
        self.dsn = self.dsns[0]
        self._pool: QueuePool | None = None
        #: the database unreachable, as a producer's log tells it: a line when it starts, one
        #: a minute, one when it ends (not the pool's line per stale connection)
        self._outage = Outage(log, lambda: f"queue {self.stream}")
        self._parent: Queue | None = None  # for_stream: whose pool this queue uses
        self._open()  # Queue connects now: a bad DSN or schema fails here

    def for_stream(self, stream: str) -> Queue:
        """This queue on another stream, sharing its connection pool and leader (closing it
        leaves the pool open): one pool for a tool that works on many streams."""
        other = copy.copy(self)
        other.stream = validate.stream(stream)
        other._parent = self._parent or self
        return other

    def _open(self) -> QueuePool:
        """The pool on the leader, opened on first use."""
        if self._parent is not None:
            return self._parent._open()
        if self._pool is None:
            with self._lock:
                if self._pool is None:
                    self.dsn = connection.find_leader(
                        self.dsns, connect_timeout=self.connect_timeout)
                    self._pool = connection.open_pool(
                        self.dsn, max_size=self._pool_size, name=f"pgqueue:{self.stream}",
                        connect_timeout=self.connect_timeout, pooled=self._pooled)
        return self._pool

    @property
    def pooled(self) -> bool | None:
        """Whether this queue reaches the server through a pooler (as given, or as detected
        when it connected; None before that)."""
        owner = self._parent or self
        return owner._pool.pooled if owner._pool is not None else owner._pooled

    def _move_to_leader(self) -> bool:
        """Switch the pool to the current leader; False when there is no other to go to."""
        if self._parent is not None:
            return self._parent._move_to_leader()
        if len(self.dsns) < 2:
            return False
        with self._lock:
            try:
                leader = connection.find_leader(
                    self.dsns, connect_timeout=self.connect_timeout)
            except PgQueueError:
                return False
            if leader == self.dsn and self._pool is not None:
                return False
            old, self.dsn = self._pool, leader
            self._pool = connection.open_pool(
                leader, max_size=self._pool_size, name=f"pgqueue:{self.stream}",
                connect_timeout=self.connect_timeout, pooled=self._pooled)
        if old is not None:
            old.close()
        return True

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Close the connection pool (a for_stream queue leaves its parent's open)."""
        if self._parent is None and self._pool is not None:
            self._pool.close()

    def __enter__(self) -> Queue:
        self._open()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    @contextmanager
    def connection(self) -> Iterator[Conn]:
        """Borrow a pooled autocommit connection (for stage functions, tools, and a caller's
        own transaction with conn=: `async with q.connection() as c, c.transaction()`). While
        the server is unreachable it raises ConnectionFailed within the connect timeout; a
        connection lost inside the block raises ConnectionFailed too, and the pool's other
        idle connections are checked at once, so that the next call gets a live one."""
        pool = self._open()
        outage = (self._parent or self)._outage
        try:
            with pool.connection() as conn:
                yield conn
        except PoolTimeout as exc:
            failed = ConnectionFailed(
                f"no connection to Postgres at {connection.describe((self._parent or self).dsn)}: {exc}",
                waited=True)
            outage.failed("call", failed)
            raise failed from None
        except (psycopg.OperationalError, ConnectionFailed) as exc:
            pool.check()  # the others from before a restart are as stale
            lost = exc if isinstance(exc, ConnectionFailed) else translate(exc)
            if isinstance(lost, ConnectionFailed):
                outage.failed("call", lost)
                if lost is not exc:
                    raise lost from exc
            raise
        outage.ok()

    # -- enqueue -----------------------------------------------------------------------------

    def enqueue(
        self,
        payload: Any,
        *,
        kind: str | None = None,
        priority: int = 0,
        delay: float | dt.timedelta | None = None,
        not_before: dt.datetime | None = None,
        dedup_key: str | bytes | None = None,
        max_attempts: int | None = None,
        schema_version: int | None = None,
        concurrency_key: str | None = None,
        conn: object | None = None,
        timeout: float | dt.timedelta | None = None,
    ) -> int:
        """Enqueue one job; returns its id (or the id of the live job holding dedup_key).
        `concurrency_key` (up to 200 characters): what the kind's max_per_key counts.
        `timeout` (seconds): the job's own time limit per run, over its handler's.

        With `conn`, the job is written in the caller's transaction and exists only if the
        caller commits: a psycopg Connection, a SQLAlchemy Connection or Session (psycopg
        dialect), or Django's connection inside transaction.atomic() (callers.py). Without
        it, AsyncQueue's concurrent calls share a transaction while every pooled connection
        is busy (client/coalesce.py); each returns once its job is committed."""
        job = NewJob(payload, kind=kind, priority=priority, delay=delay, not_before=not_before,
                     dedup_key=dedup_key, max_attempts=max_attempts,
                     schema_version=schema_version, concurrency_key=concurrency_key,
                     timeout=timeout)
        with tracing.producing(self.stream, 1) as trace:
            return self._enqueue_job(job, trace, conn=conn)

    @follow_leader(idempotent=False, token=True)
    def _enqueue_job(self, job: NewJob, trace: dict[str, str] | None = None, *,
                     conn: object | None = None, _request: uuid.UUID | None = None,
                     _resent: bool = False) -> int:
        """One job in one transaction (the caller's with `conn`), one round trip; `trace`:
        the producer span's context it carries."""
        if conn is not None:
            mine = callers.psycopg_connection(conn)
            if self.pooled:  # its transaction may be on any server connection of the pooler
                run.never_prepare(mine)
            return enqueue.enqueue_one(mine, self.stream, job, trace=trace)
        with self.connection() as own:
            return enqueue.enqueue_one(own, self.stream, job, request=_request,
                                       resent=_resent, trace=trace)

    def enqueue_many(self, jobs: Sequence[NewJob], *,
                     conn: object | None = None) -> list[int]:
        """Enqueue a batch in one round trip; ids in input order (dedup as for enqueue)."""
        count = len(jobs) if isinstance(jobs, Sequence) else 0
        with tracing.producing(self.stream, count) as trace:
            return self._enqueue_jobs(jobs, None if trace is None else [trace] * count,
                                      conn=conn)

    @follow_leader(idempotent=False, token=True)
    def _enqueue_jobs(self, jobs: Sequence[NewJob],
                      traces: Sequence[dict[str, str] | None] | None = None, *,
                      conn: object | None = None, _request: uuid.UUID | None = None,
                      _resent: bool = False) -> list[int]:
        """A batch in one transaction (the caller's with `conn`), one round trip; `traces`:
        the producer spans' contexts, one per job."""
        if conn is not None:
            mine = callers.psycopg_connection(conn)
            if self.pooled:  # its transaction may be on any server connection of the pooler
                run.never_prepare(mine)
            return enqueue.enqueue_many(mine, self.stream, jobs, traces=traces)
        with self.connection() as own:
            return enqueue.enqueue_many(own, self.stream, jobs, request=_request,
                                        resent=_resent, traces=traces)

    # -- lease and settle --------------------------------------------------------------------

    @follow_leader(idempotent=False, token=True)
    def lease(self, limit: int = 1, *, visibility_timeout: float = 30.0, worker_node: int = 0,
              worker_instance: int = 0, _request: uuid.UUID | None = None,
              _resent: bool = False) -> list[Lease]:
        """Lease up to `limit` ready jobs, highest priority first, FIFO within a priority."""
        with self.connection() as conn:
            return lease.lease(conn, self.stream, limit, visibility_timeout, worker_node,
                               worker_instance, _request, _resent)

    @follow_leader(idempotent=True)
    def renew(self, lease_: Lease, *, visibility_timeout: float | None = None,
              checkpoint: Checkpoint | None = None) -> dt.datetime:
        """Extend a lease (by its own visibility timeout unless given) and write the checkpoint
        in the same UPDATE. Raises LeaseLost when the lease is no longer current."""
        renewed = self.renew_many([(lease_, visibility_timeout, checkpoint)])
        if lease_.lease_id not in renewed:
            raise LeaseLost(f"lease {lease_.lease_id} of job {lease_.job_id} is no longer current")
        return renewed[lease_.lease_id]

    @follow_leader(idempotent=True)
    def renew_many(
        self, items: Sequence[tuple[Lease, float | None, Checkpoint | None]]
    ) -> dict[int, dt.datetime]:
        """Renew many leases in one statement; {lease_id: expiry} for those still current."""
        with self.connection() as conn:
            return lease.renew_many(conn, items)

    @follow_leader(idempotent=True)
    def ack(self, lease_: Lease) -> None:
        """The job is done: delete it. Raises LeaseLost when the lease is no longer current."""
        acked = self.ack_many([lease_])
        if lease_.job_id not in acked:
            raise LeaseLost(f"lease {lease_.lease_id} of job {lease_.job_id} is no longer current")

    @follow_leader(idempotent=False, flag_retry=True)
    def ack_many(self, leases: Sequence[Lease], *, _retried: bool = False) -> set[int]:
        """Ack many leases in one statement; returns the job ids acked."""
        with self.connection() as conn:
            return settle.ack_many(conn, leases, retried=_retried)

    @follow_leader(idempotent=False, flag_retry=True)
    def nack(self, lease_: Lease, *, error: str | BaseException | None = None,
             retry_in: float | dt.timedelta | None = None, _retried: bool = False) -> bool:
        """Record a failure; returns True when the job went to the dead letters. `error`: the
        exception (kept as `ExceptionType: message` and its traceback) or a text (its summary
        is its first line, or a traceback's last). Retries after exactly `retry_in` seconds, or
        the stream's backoff (a job whose cancel was requested ends as cancelled instead:
        `job()` finds it no more). Raises LeaseLost when stale."""
        with self.connection() as conn:
            state = settle.nack(conn, lease_, error,
                                None if retry_in is None else validate.seconds(retry_in, "retry_in"),
                                retried=_retried)
        if state is None:
            raise LeaseLost(f"lease {lease_.lease_id} of job {lease_.job_id} is no longer current")
        return state == "dead"

    @follow_leader(idempotent=True)
    def reclaim_expired(self) -> int:
        """Return every expired lease, of every stream, to pending (or dead, or quarantined)."""
        with self.connection() as conn:
            return reclaim.reclaim_expired(conn)
