"""Worker: lease jobs, run their handlers on a thread pool, keep their leases alive.

One process runs:
- the lease loop (main thread): leases in batches up to its free capacity, wakes on
  LISTEN/NOTIFY when a job is enqueued and polls as the fallback. With a capacity
  (concurrency + prefetch) of 256 or more a second lease loop shares it, so one lease is on the
  server while the other's batch is handed out (60,000 no-op jobs, concurrency 32, prefetch
  500: 27-29k -> 37-38k jobs/s; no gain measured below that capacity);
- `concurrency` handler threads;
- a renewer thread: every renewal interval it renews every held lease in one statement,
  carrying each job's dirty checkpoint in the same UPDATE, and heartbeats the registry;
- a listener thread and (unless disabled) a maintenance thread elected by advisory lock.

On SIGTERM or SIGINT it stops leasing, lets running handlers finish within the grace period,
returns the rest without costing them an attempt (checkpoint kept), and returns normally.
Lost connections (a Postgres restart) are retried with backoff everywhere.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import queue as queue_mod
import signal
import socket
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool, PoolTimeout

from pgqueue import connection, lease, queries, settle, steps, validate
from pgqueue.app import App, StepJob
from pgqueue.errors import ConnectionFailed, Contention, LeaseLost, NotLeader, PgQueueError
from pgqueue.maintain import Maintainer
from pgqueue.steps import Held

log = logging.getLogger("pgqueue.worker")

T = TypeVar("T")

NOTIFY_CHANNEL = "pgqueue_jobs"
#: Leased capacity above which a second lease loop runs beside the first (see _lease_loop).
PARALLEL_LEASE_CAPACITY = 256
HEARTBEAT_SECONDS = 5.0
MAX_ERROR_CHARS = 4000


class Wakeup:
    """A wake-up signal several lease loops can wait on without losing one: a waiter passes
    the generation it saw before it looked for work, and returns as soon as it changed."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self.generation = 0

    def set(self) -> None:
        with self._cond:
            self.generation += 1
            self._cond.notify_all()

    def wait(self, seen: int, timeout: float) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self.generation != seen, timeout)


class Worker:
    """Runs an App's handlers against one database. `run()` blocks; `stop()` drains."""

    def __init__(
        self,
        app: App,
        dsn: str | Sequence[str],
        *,
        streams: Sequence[str] = ("default",),
        concurrency: int = 4,
        visibility_timeout: float = 30.0,
        renew_interval: float | None = None,
        poll_interval: float = 1.0,
        maintenance_interval: float = 1.0,
        maintenance: bool = True,
        grace_period: float = 30.0,
        node: int = 0,
        prefetch: int = 0,
    ) -> None:
        if not isinstance(app, App):
            raise TypeError(f"app must be a pgqueue.App, got {type(app).__name__}")
        if isinstance(streams, str):
            streams = [streams]
        self.streams = [validate.stream(s, "streams") for s in streams]
        if not self.streams:
            raise ValueError("streams must name at least one stream")
        self.app = app
        self.dsns = connection.dsn_list(dsn)
        self.dsn = self.dsns[0]  # the leader among dsns, found at start and after failover
        self.concurrency = validate.integer(concurrency, "concurrency", low=1, high=10_000)
        # Jobs leased ahead of a free handler thread, so a deep queue of short jobs is leased
        # in bigger batches (fewer lease round trips and ack commits per job). Off by default:
        # if the worker process dies, reclaim counts a crash against every job it held,
        # prefetched ones included, which could quarantine jobs that never ran.
        self.prefetch = validate.integer(prefetch, "prefetch", low=0, high=100_000)
        self.visibility_timeout = validate.seconds(visibility_timeout, "visibility_timeout",
                                                   positive=True)
        shortest = min([self.visibility_timeout] + [
            h.visibility_timeout for h in app.handlers.values() if h.visibility_timeout])
        self.renew_interval = (shortest / 3.0 if renew_interval is None
                               else validate.seconds(renew_interval, "renew_interval", positive=True))
        if self.renew_interval >= shortest:
            raise ValueError(f"renew_interval ({self.renew_interval}s) must be shorter than the "
                             f"visibility timeout ({shortest}s), or leases expire between renewals")
        self.poll_interval = validate.seconds(poll_interval, "poll_interval", positive=True)
        self.maintenance_interval = validate.seconds(maintenance_interval, "maintenance_interval",
                                                     positive=True)
        self.maintenance = maintenance
        self.grace_period = validate.seconds(grace_period, "grace_period")
        self.node = validate.integer(node, "node", low=0, high=2**31 - 1)
        self.worker_id = 0
        self.processed = 0

        self._pool: ConnectionPool[Any] | None = None
        self._held: dict[int, Held] = {}
        self._held_lock = threading.Lock()
        # SimpleQueue (C) rather than Queue: two hand-offs per job, no task_done/join needed
        self._work: queue_mod.SimpleQueue[Held | None] = queue_mod.SimpleQueue()
        self._acks: queue_mod.SimpleQueue[Held | None] = queue_mod.SimpleQueue()
        self._stopping = threading.Event()   # stop leasing
        self._finished = threading.Event()   # background threads exit
        self._wake = Wakeup()
        self._reserved = 0  # capacity promised to lease calls in flight (under _held_lock)
        # Two lease loops when the capacity is large: one leases while the other's batch is
        # being handed out and acked, so a deep queue keeps both server cores busy.
        self.lease_loops = 2 if self.concurrency + self.prefetch >= PARALLEL_LEASE_CAPACITY else 1
        self._leasers: list[threading.Thread] = []
        self._threads: list[threading.Thread] = []
        self._maintainer: Maintainer | None = None

    # -- public ------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop leasing and drain (thread- and signal-safe)."""
        self._stopping.set()
        self._wake.set()

    @property
    def held_count(self) -> int:
        with self._held_lock:
            return len(self._held)

    def run(self) -> None:
        """Work until stop() or SIGTERM/SIGINT; then drain and return."""
        restore = self._install_signals()
        try:
            self._start()
            self._lease_loop()
        finally:
            try:
                self._drain()
            finally:
                restore()

    # -- setup -------------------------------------------------------------------------------

    def _install_signals(self) -> Callable[[], None]:
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

        def on_signal(signum: int, frame: Any) -> None:
            if self._stopping.is_set():
                self.grace_period = 0.0  # a second signal: stop waiting for handlers
            log.info("worker %s: received %s, draining", self.worker_id, signal.Signals(signum).name)
            self.stop()

        for sig in previous:
            signal.signal(sig, on_signal)

        def restore() -> None:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

        return restore

    def _open(self) -> ConnectionPool[Any]:
        self.dsn = connection.find_leader(self.dsns)
        return connection.open_pool(self.dsn, max_size=self.concurrency + 1 + self.lease_loops,
                                    name="pgqueue-worker")

    def _register(self) -> bool:
        row = self._retry(lambda: self._db(lambda c: queries.fetch_one(c, "register_worker", {
            "node": self.node, "host": socket.gethostname(), "pid": os.getpid(),
            "streams": self.streams, "concurrency": self.concurrency})), "register",
            until=self._stopping)
        if row is None:
            return False
        self.worker_id = int(row["id"])
        self._retry(lambda: self._db(self._register_handlers), "register handlers",
                    until=self._stopping)
        return True

    def _failover(self) -> None:
        """The database turned out to be a replica: move to the leader among self.dsns."""
        with self._held_lock:
            try:
                leader = connection.find_leader(self.dsns)
            except PgQueueError as exc:
                log.warning("worker %s: no leader to move to yet: %s", self.worker_id, exc)
                return
            if leader == self.dsn:
                return
            old = self._pool
            self.dsn = leader
            self._pool = connection.open_pool(leader, max_size=self.concurrency + 1 + self.lease_loops,
                                              name="pgqueue-worker")
        if self._maintainer is not None:
            self._maintainer.dsn = leader
        if old is not None:
            old.close()
        log.warning("worker %s: moved to the leader at %s", self.worker_id,
                    connection.describe(leader))
        threading.Thread(target=self._register, daemon=True).start()

    def _start(self) -> None:
        self._pool = self._retry(self._open, "connect", until=self._stopping)
        if self._pool is None or not self._register():
            return
        log.info("worker %s started: streams=%s concurrency=%d", self.worker_id,
                 ",".join(self.streams), self.concurrency)
        targets: list[tuple[str, Callable[[], None]]] = [
            ("renewer", self._renew_loop), ("listener", self._listen_loop),
            ("acker", self._ack_loop)]
        targets += [(f"handler-{i}", self._handler_loop) for i in range(self.concurrency)]
        for i in range(1, self.lease_loops):
            t = threading.Thread(target=self._leaser, args=(i,), name=f"pgqueue-leaser-{i}",
                                 daemon=True)
            t.start()
            self._leasers.append(t)
        if self.maintenance:
            self._maintainer = Maintainer(self.dsn, interval=self.maintenance_interval)
            targets.append(("maintenance", self._maintainer.run))
        for name, target in targets:
            t = threading.Thread(target=target, name=f"pgqueue-{name}", daemon=True)
            t.start()
            self._threads.append(t)

    def _register_handlers(self, conn: queries.Conn) -> None:
        """Record step lists and per-kind quarantine thresholds where reclaim can see them."""
        for handler in self.app.handlers.values():
            if isinstance(handler, StepJob) and handler.steps:
                queries.fetch(conn, "register_step_set", {
                    "hash": handler.step_set_hash, "kind": handler.kind,
                    "steps": Jsonb(handler.step_list)})
            if handler.quarantine_after is not None:
                for stream in self.streams:
                    queries.fetch(conn, "configure_kind", {
                        "stream": stream, "kind": handler.kind,
                        "quarantine_after": handler.quarantine_after})

    # -- database access with retries --------------------------------------------------------

    def _db(self, fn: Callable[[queries.Conn], T]) -> T:
        pool = self._pool
        assert pool is not None
        try:
            with pool.connection(timeout=10.0) as conn:
                return fn(conn)
        except PoolTimeout as exc:
            if len(self.dsns) > 1:
                self._failover()
            raise ConnectionFailed(
                f"no connection to Postgres at {connection.describe(self.dsn)}: {exc}") from None
        except NotLeader as exc:
            if len(self.dsns) < 2:
                raise
            self._failover()
            raise ConnectionFailed(f"{exc}; moving to the leader") from None

    def _retry(self, fn: Callable[[], T], what: str, *, deadline: float | None = None,
               until: threading.Event | None = None) -> T | None:
        """Call fn until it succeeds; None when the worker finishes, `until` is set, or the
        deadline passes first."""
        delay = 0.1
        until = until or self._finished
        while True:
            try:
                return fn()
            except (ConnectionFailed, PoolTimeout, Contention) as exc:
                if until.is_set() or (deadline is not None and time.monotonic() > deadline):
                    log.warning("worker %s: giving up on %s: %s", self.worker_id, what, exc)
                    return None
                log.warning("worker %s: %s failed (%s); retrying in %.1fs",
                            self.worker_id, what, exc, delay)
                time.sleep(delay)
                delay = min(delay * 2, 5.0)

    # -- the lease loop ----------------------------------------------------------------------

    def _reserve(self) -> int:
        """Capacity for one lease call: what is free, split between the lease loops."""
        capacity = self.concurrency + self.prefetch
        share = -(-capacity // self.lease_loops)
        with self._held_lock:
            want = min(share, capacity - len(self._held) - self._reserved)
            if want > 0:
                self._reserved += want
            return max(want, 0)

    def _lease_loop(self, turn: int = 0) -> None:
        delay = 0.1
        while not self._stopping.is_set():
            seen = self._wake.generation
            want = self._reserve()
            if want == 0:
                self._wake.wait(seen, self.poll_interval)
                continue
            stream = self.streams[turn % len(self.streams)]
            turn += 1
            try:
                got = self._take(stream, want)
                delay = 0.1
            except PgQueueError as exc:
                log.warning("worker %s: lease failed (%s); retrying in %.1fs",
                            self.worker_id, exc, delay)
                self._stopping.wait(delay)
                delay = min(delay * 2, 5.0)
                continue
            if got < want and turn % len(self.streams) == 0:
                # Every stream came back short: wait for a NOTIFY, a free slot, or the poll.
                self._wake.wait(seen, self.poll_interval)

    def _take(self, stream: str, want: int) -> int:
        """Lease up to `want` (reserved) jobs of `stream` and hand them to the handlers; the
        reservation is given back whatever happens. Returns how many were leased."""
        fresh: list[Held] = []
        try:
            got = self._db(lambda conn: lease.lease(conn, stream, want, self.visibility_timeout,
                                                    self.node, self.worker_id))
            for leased in got:
                handler = self.app.handlers.get(leased.kind or "")
                vt = (handler.visibility_timeout if handler and handler.visibility_timeout
                      else self.visibility_timeout)
                fresh.append(Held(leased, vt))
        finally:
            with self._held_lock:
                self._reserved -= want
                for held in fresh:
                    self._held[held.lease.lease_id] = held
        for held in fresh:
            self._work.put(held)
        return len(fresh)

    def _leaser(self, turn: int) -> None:
        """A second lease loop (its own thread): an unexpected error is logged and the loop
        goes on, as the main loop's would end the worker instead."""
        while not self._stopping.is_set():
            try:
                self._lease_loop(turn)
            except Exception:
                log.exception("worker %s: lease loop %d failed; restarting it", self.worker_id, turn)
                self._stopping.wait(1.0)

    # -- handlers ----------------------------------------------------------------------------

    def _handler_loop(self) -> None:
        while True:
            held = self._work.get()
            if held is None:
                return
            if held.lost.is_set():
                self._release(held)  # lost before it started: nothing to do for it
                continue
            if self._stopping.is_set():
                continue  # not started: the drain returns it without costing an attempt
            held.running = True
            try:
                self._execute(held)
            except Exception:
                log.exception("worker %s: job %s: unexpected error", self.worker_id,
                              held.lease.job_id)
            finally:
                held.running = False
                if not held.acking:  # an acked job leaves _held when the acker has written it
                    self._release(held)

    def _release(self, *done: Held) -> None:
        with self._held_lock:
            for held in done:
                self._held.pop(held.lease.lease_id, None)
            self.processed += len(done)
        self._wake.set()

    def _ack_loop(self) -> None:
        """Ack finished jobs in batches: one statement for whatever finished meanwhile."""
        while True:
            first = self._acks.get()
            batch = [] if first is None else [first]
            stop = first is None
            while len(batch) < 1000:
                try:
                    more = self._acks.get_nowait()
                except queue_mod.Empty:
                    break
                if more is None:
                    stop = True
                    break
                batch.append(more)
            if batch:
                try:
                    self._ack_batch(batch)
                except Exception:
                    # never let the acker die: these leases expire and their jobs are
                    # reclaimed (at-least-once), later acks go on
                    log.exception("worker %s: ack of %d job(s) failed", self.worker_id, len(batch))
                    for h in batch:
                        h.lost.set()
                    self._release(*batch)
            if stop:
                return

    def _ack_batch(self, batch: list[Held]) -> None:
        deadline = time.monotonic() + min(h.visibility_timeout for h in batch)
        acked = self._retry(lambda: self._db(lambda c: settle.ack_many(c, [h.lease for h in batch])),
                            f"ack of {len(batch)} job(s)", deadline=deadline,
                            until=threading.Event())
        for h in batch:
            if acked is None or h.lease.job_id not in acked:
                h.lost.set()
                log.warning("worker %s: ack of job %s failed: its lease %s is no longer current",
                            self.worker_id, h.lease.job_id, h.lease.lease_id)
        self._release(*batch)

    def _execute(self, held: Held) -> None:
        kind = held.lease.kind
        handler = self.app.handlers.get(kind or "")
        try:
            if handler is None:
                self.mark_undecodable(held, "unknown_kind", {
                    "message": f"no handler for kind {kind!r} in this worker",
                    "kind": kind, "known_kinds": sorted(self.app.handlers)})
                return
            steps.run(handler, held, self)
        except LeaseLost as exc:
            log.warning("worker %s: job %s: %s; result discarded", self.worker_id,
                        held.lease.job_id, exc)
        except Exception as exc:
            if held.lost.is_set():
                log.warning("worker %s: job %s failed after its lease was lost: %s",
                            self.worker_id, held.lease.job_id, exc)
                return
            error = "".join(traceback.format_exception(exc))[-MAX_ERROR_CHARS:]
            max_attempts = handler.max_attempts if handler is not None else None
            self._settle(held, "nack", lambda c: settle.nack(
                c, held.lease, error, None, max_attempts))

    def _settle(self, held: Held, what: str, fn: Callable[[queries.Conn], T]) -> T | None:
        """A write about a held job: serialised with its renewals, retried until its lease
        would have expired (after that another worker owns the job anyway)."""
        deadline = time.monotonic() + held.visibility_timeout
        with held.write_lock:
            held.check()
            return self._retry(lambda: self._db(fn), f"{what} of job {held.lease.job_id}",
                               deadline=deadline)

    # -- steps.Settler -----------------------------------------------------------------------

    def write_checkpoint(self, held: Held) -> None:
        """Write the held job's checkpoint now (and extend its lease)."""
        def write(conn: queries.Conn) -> bool:
            checkpoint, version = held.snapshot()
            renewed = lease.renew_many(conn, [(held.lease, held.visibility_timeout, checkpoint)])
            if held.lease.lease_id in renewed:
                held.mark_flushed(version)
                return True
            return False

        if self._settle(held, "checkpoint", write) is not True:
            held.lost.set()
            held.check()

    def ack(self, held: Held) -> None:
        """Hand the job to the acker (batched acks); its lease keeps renewing until then."""
        held.check()
        held.acking = True
        self._acks.put(held)

    def mark_undecodable(self, held: Held, reason: str, detail: dict[str, Any]) -> None:
        log.warning("worker %s: job %s is undecodable (%s): %s", self.worker_id,
                    held.lease.job_id, reason, detail.get("message", ""))
        marked = self._settle(held, "mark undecodable", lambda c: queries.scalar(
            c, "mark_undecodable", {"job_id": held.lease.job_id, "lease_id": held.lease.lease_id,
                                    "reason": reason, "detail": Jsonb(detail)}))
        if not marked:
            held.lost.set()

    def upcast(self, held: Held, payload: bytes, schema_version: int) -> None:
        done = self._settle(held, "upcast", lambda c: queries.scalar(
            c, "upcast_job", {"job_id": held.lease.job_id, "lease_id": held.lease.lease_id,
                              "payload": payload, "schema_version": schema_version}))
        if not done:
            held.lost.set()
            held.check()
        held.payload = payload
        held.set_checkpoint(dataclasses.replace(held.checkpoint, schema_version=schema_version))

    def step_list(self, step_set_hash: str) -> list[dict[str, Any]] | None:
        row = self._retry(lambda: self._db(lambda c: queries.fetch_one(
            c, "step_set_by_hash", {"hash": step_set_hash})), "step set lookup")
        return None if row is None else list(row["steps"])

    # -- renewals, heartbeats, notifications --------------------------------------------------

    def _renew_round(self) -> None:
        with self._held_lock:
            held = sorted((h for h in self._held.values() if not h.acking),
                          key=lambda h: h.lease.lease_id)
        if not held:
            return
        for h in held:
            h.write_lock.acquire()
        try:
            snapshots = [h.snapshot() for h in held]
            items = [(h.lease, h.visibility_timeout, cp if h.dirty else None)
                     for h, (cp, _v) in zip(held, snapshots, strict=True)]
            renewed = self._db(lambda c: lease.renew_many(c, items))
            for h, (_cp, version) in zip(held, snapshots, strict=True):
                if h.lease.lease_id in renewed:
                    h.mark_flushed(version)
                elif not h.acking:  # an ack that raced this renewal removed the row: fine
                    h.lost.set()
                    log.warning("worker %s: lease %s of job %s was lost", self.worker_id,
                                h.lease.lease_id, h.lease.job_id)
        finally:
            for h in held:
                h.write_lock.release()

    def _renew_loop(self) -> None:
        last_beat = time.monotonic()
        while not self._finished.wait(self.renew_interval):
            try:
                self._renew_round()
                if time.monotonic() - last_beat >= HEARTBEAT_SECONDS:
                    self._db(lambda c: queries.fetch(c, "heartbeat_worker", {"id": self.worker_id}))
                    last_beat = time.monotonic()
            except PgQueueError as exc:
                log.warning("worker %s: renewal failed: %s", self.worker_id, exc)

    def _listen_loop(self) -> None:
        delay = 0.1
        while not self._finished.is_set():
            try:
                current = self.dsn
                with connection.connect(current) as conn:
                    queries.listen(conn, NOTIFY_CHANNEL)
                    delay = 0.1
                    while not self._finished.is_set() and current == self.dsn:
                        for note in conn.notifies(timeout=1.0):
                            if note.payload in self.streams:
                                self._wake.set()
            except Exception as exc:
                log.debug("worker %s: listener reconnecting: %s", self.worker_id, exc)
                self._finished.wait(delay)
                delay = min(delay * 2, 5.0)

    # -- shutdown ----------------------------------------------------------------------------

    def _drain(self) -> None:
        for t in self._leasers:  # no lease may land after the held set is read below
            t.join()
        started = time.monotonic()
        while time.monotonic() < started + self.grace_period:  # a second signal zeroes it
            with self._held_lock:
                busy = any(h.running or h.acking for h in self._held.values())
            if not busy:
                break
            time.sleep(0.02)
        with self._held_lock:
            remaining = [h for h in self._held.values() if not h.acking]
        if remaining and self._pool is not None:
            self._return(remaining)
        self._acks.put(None)
        self._finished.set()
        if self._maintainer is not None:
            self._maintainer.stop()
        for _ in range(self.concurrency):
            self._work.put(None)
        for t in self._threads:
            if t.name != "pgqueue-maintenance" and not t.name.startswith("pgqueue-handler"):
                t.join(timeout=5.0)
        if self._pool is not None:
            if self.worker_id:
                try:
                    self._db(lambda c: queries.fetch(c, "deregister_worker", {"id": self.worker_id}))
                except PgQueueError as exc:
                    log.warning("worker %s: deregister failed: %s", self.worker_id, exc)
            self._pool.close()
        log.info("worker %s stopped after %d job(s)", self.worker_id, self.processed)

    def _return(self, remaining: Iterable[Held]) -> None:
        """Flush the checkpoints of unfinished jobs and give their leases back (no attempt)."""
        held = sorted(remaining, key=lambda h: h.lease.lease_id)
        for h in held:
            h.write_lock.acquire()
            h.lost.set()  # from here on the handler's advance() raises: no work past the snapshot
        try:
            items = [(h.lease, h.visibility_timeout, h.snapshot()[0]) for h in held]

            def give_back(conn: queries.Conn) -> list[dict[str, Any]]:
                lease.renew_many(conn, items)
                return queries.fetch(conn, "return_leases", {
                    "job_ids": [h.lease.job_id for h in held],
                    "lease_ids": [h.lease.lease_id for h in held]})

            returned = self._retry(lambda: self._db(give_back), "return leases",
                                   deadline=time.monotonic() + 10.0)
            log.info("worker %s: returned %d unfinished job(s)", self.worker_id,
                     len(returned or []))
        finally:
            for h in held:
                h.write_lock.release()


