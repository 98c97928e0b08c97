"""Prometheus metrics: a database's gauges (`pgqueue metrics serve`) and a worker's own
counters and histograms (`pgqueue worker --metrics-port`).

Naming follows Prometheus' conventions: base units (seconds), `_total` for counters, and only
low-cardinality labels (stream, kind, state, outcome, replica; never a job id or a payload).

The database's figures are read at scrape time by gauges.py (Queue.gauges too), a bounded
number of cheap queries: job counts kept by the writes themselves (statement triggers append per-statement
deltas that a fold adds up; no scan of the job table, whose size grows with the queue), one
index probe per stream for the oldest ready job, the op log's seq range, and the small
schedule, worker and replica tables. A scrape that cannot reach the database reports
`pgqueue_database_up 0` and nothing else, rather than failing.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Iterator
from typing import TYPE_CHECKING, Protocol
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from pgqueue.db import connection
from pgqueue.errors import ConnectionFailed, PgQueueError
from pgqueue.models import JOB_STATES, QueueGauges
from pgqueue.telemetry import gauges, labels
from pgqueue.telemetry.outage import Outage

if TYPE_CHECKING:
    from pgqueue.models import Lease

log = logging.getLogger("pgqueue.metrics")


class _Stream(Protocol):
    @property
    def stream(self) -> str: ...


class Reclaims(Protocol):
    """What a maintenance pass reports of the leases it reclaimed (maintain.PassResult)."""

    @property
    def reclaimed_jobs(self) -> tuple[_Stream, ...]: ...

#: What a finished job's outcome can be in pgqueue_jobs_finished_total.
OUTCOMES = ("acked", "retried", "dead", "lost", "undecodable", "returned", "cancelled",
            "deferred")
#: Handler times and waits from a millisecond to an hour.
SECONDS_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                   60.0, 300.0, 900.0, 3600.0)


#: A scrape gives up on an unreachable database after this many seconds (Prometheus' own
#: scrape timeout is 10 s by default).
CONNECT_TIMEOUT_SECONDS = 5


class DatabaseCollector(Collector):
    """The gauges of one database, read from it at each scrape on a connection of its own
    (opened for the scrape: a scrape every few seconds costs one connection at a time, and
    an unreachable database fails it within CONNECT_TIMEOUT_SECONDS). An outage is logged
    once, once a minute and once at its end, not at every scrape."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._outage = Outage(log, lambda: "metrics")

    def _read(self) -> QueueGauges:
        with connection.connect(self._dsn, connect_timeout=CONNECT_TIMEOUT_SECONDS) as conn:
            return gauges.gauges(conn)

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("pgqueue_database_up",
                               "1 when the scrape read the database, 0 when it could not.")
        try:
            g = self._read()
        except PgQueueError as exc:
            if isinstance(exc, ConnectionFailed):
                self._outage.failed("scrape", exc)
            else:  # reachable, but not readable (no schema, no rights): said at each scrape
                log.warning("metrics: cannot read the database: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        self._outage.ok()
        up.add_metric([], 1)
        yield up
        # the streams with the most jobs by name, the rest summed (labels.py)
        names = labels.stream_labels({s: sum(g.jobs.get((s, st), 0) for st in JOB_STATES)
                                      for s in g.streams})
        counts: dict[tuple[str, str], int] = {}
        ages: dict[str, float] = {}
        for stream in g.streams:
            name = names[stream]
            for state in JOB_STATES:
                counts[name, state] = counts.get((name, state), 0) + g.jobs.get((stream, state), 0)
            age = max(0.0, g.oldest_pending_age_seconds.get(stream) or 0.0)
            ages[name] = max(ages.get(name, 0.0), age)
        jobs = GaugeMetricFamily("pgqueue_jobs", "Jobs by stream and state (dead letters: dead).",
                                 labels=["stream", "state"])
        for (name, state), n in counts.items():
            jobs.add_metric([name, state], n)
        yield jobs
        oldest = GaugeMetricFamily(
            "pgqueue_oldest_pending_age_seconds",
            "Seconds since the stream's oldest ready job became leasable (0: none ready).",
            labels=["stream"])
        for name, age in ages.items():
            oldest.add_metric([name], age)
        yield oldest
        yield GaugeMetricFamily("pgqueue_op_log_ops", "Ops the op log keeps.", value=g.op_log_ops)
        lag_ops = GaugeMetricFamily("pgqueue_replica_lag_ops",
                                    "Ops the replica has not applied yet.", labels=["replica"])
        lag_seconds = GaugeMetricFamily("pgqueue_replica_lag_seconds",
                                        "Age of the oldest op the replica has not applied.",
                                        labels=["replica"])
        for replica in g.replicas:
            lag_ops.add_metric([replica["name"]], float(replica["lag_ops"] or 0))
            lag_seconds.add_metric([replica["name"]], float(replica["lag_seconds"] or 0.0))
        yield lag_ops
        yield lag_seconds
        schedules = GaugeMetricFamily("pgqueue_schedules", "Cron schedules by stream and paused.",
                                      labels=["stream", "paused"])
        by_label: dict[tuple[str, bool], int] = {}
        for (stream, paused), n in g.schedules.items():
            key = (names.get(stream, labels.OTHER_STREAMS), paused)
            by_label[key] = by_label.get(key, 0) + n
        for name in sorted({s for s, _ in by_label}):
            for paused in (False, True):
                schedules.add_metric([name, str(paused).lower()], by_label.get((name, paused), 0))
        yield schedules
        workers = GaugeMetricFamily("pgqueue_workers",
                                    "Registered workers, live or stale (no recent heartbeat).",
                                    labels=["state"])
        for state in ("live", "stale"):
            workers.add_metric([state], g.workers[state])
        yield workers


class WorkerMetrics:
    """One worker's counters and histograms, in a registry of their own."""

    def __init__(self, held_by_stream: Callable[[], dict[str, int]],
                 kinds: Collection[str] = (), streams: Collection[str] | None = None) -> None:
        """
        :param held_by_stream: the leases the worker holds now, by stream (read at scrape).
        :param kinds: the kinds the worker's App handles: labelled by name, any other kind
            a lease brings as labels.UNKNOWN_KIND.
        :param streams: the worker's streams: the reclaims its maintenance pass makes in any
            other are labelled labels.OTHER_STREAMS (None: every stream by name).
        """
        self._kinds = frozenset(kinds)
        self._streams = None if streams is None else frozenset(streams)
        self.registry = CollectorRegistry(auto_describe=True)
        self.finished = Counter(
            "pgqueue_jobs_finished", "Jobs this worker let go of, by outcome: acked, retried "
            "(nacked, due again), dead, lost (its lease), undecodable, returned (the drain).",
            ["stream", "kind", "outcome"], registry=self.registry)
        self.duration = Histogram(
            "pgqueue_job_duration_seconds", "Handler time of the jobs this worker ran.",
            ["stream", "kind"], buckets=SECONDS_BUCKETS, registry=self.registry)
        self.wait = Histogram(
            "pgqueue_job_wait_seconds", "From a job's due time to its handler's start.",
            ["stream", "kind"], buckets=SECONDS_BUCKETS, registry=self.registry)
        self.reclaimed = Counter(
            "pgqueue_leases_reclaimed", "Expired leases the maintenance pass this worker ran "
            "reclaimed.", ["stream"], registry=self.registry)
        self.registry.register(_HeldCollector(held_by_stream))

    def job_finished(self, lease: Lease, outcome: str) -> None:
        """The worker let go of a job (an outcome of OUTCOMES)."""
        self.finished.labels(lease.stream, labels.kind_label(lease.kind, self._kinds),
                             outcome).inc()

    def ran(self, lease: Lease, seconds: float) -> None:
        """A handler ran `seconds`; its wait is from the job's due time (the database's clock)
        to its start (this host's; a skew between the two shows here, never below 0)."""
        kind = labels.kind_label(lease.kind, self._kinds)
        self.duration.labels(lease.stream, kind).observe(seconds)
        if lease.due_at is not None:
            wait = time.time() - seconds - lease.due_at.timestamp()
            self.wait.labels(lease.stream, kind).observe(max(0.0, wait))

    def reclaimed_by(self, result: Reclaims) -> None:
        """A maintenance pass this worker ran reclaimed these leases."""
        for job in result.reclaimed_jobs:
            own = self._streams is None or job.stream in self._streams
            self.reclaimed.labels(labels.printable(job.stream) if own
                                  else labels.OTHER_STREAMS).inc()


class _HeldCollector(Collector):
    """pgqueue_leases_held, read from the worker's held leases at each scrape."""

    def __init__(self, held_by_stream: Callable[[], dict[str, int]]) -> None:
        self._held = held_by_stream

    @staticmethod
    def _family() -> GaugeMetricFamily:
        return GaugeMetricFamily("pgqueue_leases_held", "Leases this worker holds now.",
                                 labels=["stream"])

    def describe(self) -> Iterator[Metric]:
        yield self._family()  # the registry's check for duplicate names: no reading yet

    def collect(self) -> Iterator[Metric]:
        held = self._family()
        for stream, count in sorted(self._held().items()):
            held.add_metric([stream], count)
        yield held


class MetricsServer:
    """`/metrics` of a registry over HTTP on a daemon thread: prometheus_client's own server
    (threaded, quiet), with the port it bound (0: any free one) and a way to stop it."""

    def __init__(self, registry: CollectorRegistry, *, host: str, port: int) -> None:
        self._registry = registry
        self.host, self.port = host, port
        self._server: WSGIServer | None = None

    def start(self) -> MetricsServer:
        """Listen, or raise ValueError naming metrics_port when the address cannot be had."""
        try:
            self._server, _thread = start_http_server(self.port, addr=self.host,
                                                      registry=self._registry)
        except OSError as exc:
            raise ValueError(f"metrics_port: cannot listen on {self.host}:{self.port}: "
                             f"{exc.strerror or exc}") from None
        self.port = int(self._server.server_port)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def database_registry(dsn: str) -> CollectorRegistry:
    """A registry holding the gauges of the database at `dsn` (read at each scrape)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector(dsn))
    return registry
