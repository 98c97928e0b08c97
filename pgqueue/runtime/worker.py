"""Worker lifecycle: lease jobs, run their handlers on a thread pool, keep their leases alive.

One process runs:
- the lease loop (main thread): leases in batches up to its free capacity, wakes on
  LISTEN/NOTIFY when a job is enqueued and polls as the fallback. With a capacity
  (concurrency + prefetch) of 256 or more a second lease loop shares it, so one lease is on the
  server while the other's batch is handed out (60,000 no-op jobs, concurrency 32, prefetch
  500: 27-29k -> 37-38k jobs/s; no gain measured below that capacity);
- `concurrency` handler threads: each runs one held job of a plain-def kind at a time
  (steps.run) and settles it through the settler;
- when the App has `async def` handlers, an event-loop thread running up to
  `async_concurrency` of their jobs at once as coroutines (coroutines.py); the lease counts
  both kinds of slot as the worker's capacity, and each job goes to the slots of its kind;
- a renewer thread: every renewal interval it renews every held lease in one statement,
  carrying each job's dirty checkpoint in the same UPDATE, and heartbeats the registry;
- an acker thread: acks finished jobs in batches;
- a listener thread and (unless disabled) a maintenance thread, elected (maintain.py).

On SIGTERM or SIGINT it stops leasing, lets running handlers finish within the grace period,
returns the rest without costing them an attempt (checkpoint kept), and returns normally.
Lost connections (a Postgres restart) are retried with backoff everywhere; finding a replica
where the leader was moves the worker to the new leader (failover).

No thread dies of an unexpected error: each loop (lease loops, renewer, acker, listener,
handler threads) logs it with its traceback and goes on after a short pause, and a background
thread whose loop raised anyway (the maintenance thread's included) is logged and restarted.
Whatever ends the main thread's lease loop (a BaseException), the drain still runs.

This module is the lifecycle: start, signals, lease loops, drain, failover. The rest:
- held.py: the table of held leases (capacity, the renewer's and the acker's batches, lost
  leases) and the lock discipline every thread follows;
- handlers.py: the handler threads; settler.py: the writes a running job makes about itself
  (checkpoints, ack hand-off, nack, undecodable, upcast), the object steps.run calls back;
- wakeup.py: the lease loops' wake-up and the listener thread;
- leasing.py: the lease loops; registry.py: registering, heartbeats;
- worker_db.py: the pool on the leader, database calls with failover and retries.

State this module shares between threads: `_stopping` and `_finished` are Events; `_wake`
is a Condition-based Wakeup; `dsn` and `_pool` are set before the threads start and then
rebound only under WorkerDb's failover lock (worker_db.py), and a reader uses the reference
it read; `worker_id`
is an int rebound by `_register` (before the threads start, and after a failover), which
readers only log or pass on.
"""
from __future__ import annotations

import functools
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from pgqueue import failures, validate
from pgqueue.client import observe
from pgqueue.db import connection
from pgqueue.db.pool import QueuePool
from pgqueue.errors import PgQueueError
from pgqueue.failures import MAX_TRACEBACK_CHARS as MAX_ERROR_CHARS
from pgqueue.maintenance.maintain import Maintainer
from pgqueue.runtime import registry, signals
from pgqueue.runtime.app import App
from pgqueue.runtime.capacity import lanes_for
from pgqueue.runtime.coroutines import DEFAULT_ASYNC_CONCURRENCY, WRITERS, AsyncHandlers
from pgqueue.runtime.deadlines import Deadlines
from pgqueue.runtime.handlers import HandlerThreads, failed
from pgqueue.runtime.held import AUTO_PREFETCH_MAX, HEARTBEAT_SECONDS, HeldLeases, label
from pgqueue.runtime.leasing import RESTART_SECONDS, LeaseLoops
from pgqueue.runtime.renewer import Renewer
from pgqueue.runtime.running import Held
from pgqueue.runtime.settler import JobSettler
from pgqueue.runtime.wakeup import NOTIFY_CHANNEL, Wakeup, listen_loop
from pgqueue.runtime.worker_db import WorkerDb
from pgqueue.telemetry.outage import Outage

if TYPE_CHECKING:  # prometheus_client is imported only by a worker that serves metrics
    from pgqueue.telemetry.metrics import MetricsServer, WorkerMetrics

__all__ = ["HEARTBEAT_SECONDS", "MAX_ERROR_CHARS", "NOTIFY_CHANNEL", "PARALLEL_LEASE_CAPACITY",
           "Wakeup", "Worker"]

log = logging.getLogger("pgqueue.worker")

T = TypeVar("T")

#: Leased capacity above which a second lease loop runs beside the first (see _lease_loop).
PARALLEL_LEASE_CAPACITY = 256


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
        prefetch: int | None = None,
        async_concurrency: int | None = None,
        metrics_port: int | None = None,
        metrics_host: str = "127.0.0.1",
        connect_timeout: float = connection.CONNECT_TIMEOUT,
        listen_dsn: str | None = None,
        pooled: bool | None = None,
    ) -> None:
        """
        :param listen_dsn: where the listener LISTENs for wake-ups (a direct connection to the
            leader) when `dsn` goes through a pooler in transaction mode, which delivers no
            notification; None: `dsn` itself, or no listener behind a pooler (the worker
            says so once and polls every `poll_interval`).
        :param pooled: whether `dsn` goes through such a pooler (no statement is then
            prepared); None: detected when connecting.
        """
        if not isinstance(app, App):
            raise TypeError(f"app must be a pgqueue.App, got {type(app).__name__}")
        if isinstance(streams, str):
            streams = [streams]
        self.streams = [validate.stream(s, "streams") for s in streams]
        if not self.streams:
            raise ValueError("streams must name at least one stream")
        self.app = app
        self.dsns = connection.dsn_list(dsn)
        if listen_dsn is not None and (not isinstance(listen_dsn, str) or not listen_dsn):
            raise TypeError("listen_dsn must be a non-empty connection string, or None")
        self.listen_dsn = listen_dsn
        if pooled is not None and not isinstance(pooled, bool):
            raise TypeError(f"pooled must be True, False or None, got {pooled!r}")
        # How long reaching the server may take (seconds): a database that does not exist or
        # refuses the role stops the worker at once; an unreachable one is an outage it waits
        # out with backoff, logging it once, once a minute and once when it ends (outage.py).
        self.connect_timeout = validate.seconds(connect_timeout, "connect_timeout", positive=True)
        # One outage for every loop of the worker; it is over when leasing works again.
        self.outage = Outage(log, lambda: f"worker {self.worker_id}", back_on="lease")
        self.concurrency = validate.integer(concurrency, "concurrency", low=1, high=10_000)
        # Coroutines in flight for the App's async def handlers, apart from the threads (None:
        # DEFAULT_ASYNC_CONCURRENCY when it has any, else none). The threads' slots count only
        # when a plain def handler needs them (or no async one exists: unknown kinds are
        # parked there).
        async_kinds = sorted(k for k, h in app.handlers.items() if h.is_async)
        if async_concurrency is None:
            async_concurrency = DEFAULT_ASYNC_CONCURRENCY if async_kinds else 0
        self.async_concurrency = validate.integer(async_concurrency, "async_concurrency",
                                                  low=0, high=100_000)
        if async_kinds and not self.async_concurrency:
            raise ValueError(f"async_concurrency must be at least 1: the app's handlers of "
                             f"{', '.join(map(repr, async_kinds))} are async def")
        self._async_kinds = frozenset(async_kinds)
        self._loop_slots = self.async_concurrency if async_kinds else 0
        self._thread_slots = self.concurrency if app.has_sync or not async_kinds else 0
        slots = self._thread_slots + self._loop_slots
        # Jobs leased ahead of a free handler thread, so a deep queue of short jobs is leased
        # in bigger batches (fewer lease round trips and ack commits per job). None (the
        # default): automatic, about AUTO_PREFETCH_SECONDS of work at the handlers' mean time
        # (held.py). A job leased ahead costs nothing if the worker dies before its handler
        # starts: the lease says which jobs start at once, the renewals which started since,
        # and reclaim charges no attempt and no crash to a lease that never started.
        self.prefetch = (None if prefetch is None
                         else validate.integer(prefetch, "prefetch", low=0, high=100_000))
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
        # The worker's own Prometheus metrics on http://metrics_host:metrics_port/metrics
        # (0: any free port, see metrics_address); None: none are kept.
        self.metrics_port = (None if metrics_port is None
                             else validate.integer(metrics_port, "metrics_port", low=0, high=65535))
        if not isinstance(metrics_host, str) or not metrics_host:
            raise TypeError("metrics_host must be a non-empty str (an address to listen on)")
        self.metrics_host = metrics_host
        self.metrics: WorkerMetrics | None = None
        self._metrics_server: MetricsServer | None = None

        self._stopping = threading.Event()   # stop leasing
        self._finished = threading.Event()   # background threads exit
        self._wake = Wakeup()
        # Two lease loops when the capacity is large: one leases while the other's batch is
        # being handed out and acked, so a deep queue keeps both server cores busy.
        most = AUTO_PREFETCH_MAX if self.prefetch is None else self.prefetch
        self.lease_loops = 2 if slots + most >= PARALLEL_LEASE_CAPACITY else 1
        writers = self._thread_slots + (WRITERS if self._loop_slots else 0)
        self._dbs = WorkerDb(self.dsns, pool_size=writers + 1 + self.lease_loops,
                             worker_id=self._id, finished=self._finished,
                             moved=self._moved, connect_timeout=self.connect_timeout,
                             outage=self.outage, pooled=pooled)
        self._db = self._dbs.db
        self._retry = self._dbs.retry
        self._retry_db = self._dbs.retry_db
        if self.metrics_port is not None:
            from pgqueue.telemetry.metrics import WorkerMetrics

            # every stream the worker serves, 0 when it holds nothing there: an alert on a
            # missing series is not an alert on 0
            self.metrics = WorkerMetrics(
                lambda: {**dict.fromkeys(self.streams, 0), **self._leases.held_by_stream()},
                kinds=app.handlers, streams=self.streams)
        # a lane per sort of slot: the threads' leases take their plain def kinds, the
        # loop's the rest (capacity.py)
        self._sync_kinds = frozenset(k for k, h in app.handlers.items() if not h.is_async)
        self._leases = HeldLeases(lanes=lanes_for(self._thread_slots, self._loop_slots,
                                                  self._sync_kinds),
                                  prefetch=self.prefetch, metrics=self.metrics,
                                  lease_loops=self.lease_loops, db=self._db,
                                  retry_db=self._retry_db, freed=self._wake.set,
                                  worker_id=self._id)
        self._settler = JobSettler(self._leases, self._retry_db, self._id)
        # Time limits: told at the limit, given up on a grace period later (deadlines.py).
        self._deadlines = Deadlines(lambda: self.grace_period, self._give_up)
        self._handlers = HandlerThreads(app, self._leases, self._settler,
                                        stopping=self._stopping, worker_id=self._id,
                                        deadlines=self._deadlines)
        self._coroutines = (AsyncHandlers(app, self._leases, self._settler,
                                          stopping=self._stopping, worker_id=self._id,
                                          deadlines=self._deadlines)
                            if self._loop_slots else None)
        self._hand_out = self._handlers.work.put if self._coroutines is None else self._route
        self._leasing = LeaseLoops(
            app=app, streams=self.streams, leases=self._leases, wake=self._wake,
            stopping=self._stopping, retry_db=self._retry_db, hand_out=self._hand_out,
            poll_interval=self.poll_interval, visibility_timeout=self.visibility_timeout,
            node=self.node, worker_id=self._id, outage=self.outage)
        self._leasers: list[threading.Thread] = []
        self._threads: list[threading.Thread] = []
        self._acker: threading.Thread | None = None
        self._maintainer: Maintainer | None = None

    # -- public ------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop leasing and drain (thread- and signal-safe)."""
        self._stopping.set()
        self._wake.set()

    @property
    def held_count(self) -> int:
        """How many leases this worker holds now."""
        return len(self._leases)

    @property
    def metrics_address(self) -> tuple[str, int] | None:
        """(host, port) the worker's metrics are served on, once it runs (None: not served)."""
        server = self._metrics_server
        return None if server is None else (server.host, server.port)

    @property
    def processed(self) -> int:
        """Jobs this worker has let go of: acked, nacked, lost or parked as undecodable."""
        return self._leases.processed

    def run(self) -> None:
        """Work until stop() or SIGTERM/SIGINT; then drain and return."""
        restore = self._install_signals()
        try:
            self._start()
            self._leasing.forever(0)
        finally:
            try:
                self._drain()
            finally:
                restore()

    # -- setup -------------------------------------------------------------------------------

    # The collaborators read these at call time: a failover changes both.
    def _id(self) -> int:
        return self.worker_id

    def _leader(self) -> str:
        return self.dsn

    @property
    def dsn(self) -> str:
        """The leader among `dsns`, found at start and after a failover."""
        return self._dbs.dsn

    @property
    def _pool(self) -> QueuePool | None:
        return self._dbs.pool

    def _listener_dsn(self) -> str:
        return self.listen_dsn or self.dsn

    def _moved(self, leader: str) -> None:
        """After a failover: maintenance follows, and the worker registers with the leader."""
        if self._maintainer is not None:
            self._maintainer.dsn = leader
        threading.Thread(target=self._reregister, name="pgqueue-register", daemon=True).start()

    def _install_signals(self) -> Callable[[], None]:
        def on_signal(sig: signal.Signals) -> None:
            # on the signal watcher thread (signals.py), never inside the main thread's locks
            if self._stopping.is_set():
                # A second signal: stop waiting for handlers (the drain on the main thread
                # reads grace_period at each turn; a float attribute is written atomically).
                self.grace_period = 0.0
            log.info("worker %s: received %s, draining", self.worker_id, sig.name,
                     extra={"pgqueue": {"event": "draining", "signal": sig.name}})
            self.stop()

        return signals.install(on_signal)

    def _register(self) -> bool:
        found = self._retry(lambda: self._db(lambda c: registry.register(
            c, node=self.node, streams=self.streams,
            concurrency=self._thread_slots + self._loop_slots)), "register", until=self._stopping)
        if found is None:
            return False
        self.worker_id = found
        self._retry(lambda: self._db(lambda c: registry.register_handlers(
            c, self.app, self.streams, found)), "register handlers", until=self._stopping)
        return True

    def _say_unknown_streams(self) -> None:
        """Warn of each stream no job, setting, schedule or worker ever named: most often a
        typo (the worker would idle on it while the jobs wait on the right one). It still
        works on it: enqueueing to a new stream creates it."""
        known = self._retry(lambda: self._db(observe.known_streams), "read the streams",
                            until=self._stopping)
        if known is None:
            return
        for stream in self.streams:
            if stream not in known:
                log.warning("worker: %s; working on it anyway (enqueueing creates a stream)",
                            validate.no_such_stream(stream, known),
                            extra={"pgqueue": {"event": "unknown_stream", "stream": stream}})

    def _reregister(self) -> None:
        try:
            self._register()
        except Exception:
            log.exception("worker %s: registering with the new leader failed", self.worker_id)

    def _start(self) -> None:
        if self._retry(self._dbs.open, "connect", until=self._stopping) is None:
            return
        self._say_unknown_streams()  # before registering: then the worker's own make them known
        if self.metrics is not None:  # served once the worker has an id (metrics_address)
            from pgqueue.telemetry.metrics import MetricsServer

            try:
                self._metrics_server = MetricsServer(
                    self.metrics.registry, host=self.metrics_host,
                    port=self.metrics_port or 0).start()
            except OSError as exc:  # the drain still runs: nothing was leased yet
                raise ValueError(f"metrics_port: cannot listen on {self.metrics_host}:"
                                 f"{self.metrics_port}: {exc.strerror or exc}") from None
        if not self._register():
            return
        log.info("worker %s started: streams=%s concurrency=%d async_concurrency=%d%s",
                 self.worker_id, ",".join(self.streams), self._thread_slots, self._loop_slots,
                 "" if self._metrics_server is None else
                 f" metrics=http://{self._metrics_server.host}:{self._metrics_server.port}/metrics",
                 extra={"pgqueue": {"event": "started", "streams": self.streams,
                                    "concurrency": self._thread_slots,
                                    "async_concurrency": self._loop_slots}})
        if self._coroutines is not None:  # before any lease loop hands it a job
            self._coroutines.start(self._loop_slots)
        for i in range(1, self.lease_loops):
            self._leasers.append(self._thread(f"leaser-{i}",
                                              functools.partial(self._leasing.forever, i)))
        self._acker = self._thread("acker", self._leases.ack_loop)
        renewer = Renewer(self._leases, self._db, self._id, self.outage)

        def cancel_heard(lease_id: int) -> None:  # look at once: the row says whether it is so
            if self._leases.holds(lease_id):
                renewer.poke(lease_id)

        self._threads += [
            self._thread("renewer", functools.partial(
                renewer.loop, self.renew_interval, self._finished, self._heartbeat)),
            self._acker]
        if self.listen_dsn is None and self._dbs.pooled:
            log.warning("worker %s: the database is reached through a pooler, where LISTEN hears "
                        "no notification: polling every %gs instead; give a direct DSN for "
                        "wake-ups (listen_dsn, pgqueue worker --listen-dsn)", self.worker_id,
                        self.poll_interval, extra={"pgqueue": {"event": "polling"}})
        else:
            self._threads.append(self._thread("listener", functools.partial(
                listen_loop, self._wake, self.streams, dsn=self._listener_dsn,
                finished=self._finished, worker_id=self._id, on_cancel=cancel_heard,
                connect_timeout=self.connect_timeout)))
        self._handlers.start(self._thread_slots)
        if self.maintenance:  # a plain bool: written once, before any thread starts
            self._maintainer = Maintainer(
                self.dsn, interval=self.maintenance_interval,
                on_pass=None if self.metrics is None else self.metrics.reclaimed_by,
                outage=self.outage, connect_timeout=self.connect_timeout)
            self._threads.append(self._thread("maintenance", self._maintainer.run))

    def _thread(self, name: str, loop: Callable[[], None]) -> threading.Thread:
        """Start a daemon thread running `loop`; if the loop raises (each catches what it
        expects), log it and run it again after a pause. A loop that returns ends the thread."""
        def keep_alive() -> None:
            while True:
                try:
                    loop()
                    return
                except Exception:
                    log.exception("worker %s: the %s thread failed unexpectedly; restarting it "
                                  "in %.0fs", self.worker_id, name, RESTART_SECONDS)
                    time.sleep(RESTART_SECONDS)

        t = threading.Thread(target=keep_alive, name=f"pgqueue-{name}", daemon=True)
        t.start()
        return t

    def _heartbeat(self) -> None:
        self._db(lambda c: registry.heartbeat(c, self.worker_id))

    # -- the lease loops (leasing.py) ---------------------------------------------------------

    def _route(self, held: Held) -> None:
        """Queue a leased job for the slots of its kind: an async def handler's for the event
        loop, the rest for the handler threads (or the loop, when there are no threads)."""
        kind = held.lease.kind
        if self._thread_slots and (kind in self._sync_kinds or self._coroutines is None):
            self._handlers.work.put(held)
        else:  # an async kind, or one without a handler (parked at once) when there is a loop
            assert self._coroutines is not None
            self._coroutines.put(held)

    # -- time limits (deadlines.py) ------------------------------------------------------------

    def _give_up(self, held: Held, grace: float) -> None:
        """A handler still running `grace` seconds past its job's time limit: record the
        failure for it (JobTimeout, with where it was), let go of the job and put a new
        thread or runner in its place. Its own thread runs on until the handler returns."""
        runner = None if held.limit is None else held.limit.runner
        stack = None
        if isinstance(runner, threading.Thread) and runner.ident is not None:
            frame = sys._current_frames().get(runner.ident)
            stack = None if frame is None else failures.stack_of(frame)
        handler = self.app.handlers.get(held.lease.kind or "")
        failed(self._settler, self.worker_id, held, handler, held.timeout_error(stack, grace))
        held.lost.set()  # whatever the handler does next about the job is refused
        self._leases.release(held)
        if isinstance(runner, threading.Thread):
            running = self._handlers.abandon(runner)
            log.error("worker %s: %s: its handler is still running %gs past its time limit: "
                      "the worker stopped waiting for it and a new handler thread took its "
                      "place (%d such thread(s) still running; Python cannot stop a thread: "
                      "have long handlers call ctx.check_cancelled())", self.worker_id,
                      label(held), grace, running,
                      extra={"pgqueue": {"event": "abandoned", "job_id": held.lease.job_id,
                                         "count": running}})
        elif self._coroutines is not None and runner is not None:
            self._coroutines.abandon(runner)
            log.error("worker %s: %s: its async handler ignored its cancellation for %gs: the "
                      "worker stopped waiting for it and a new runner took its place",
                      self.worker_id, label(held), grace,
                      extra={"pgqueue": {"event": "abandoned", "job_id": held.lease.job_id}})

    # -- shutdown ----------------------------------------------------------------------------

    def _drain(self) -> None:
        # Set here too, not only by stop(): a main lease loop that raised must not leave the
        # other lease loop running (and this drain joining it forever).
        self._stopping.set()
        self._wake.set()
        for t in self._leasers:  # no lease may land after the held set is read below
            t.join()
        # Nothing is put on the work queue after this; the jobs the handlers skip now are
        # given back below.
        self._handlers.finish()
        if self._coroutines is not None:
            self._coroutines.finish()
        started = time.monotonic()
        while time.monotonic() < started + self.grace_period:  # a second signal zeroes it
            if not (self._handlers.busy() or self._leases.acks_pending()
                    or (self._coroutines is not None and self._coroutines.busy())):
                break
            time.sleep(0.02)
        remaining = self._leases.unfinished()
        if remaining and self._pool is not None:
            self._leases.give_back(remaining)
        if self._coroutines is not None:  # those still running: their leases are given back
            self._coroutines.cancel()
        self._deadlines.stop()
        self._leases.stop_acker()
        if self._acker is not None:  # acks in flight are renewed until they are written
            self._acker.join(timeout=5.0)
        self._finished.set()
        if self._maintainer is not None:
            self._maintainer.stop()
        for t in self._threads:
            if t.name != "pgqueue-maintenance":
                t.join(timeout=5.0)
        if self._pool is not None:
            if self.worker_id:
                try:
                    self._db(lambda c: registry.deregister(c, self.worker_id))
                except PgQueueError as exc:
                    log.warning("worker %s: deregister failed: %s", self.worker_id, exc)
            self._pool.close()
        if self._metrics_server is not None:
            self._metrics_server.stop()
        log.info("worker %s stopped after %d job(s)", self.worker_id, self.processed,
                 extra={"pgqueue": {"event": "stopped", "processed": self.processed}})
