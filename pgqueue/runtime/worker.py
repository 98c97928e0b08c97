"""Worker lifecycle: lease jobs, run their handlers on a thread pool, keep their leases alive.

One process runs:
- the lease loop (main thread): leases in batches up to its free capacity, wakes on
  LISTEN/NOTIFY when a job is enqueued and polls as the fallback. With a capacity
  (concurrency + prefetch) of 256 or more a second lease loop shares it, so one lease is on the
  server while the other's batch is handed out (measured in docs/benchmarks.md);
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

This module is the lifecycle: start, signals, drain, failover. The rest: held.py (held
leases and their locks), handlers.py and coroutines.py (the slots), settler.py (a running
job's writes), leasing.py and wakeup.py (the lease loops and what wakes them), renewer.py,
registry.py, overrun.py (time limits given up on), worker_db.py (the pool, with failover).

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
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from pgqueue.client import observe
from pgqueue.db import connection
from pgqueue.db.pool import QueuePool
from pgqueue.errors import PgQueueError
from pgqueue.failures import MAX_TRACEBACK_CHARS as MAX_ERROR_CHARS
from pgqueue.maintenance.maintain import Maintainer
from pgqueue.runtime import keepalive, overrun, registry, signals
from pgqueue.runtime.app import App
from pgqueue.runtime.capacity import lanes_for
from pgqueue.runtime.coroutines import WRITERS, AsyncHandlers
from pgqueue.runtime.deadlines import Deadlines
from pgqueue.runtime.handlers import HandlerThreads
from pgqueue.runtime.held import AUTO_PREFETCH_MAX, HEARTBEAT_SECONDS, HeldLeases
from pgqueue.runtime.leasing import LeaseLoops
from pgqueue.runtime.renewer import Renewer
from pgqueue.runtime.running import Held
from pgqueue.runtime.settings import WorkerOptions, WorkerSettings, setting
from pgqueue.runtime.settler import JobSettler
from pgqueue.runtime.wakeup import NOTIFY_CHANNEL, Wakeup, listen_loop
from pgqueue.runtime.worker_db import WorkerDb
from pgqueue.telemetry.outage import Outage

if TYPE_CHECKING:  # prometheus_client is imported only by a worker that serves metrics
    from typing_extensions import Unpack  # typing's from Python 3.11

    from pgqueue.telemetry.metrics import MetricsServer, WorkerMetrics

__all__ = ["HEARTBEAT_SECONDS", "MAX_ERROR_CHARS", "NOTIFY_CHANNEL", "PARALLEL_LEASE_CAPACITY",
           "Wakeup", "Worker", "WorkerSettings"]

log = logging.getLogger("pgqueue.worker")

T = TypeVar("T")

#: Leased capacity above which a second lease loop runs beside the first (see _lease_loop).
PARALLEL_LEASE_CAPACITY = 256


class Worker:
    """Runs an App's handlers against one database. `run()` blocks; `stop()` drains."""

    concurrency = setting()
    async_concurrency = setting()
    prefetch = setting()
    visibility_timeout = setting()
    renew_interval = setting()
    poll_interval = setting()
    maintenance = setting()
    maintenance_interval = setting()
    node = setting()
    metrics_port = setting()
    metrics_host = setting()
    connect_timeout = setting()
    listen_dsn = setting()

    def __init__(self, app: App, dsn: str | Sequence[str], settings: WorkerSettings | None = None,
                 **options: Unpack[WorkerOptions]) -> None:
        """
        :param dsn: the database, or several (the worker finds the leader among them).
        :param settings: how the worker runs (WorkerSettings: every field documented there).
        :param options: WorkerSettings fields by name, each replacing that field of
            `settings` (``Worker(app, dsn, concurrency=8)``); an unknown name is a TypeError.
        """
        if not isinstance(app, App):
            raise TypeError(f"app must be a pgqueue.App, got {type(app).__name__}")
        #: The settings it runs with, those left to the App filled in (WorkerSettings.for_app).
        self.settings = WorkerSettings.given(settings, options).for_app(app)
        self.app = app
        self.dsns = connection.dsn_list(dsn)
        self.streams = list(self.settings.streams)
        # how long the drain waits: a second signal sets it to 0 (stop waiting for handlers)
        self.grace_period = self.settings.grace_period
        self.worker_id = 0
        # One outage for every loop of the worker; it is over when leasing works again.
        self.outage = Outage(log, lambda: f"worker {self.worker_id}", back_on="lease")
        # The slots: threads only when a plain def handler needs them (or no async one
        # exists: unknown kinds are parked there), the event loop's for async def handlers.
        self._sync_kinds = frozenset(k for k, h in app.handlers.items() if not h.is_async)
        has_async = len(self._sync_kinds) < len(app.handlers)
        self._loop_slots = int(self.settings.async_concurrency or 0) if has_async else 0
        self._thread_slots = self.concurrency if app.has_sync or not has_async else 0
        self.metrics: WorkerMetrics | None = None
        self._metrics_server: MetricsServer | None = None
        self._stopping = threading.Event()   # stop leasing
        self._finished = threading.Event()   # background threads exit
        self._wake = Wakeup()
        # Two lease loops when the capacity is large: one leases while the other's batch is
        # being handed out and acked, so a deep queue keeps both server cores busy.
        most = AUTO_PREFETCH_MAX if self.prefetch is None else self.prefetch
        slots = self._thread_slots + self._loop_slots
        self.lease_loops = 2 if slots + most >= PARALLEL_LEASE_CAPACITY else 1
        self._connect()
        self._assemble()
        self._leasers: list[threading.Thread] = []
        self._threads: list[threading.Thread] = []
        self._acker: threading.Thread | None = None
        self._maintainer: Maintainer | None = None

    def _connect(self) -> None:
        """The database side: pools on the leader with failover and retries (worker_db.py),
        and the metrics, which count by the streams it serves."""
        writers = self._thread_slots + (WRITERS if self._loop_slots else 0)
        self._dbs = WorkerDb(self.dsns, pool_size=writers + 1 + self.lease_loops,
                             worker_id=self._id, finished=self._finished,
                             moved=self._moved, connect_timeout=self.connect_timeout,
                             outage=self.outage, pooled=self.settings.pooled)
        self._db = self._dbs.db
        self._retry = self._dbs.retry
        self._retry_db = self._dbs.retry_db
        if self.metrics_port is not None:
            from pgqueue.telemetry.metrics import WorkerMetrics

            # every stream the worker serves, 0 when it holds nothing there: an alert on a
            # missing series is not an alert on 0
            self.metrics = WorkerMetrics(
                lambda: {**dict.fromkeys(self.streams, 0), **self._leases.held_by_stream()},
                kinds=self.app.handlers, streams=self.streams)

    def _assemble(self) -> None:
        """The parts that hold and run jobs: the held leases (a lane per sort of slot,
        capacity.py), the settler, time limits, handler threads, coroutines, lease loops."""
        self._leases = HeldLeases(lanes=lanes_for(self._thread_slots, self._loop_slots,
                                                  self._sync_kinds),
                                  prefetch=self.prefetch, metrics=self.metrics,
                                  lease_loops=self.lease_loops, db=self._db,
                                  retry_db=self._retry_db, freed=self._wake.set,
                                  worker_id=self._id)
        self._settler = JobSettler(self._leases, self._retry_db, self._id)
        # Time limits: told at the limit, given up on a grace period later (deadlines.py).
        self._deadlines = Deadlines(lambda: self.grace_period, self._give_up)
        self._handlers = HandlerThreads(self.app, self._leases, self._settler,
                                        stopping=self._stopping, worker_id=self._id,
                                        deadlines=self._deadlines)
        self._coroutines = (AsyncHandlers(self.app, self._leases, self._settler,
                                          stopping=self._stopping, worker_id=self._id,
                                          deadlines=self._deadlines)
                            if self._loop_slots else None)
        self._hand_out = self._handlers.work.put if self._coroutines is None else self._route
        self._leasing = LeaseLoops(
            app=self.app, streams=self.streams, leases=self._leases, wake=self._wake,
            stopping=self._stopping, retry_db=self._retry_db, hand_out=self._hand_out,
            poll_interval=self.poll_interval, visibility_timeout=self.visibility_timeout,
            node=self.node, worker_id=self._id, outage=self.outage)

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
        """Warn of each stream nothing ever named: most often a typo (registry.py)."""
        known = self._retry(lambda: self._db(observe.known_streams), "read the streams",
                            until=self._stopping)
        if known is not None:
            registry.warn_unknown_streams(self.streams, known)

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

            self._metrics_server = MetricsServer(  # a ValueError: the drain still runs
                self.metrics.registry, host=self.metrics_host, port=self.metrics_port or 0).start()
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
        return keepalive.start(name, loop, self._id)

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
        """A handler still running `grace` seconds past its job's time limit (overrun.py)."""
        overrun.give_up(held, grace, app=self.app, settler=self._settler, leases=self._leases,
                        handlers=self._handlers, coroutines=self._coroutines,
                        worker_id=self.worker_id)

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
