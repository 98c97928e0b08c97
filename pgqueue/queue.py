"""Queue: the public, synchronous API over one stream of one database.

A thin facade: each method validates its arguments, borrows a pooled autocommit connection
and calls one stage module, so every call is one statement and one round trip.
"""
from __future__ import annotations

import datetime as dt
import functools
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import TracebackType
from typing import Any, TypeVar

from psycopg_pool import PoolTimeout

from pgqueue import (
    connection,
    deadletter,
    enqueue,
    lease,
    observe,
    operate,
    oplog,
    queries,
    reclaim,
    schedule,
    settle,
    validate,
)
from pgqueue.errors import ConnectionFailed, LeaseLost, NotLeader, PgQueueError
from pgqueue.models import Checkpoint, JobInfo, Lease, NewJob, Op, StreamStats
from pgqueue.queries import Conn
from pgqueue.schedule import Schedule, TickResult

R = TypeVar("R")


def _follow_leader(*, idempotent: bool, token: bool = False, flag_retry: bool = False
                   ) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """Given several DSNs, a call refused because its database turned out to be a replica
    moves to the leader and runs again (a refused write changed nothing, so this is safe).

    A call whose connection was lost while it ran may have committed. It runs again (on the
    new leader, if there is one) only when running it twice cannot apply it twice:
    `idempotent` calls (reads, fenced renewals, passes), calls that carry a request `token`
    the server remembers (enqueue, lease: the re-sent call returns what the first attempt
    did), and fenced settles that are told they are re-sent (`flag_retry`: an ack or nack
    whose first attempt committed still reports its outcome). Any other call raises
    ConnectionFailed saying it may have committed. A call on the caller's own connection
    (`conn=`) is never re-run: its transaction is the caller's.
    """

    def decorate(method: Callable[..., R]) -> Callable[..., R]:
        @functools.wraps(method)
        def wrapper(self: Queue, *args: Any, **kwargs: Any) -> R:
            if token:
                kwargs["_request"] = uuid.uuid4()  # the same token for every attempt
            try:
                return method(self, *args, **kwargs)
            except NotLeader:
                if not self._move_to_leader():
                    raise
                return method(self, *args, **kwargs)
            except ConnectionFailed as exc:
                if kwargs.get("conn") is not None:
                    raise
                if exc.retryable:
                    # The server ended the session before the statement ran (a restart): a
                    # fresh connection, or the new leader, runs it.
                    self._move_to_leader()
                    return method(self, *args, **kwargs)
                if not (idempotent or token or flag_retry):
                    raise ConnectionFailed(
                        f"{exc}; {method.__name__} may have committed before the connection "
                        f"was lost: check its effect before calling it again",
                        retryable=False, may_have_committed=True) from exc
                self._move_to_leader()
                if flag_retry:
                    kwargs["_retried"] = True
                return method(self, *args, **kwargs)

        return wrapper

    return decorate


class Queue:
    """One stream of a pgqueue database. Thread-safe; use as a context manager or close().

    `dsn` may be a list of DSNs (a leader and its replicas): the Queue uses the one in leader
    role and moves on when it turns out to be a replica."""

    def __init__(self, dsn: str | Sequence[str], stream: str = "default", *,
                 pool_size: int = 4) -> None:
        self.dsns = connection.dsn_list(dsn)
        self.stream = validate.stream(stream)
        self._pool_size = pool_size
        self._lock = threading.Lock()
        self.dsn = connection.find_leader(self.dsns)
        self._pool = connection.open_pool(self.dsn, max_size=pool_size, name=f"pgqueue:{stream}")

    def _move_to_leader(self) -> bool:
        """Switch the pool to the current leader; False when there is no other to go to."""
        if len(self.dsns) < 2:
            return False
        with self._lock:
            try:
                leader = connection.find_leader(self.dsns)
            except PgQueueError:
                return False
            if leader == self.dsn:
                return False
            old, self.dsn = self._pool, leader
            self._pool = connection.open_pool(leader, max_size=self._pool_size,
                                              name=f"pgqueue:{self.stream}")
        old.close()
        return True

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Close the connection pool."""
        self._pool.close()

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    @contextmanager
    def connection(self) -> Iterator[Conn]:
        """Borrow a pooled autocommit connection (for stage functions and tools)."""
        try:
            with self._pool.connection() as conn:
                yield conn
        except PoolTimeout as exc:
            raise ConnectionFailed(
                f"no connection to Postgres at {connection.describe(self.dsn)}: {exc}"
            ) from None

    # -- enqueue -----------------------------------------------------------------------------

    @_follow_leader(idempotent=False, token=True)
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
        conn: Conn | None = None,
        _request: uuid.UUID | None = None,
    ) -> int:
        """Enqueue one job; returns its id (or the id of the live job holding dedup_key).

        With `conn`, the job is written in the caller's transaction and exists only if the
        caller commits."""
        job = NewJob(payload, kind=kind, priority=priority, delay=delay, not_before=not_before,
                     dedup_key=dedup_key, max_attempts=max_attempts,
                     schema_version=schema_version)
        if conn is not None:
            return enqueue.enqueue_one(conn, self.stream, job)
        with self.connection() as own:
            return enqueue.enqueue_one(own, self.stream, job, request=_request)

    @_follow_leader(idempotent=False, token=True)
    def enqueue_many(self, jobs: Sequence[NewJob], *, conn: Conn | None = None,
                     _request: uuid.UUID | None = None) -> list[int]:
        """Enqueue a batch in one round trip; ids in input order (dedup as for enqueue)."""
        if conn is not None:
            return enqueue.enqueue_many(conn, self.stream, jobs)
        with self.connection() as own:
            return enqueue.enqueue_many(own, self.stream, jobs, request=_request)

    # -- lease and settle --------------------------------------------------------------------

    @_follow_leader(idempotent=False, token=True)
    def lease(self, limit: int = 1, *, visibility_timeout: float = 30.0, worker_node: int = 0,
              worker_instance: int = 0, _request: uuid.UUID | None = None) -> list[Lease]:
        """Lease up to `limit` ready jobs, highest priority first, FIFO within a priority."""
        with self.connection() as conn:
            return lease.lease(conn, self.stream, limit, visibility_timeout, worker_node,
                               worker_instance, _request)

    @_follow_leader(idempotent=True)
    def renew(self, lease_: Lease, *, visibility_timeout: float | None = None,
              checkpoint: Checkpoint | None = None) -> dt.datetime:
        """Extend a lease (by its own visibility timeout unless given) and write the checkpoint
        in the same UPDATE. Raises LeaseLost when the lease is no longer current."""
        renewed = self.renew_many([(lease_, visibility_timeout, checkpoint)])
        if lease_.lease_id not in renewed:
            raise LeaseLost(f"lease {lease_.lease_id} of job {lease_.job_id} is no longer current")
        return renewed[lease_.lease_id]

    @_follow_leader(idempotent=True)
    def renew_many(
        self, items: Sequence[tuple[Lease, float | None, Checkpoint | None]]
    ) -> dict[int, dt.datetime]:
        """Renew many leases in one statement; {lease_id: expiry} for those still current."""
        with self.connection() as conn:
            return lease.renew_many(conn, items)

    @_follow_leader(idempotent=True)
    def ack(self, lease_: Lease) -> None:
        """The job is done: delete it. Raises LeaseLost when the lease is no longer current."""
        acked = self.ack_many([lease_])
        if lease_.job_id not in acked:
            raise LeaseLost(f"lease {lease_.lease_id} of job {lease_.job_id} is no longer current")

    @_follow_leader(idempotent=False, flag_retry=True)
    def ack_many(self, leases: Sequence[Lease], *, _retried: bool = False) -> set[int]:
        """Ack many leases in one statement; returns the job ids acked."""
        with self.connection() as conn:
            return settle.ack_many(conn, leases, retried=_retried)

    @_follow_leader(idempotent=False, flag_retry=True)
    def nack(self, lease_: Lease, *, error: str | None = None,
             retry_in: float | dt.timedelta | None = None, _retried: bool = False) -> bool:
        """Record a failure; returns True when the job went to the dead letters. Retries after
        exactly `retry_in` seconds, or the stream's backoff. Raises LeaseLost when stale."""
        with self.connection() as conn:
            dead = settle.nack(conn, lease_, error,
                               None if retry_in is None else validate.seconds(retry_in, "retry_in"),
                               retried=_retried)
        if dead is None:
            raise LeaseLost(f"lease {lease_.lease_id} of job {lease_.job_id} is no longer current")
        return dead

    @_follow_leader(idempotent=True)
    def reclaim_expired(self) -> int:
        """Return every expired lease, of every stream, to pending (or dead, or quarantined)."""
        with self.connection() as conn:
            return reclaim.reclaim_expired(conn)

    # -- dead letters and inspection ---------------------------------------------------------

    @_follow_leader(idempotent=True)
    def dead_letters(self, limit: int = 100) -> list[JobInfo]:
        """This stream's dead letters, newest first."""
        with self.connection() as conn:
            return deadletter.dead_letters(conn, self.stream, limit)

    @_follow_leader(idempotent=False)
    def requeue_dead_letter(self, job_id: int) -> None:
        """Return a dead letter to pending with attempts reset."""
        with self.connection() as conn:
            deadletter.requeue(conn, job_id)

    @_follow_leader(idempotent=True)
    def job(self, job_id: int) -> JobInfo | None:
        """A job of any stream in any set; None when acked or unknown."""
        with self.connection() as conn:
            return observe.job(conn, job_id)

    @_follow_leader(idempotent=True)
    def jobs(self, *, state: str | None = None, all_streams: bool = False,
             limit: int = 100) -> list[JobInfo]:
        """Jobs of this stream (or every stream), newest first, optionally in one state."""
        with self.connection() as conn:
            return observe.jobs(conn, stream=None if all_streams else self.stream, state=state,
                                limit=limit)

    @_follow_leader(idempotent=True)
    def stats(self) -> list[StreamStats]:
        """Job counts by stream and state, across the database."""
        with self.connection() as conn:
            return observe.stats(conn)

    @_follow_leader(idempotent=True)
    def configure_stream(self, *, retry_base: float | None = None, retry_cap: float | None = None,
                         quarantine_after: int | None = None,
                         max_payload_bytes: int | None = None) -> None:
        """Set this stream's retry backoff (seconds), crash quarantine threshold and payload
        limit (bytes, up to 64 MiB; 16 MiB unless set). None leaves a setting as it is."""
        with self.connection() as conn:
            operate.configure_stream(conn, self.stream, retry_base=retry_base,
                                     retry_cap=retry_cap, quarantine_after=quarantine_after,
                                     max_payload_bytes=max_payload_bytes)

    @_follow_leader(idempotent=True)
    def op_log(self, *, limit: int = 20, job_id: int | None = None,
               all_streams: bool = False) -> list[Op]:
        """The newest ops of this stream (or every stream), newest first."""
        with self.connection() as conn:
            return oplog.tail(conn, limit=limit, job_id=job_id,
                              stream=None if all_streams else self.stream)

    # -- worker-side and operator transitions -------------------------------------------------

    @_follow_leader(idempotent=False)
    def return_lease(self, lease_: Lease) -> None:
        """Give a lease back without costing an attempt (checkpoint kept): leased -> pending.
        Raises LeaseLost when the lease is no longer current."""
        with self.connection() as conn:
            rows = queries.fetch(conn, "return_leases", {
                "job_ids": [lease_.job_id], "lease_ids": [lease_.lease_id]})
        if not rows:
            raise LeaseLost(f"lease {lease_.lease_id} of job {lease_.job_id} is no longer current")

    @_follow_leader(idempotent=False)
    def release(self, job_id: int, *, reset_crashes: bool = False) -> None:
        """Let a quarantined or undecodable job run again."""
        with self.connection() as conn:
            operate.release(conn, job_id, reset_crashes=reset_crashes)

    @_follow_leader(idempotent=False)
    def rewind(self, job_id: int, to_step: str) -> None:
        """Make a step job's next run start at `to_step`."""
        with self.connection() as conn:
            operate.rewind(conn, job_id, to_step)

    @_follow_leader(idempotent=False)
    def restart(self, job_id: int) -> None:
        """Drop a job's checkpoint: it runs from step one."""
        with self.connection() as conn:
            operate.restart(conn, job_id)

    @_follow_leader(idempotent=False)
    def skip_step(self, job_id: int) -> str:
        """Count a job's step in progress as done without running it; returns its name."""
        with self.connection() as conn:
            return operate.skip_step(conn, job_id)

    @_follow_leader(idempotent=False)
    def accept_step_set(self, job_id: int) -> None:
        """Accept the new step list of a job parked as step_set_changed."""
        with self.connection() as conn:
            operate.accept_step_set(conn, job_id)

    @_follow_leader(idempotent=False)
    def cancel(self, job_id: int) -> None:
        """Remove a job that is not leased (live or dead) for good."""
        with self.connection() as conn:
            operate.cancel(conn, job_id)

    @_follow_leader(idempotent=True)
    def step_list(self, step_set_hash: str) -> list[dict[str, Any]] | None:
        """The recorded step list behind a step-set hash."""
        with self.connection() as conn:
            row = queries.fetch_one(conn, "step_set_by_hash", {"hash": step_set_hash})
        return None if row is None else list(row["steps"])

    @_follow_leader(idempotent=True)
    def workers(self) -> list[dict[str, Any]]:
        """Registered worker processes and how many leases each holds."""
        with self.connection() as conn:
            return queries.fetch(conn, "list_workers")

    @_follow_leader(idempotent=True)
    def configure_kind(self, kind: str, *, quarantine_after: int | None) -> None:
        """Set (None: remove) a kind's crash quarantine threshold in this stream."""
        validate.kind(kind)
        if quarantine_after is not None:
            validate.integer(quarantine_after, "quarantine_after", low=1)
        with self.connection() as conn:
            queries.fetch(conn, "configure_kind", {
                "stream": self.stream, "kind": kind, "quarantine_after": quarantine_after})

    # -- schedules ---------------------------------------------------------------------------

    @_follow_leader(idempotent=True)
    def upsert_schedule(self, name: str, cron: str, payload: Any = b"", *, kind: str | None = None,
                        timezone: str = "UTC", priority: int = 0, max_attempts: int = 25,
                        catch_up: str = "one", misfire_grace: float = 60.0,
                        paused: bool = False) -> Schedule:
        """Create or change a cron schedule of this stream (names are unique per stream).
        catch_up after downtime: "none" skips missed ticks, "one" fires one job for them
        (the latest), "all" fires each, oldest first, up to 100 per pass."""
        with self.connection() as conn:
            return schedule.upsert(conn, self.stream, name, cron, payload, kind=kind,
                                   timezone=timezone, priority=priority,
                                   max_attempts=max_attempts, catch_up=catch_up,
                                   misfire_grace=misfire_grace, paused=paused)

    @_follow_leader(idempotent=True)
    def schedules(self) -> list[Schedule]:
        """This stream's schedules, by name."""
        with self.connection() as conn:
            return schedule.list_(conn, self.stream)

    @_follow_leader(idempotent=True)
    def schedule(self, name: str) -> Schedule | None:
        """One schedule of this stream, or None."""
        with self.connection() as conn:
            return schedule.get(conn, self.stream, name)

    @_follow_leader(idempotent=False)
    def pause_schedule(self, name: str) -> Schedule:
        """Stop firing a schedule (JobNotFound when there is none)."""
        with self.connection() as conn:
            return schedule.set_paused(conn, self.stream, name, True)

    @_follow_leader(idempotent=False)
    def resume_schedule(self, name: str) -> Schedule:
        """Fire again from the next tick after now (ticks while paused do not fire)."""
        with self.connection() as conn:
            return schedule.set_paused(conn, self.stream, name, False)

    @_follow_leader(idempotent=False)
    def remove_schedule(self, name: str) -> None:
        """Delete a schedule (JobNotFound when there is none)."""
        with self.connection() as conn:
            schedule.remove(conn, self.stream, name)

    @_follow_leader(idempotent=True)
    def tick_schedules(self, *, now: dt.datetime | None = None) -> TickResult:
        """Run one tick pass over every stream's due schedules (maintenance does this)."""
        with self.connection() as conn:
            return schedule.tick(conn, now=now)

    # -- previews: what a person reads (the CLI) ---------------------------------------------

    @_follow_leader(idempotent=True)
    def job_preview(self, job_id: int, *,
                    preview_bytes: int = observe.PREVIEW_BYTES) -> observe.JobPreview | None:
        """A job of any stream in any set with its payload cut to the first `preview_bytes`
        bytes by the database (its whole size beside it); None when acked or unknown."""
        with self.connection() as conn:
            return observe.job_preview(conn, job_id, preview_bytes)

    @_follow_leader(idempotent=True)
    def jobs_preview(self, *, state: str | None = None, all_streams: bool = False,
                     limit: int = 100,
                     preview_bytes: int = observe.PREVIEW_BYTES) -> list[observe.JobPreview]:
        """`jobs`, each payload cut to its first `preview_bytes` bytes by the database."""
        with self.connection() as conn:
            return observe.jobs_preview(conn, stream=None if all_streams else self.stream,
                                        state=state, limit=limit, preview_bytes=preview_bytes)

    @_follow_leader(idempotent=True)
    def dead_letters_preview(self, limit: int = 100, *,
                             preview_bytes: int = observe.PREVIEW_BYTES
                             ) -> list[observe.JobPreview]:
        """`dead_letters`, each payload cut to its first `preview_bytes` bytes."""
        with self.connection() as conn:
            return observe.dead_letters_preview(conn, self.stream, limit, preview_bytes)

    @_follow_leader(idempotent=True)
    def op_log_preview(self, *, limit: int = 20, job_id: int | None = None,
                       all_streams: bool = False,
                       preview_bytes: int = observe.PREVIEW_BYTES) -> list[observe.OpPreview]:
        """`op_log` (newest first), any payload in a body cut to its first `preview_bytes`."""
        with self.connection() as conn:
            return observe.op_log_preview(conn, limit=limit, job_id=job_id,
                                          stream=None if all_streams else self.stream,
                                          preview_bytes=preview_bytes)

    @_follow_leader(idempotent=True)
    def schedule_streams(self, name: str) -> list[str]:
        """Every stream (not only this one) holding a schedule called `name`, sorted."""
        with self.connection() as conn:
            return schedule.streams_named(conn, name)
