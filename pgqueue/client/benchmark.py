"""The in-repo benchmark behind `pgqueue bench` and bench/throughput.py.

Also what the scripts in bench/ share: a server to run on, scratch databases, a table.

It measures, on one database and its own stream: enqueue one job per call (one round trip, one
commit each), enqueue in batches, and lease+ack with a batch of 1 and of 100, which drains every
job it enqueued (it leaves nothing behind but op-log history). Figures only: nothing here is
asserted anywhere; the caller prints them.
"""
from __future__ import annotations

import re
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from psycopg.conninfo import make_conninfo
from rich.console import Console
from rich.table import Table

from pgqueue.client.queue import Queue
from pgqueue.db import connection, queries
from pgqueue.db.embedded import EmbeddedServer
from pgqueue.models import NewJob

Progress = Callable[[str, int, int], None]  # (phase, done, total)


@dataclass(frozen=True)
class Figure:
    """One measured rate."""

    name: str
    value: float
    unit: str


#: A ring's partition (pgqueue.ready_3, job_count_delta_5 and their indexes), by its table.
_RING = re.compile(r"^(ready|job_count_delta)_[0-7](_.*)?$"
                   r"|^(op_log|lease_expiry)_(?:[0-9]|[12][0-9]|3[01])(_.*)?$")


def family(relname: str) -> str:
    """A relation's name, with a ring's partitions and their indexes named after the ring's
    table (which period's partition a row went to is of no interest to a benchmark)."""
    found = _RING.match(relname)
    if not found:
        return relname
    return (found.group(1) or found.group(3)) + ((found.group(2) or found.group(4)) or "")


def enqueue_single(q: Queue, n: int, progress: Progress) -> Figure:
    t0 = time.perf_counter()
    for i in range(n):
        q.enqueue(b"{}")
        if i % 100 == 0:
            progress("enqueue, one at a time", i, n)
    rate = n / (time.perf_counter() - t0)
    return Figure("enqueue, one per call", rate, "jobs/s")


def enqueue_batched(q: Queue, n: int, batch: int, progress: Progress) -> Figure:
    jobs = [NewJob(b"{}") for _ in range(batch)]
    t0 = time.perf_counter()
    for done in range(0, n, batch):
        q.enqueue_many(jobs)
        progress("enqueue, batched", done, n)
    rate = n / (time.perf_counter() - t0)
    return Figure(f"enqueue, batches of {batch}", rate, "jobs/s")


def lease_ack(q: Queue, n: int, batch: int, progress: Progress) -> Figure:
    """Drain n jobs (already queued) with lease(batch) + ack_many, one worker."""
    done = 0
    t0 = time.perf_counter()
    while done < n:
        leases = q.lease(batch)
        if not leases:
            break
        q.ack_many(leases)
        done += len(leases)
        progress(f"lease+ack, batches of {batch}", done, n)
    rate = done / (time.perf_counter() - t0)
    return Figure(f"lease+ack, batches of {batch}", rate, "jobs/s")


def run(dsn: str, *, jobs: int = 20_000, single: int = 2_000,
        progress: Progress | None = None) -> list[Figure]:
    """Run every phase on stream "pgqueue-bench" of the (migrated) database at `dsn`."""
    report = progress or (lambda phase, done, total: None)
    with Queue(dsn, stream="pgqueue-bench", pool_size=2) as q:
        left = sum(s.count for s in q.stats() if s.stream == q.stream)
        if left:
            raise ValueError(f"stream {q.stream!r} already holds {left} job(s); the benchmark "
                             "needs it empty")
        figures = [enqueue_single(q, single, report), enqueue_batched(q, jobs, 500, report)]
        total = single + (jobs // 500) * 500
        figures.append(lease_ack(q, total // 4, 1, report))
        figures.append(lease_ack(q, total - total // 4, 100, report))
    return figures


def server_version(dsn: str) -> str:
    """The server's version string."""
    with connection.connect(dsn) as conn:
        return str(queries.scalar(conn, "server_version"))


# -- shared by the scripts in bench/ ------------------------------------------------------------


@contextmanager
def server(dsn: str | None, prefix: str) -> Iterator[tuple[str, bool]]:
    """(server DSN, embedded?): the given server, or an embedded one (fsync on, default
    settings) started in a temporary directory and stopped afterwards."""
    if dsn:
        yield dsn, False
        return
    embedded = EmbeddedServer(Path(tempfile.mkdtemp(prefix=f"pgqueue-{prefix}-")))
    try:
        yield embedded.start(), True
    finally:
        embedded.stop()


def fresh_database(server_dsn: str, name: str, *, migrate: bool = True) -> str:
    """Drop and create `name` on the server (migrated unless asked not to); its DSN."""
    with connection.connect(server_dsn) as conn:
        queries.drop_database(conn, name)
        queries.create_database(conn, name)
    dsn = make_conninfo(server_dsn, dbname=name)
    if migrate:
        from pgqueue.db import schema  # alembic only when migrating

        schema.migrate(dsn)
    return dsn


def percentile(values: Sequence[float], pct: float) -> float:
    """The pct-th percentile (0-100) by linear interpolation between closest ranks; NaN when
    there are no values. (bench/peers/peers_runner.py keeps its own copy: it runs where pgqueue is
    not installed.)"""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * pct / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def print_figures(console: Console, title: str, rows: Sequence[tuple[str, str]]) -> None:
    """A two-column table of measures and values."""
    table = Table(title=title)
    table.add_column("measure")
    table.add_column("value", justify="right")
    for measure, value in rows:
        table.add_row(measure, value)
    console.print(table)
