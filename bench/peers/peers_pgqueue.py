"""pgqueue's adapter for bench/peers/peers_runner.py (runs in pgqueue's own virtual environment).

Processing: one pgqueue.Worker (handler threads, batched leases up to free capacity, batched
acks; maintenance on, as by default) in this process; a job counts once its ack is written
(worker.processed). Latency: an idle worker with a 5 s poll interval, so it wakes on
LISTEN/NOTIFY.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pgqueue

STREAM = "bench"
PAYLOAD = b"{}"

#: Candidate processing settings; the bench takes the fastest. The first is the Worker's
#: defaults (concurrency 4, automatic prefetch): bench/peers/peers.py says how close it comes.
SETTINGS: list[dict[str, Any]] = [
    {},
    {"concurrency": 16, "prefetch": 0},
    {"concurrency": 64, "prefetch": 0},
    {"concurrency": 32, "prefetch": 500},   # capacity >= 256: two lease loops
    {"concurrency": 16, "prefetch": 2000},
    {"concurrency": 8, "prefetch": 4000},
]
LATENCY_SETTING: dict[str, Any] = {"concurrency": 16, "poll_interval": 5.0}
#: I/O-bound processing (the runner's io phase): the Worker's defaults but for the slots, which
#: the phase sets to the jobs in flight (coroutines for async def, threads for def).
IO_SETTINGS: dict[str, list[dict[str, Any]]] = {"async": [{}], "sync": [{}]}


def version() -> str:
    return pgqueue.__version__


def setup(dsn: str) -> None:
    pgqueue.migrate(dsn)


def enqueue_one(dsn: str, n: int) -> float:
    """Seconds to enqueue n jobs, one Queue.enqueue call (one round trip, one commit) each."""
    with pgqueue.Queue(dsn, stream=STREAM) as q:
        t0 = time.perf_counter()
        for _ in range(n):
            q.enqueue(PAYLOAD, kind="noop")
        return time.perf_counter() - t0


def enqueue_batch(dsn: str, n: int, batch: int) -> float:
    """Seconds to enqueue n jobs with Queue.enqueue_many, `batch` jobs per call."""
    with pgqueue.Queue(dsn, stream=STREAM) as q:
        t0 = time.perf_counter()
        for start in range(0, n, batch):
            q.enqueue_many([pgqueue.NewJob(PAYLOAD, kind="noop")
                            for _ in range(min(batch, n - start))])
        return time.perf_counter() - t0


def enqueue_concurrent(dsn: str, n: int, tasks: int) -> float:
    """Seconds for `tasks` asyncio tasks to enqueue n jobs, one AsyncQueue.enqueue call each,
    on one AsyncQueue with a pool of 8 connections (as pgqueuer's pool below)."""
    import asyncio

    async def run() -> float:
        async with pgqueue.AsyncQueue(dsn, stream=STREAM, pool_size=8) as q:
            share = [n // tasks + (1 if i < n % tasks else 0) for i in range(tasks)]

            async def produce(k: int) -> None:
                for _ in range(k):
                    await q.enqueue(PAYLOAD, kind="noop")

            t0 = time.perf_counter()
            await asyncio.gather(*(produce(k) for k in share))
            return time.perf_counter() - t0

    return asyncio.run(run())


def _start(app: pgqueue.App, dsn: str, **options: Any) -> tuple[pgqueue.Worker, threading.Thread]:
    worker = pgqueue.Worker(app, dsn, streams=[STREAM], **options)
    thread = threading.Thread(target=worker.run, name="bench-worker", daemon=True)
    thread.start()
    return worker, thread


def process(dsn: str, n: int, setting: dict[str, Any], max_seconds: float) -> tuple[int, float]:
    """(jobs done, seconds from the first handler start until n acks are written)."""
    app = pgqueue.App()
    first: list[float] = []

    @app.job("noop")
    def noop(job: pgqueue.JobContext) -> None:
        if not first:
            first.append(time.perf_counter())

    return _work(app, dsn, n, setting, max_seconds, first)


def process_io(dsn: str, n: int, setting: dict[str, Any], inflight: int, wait: float,
               mode: str, max_seconds: float) -> tuple[int, float]:
    """process, the handlers waiting `wait` seconds: an async def awaiting asyncio.sleep on
    the worker's event loop with async_concurrency=inflight, or a def calling time.sleep on
    `inflight` handler threads."""
    import asyncio

    app = pgqueue.App()
    first: list[float] = []
    if mode == "async":
        @app.job("noop")
        async def wait_async(job: pgqueue.JobContext) -> None:
            if not first:
                first.append(time.perf_counter())
            await asyncio.sleep(wait)

        slots = {"async_concurrency": inflight}
    else:
        @app.job("noop")
        def wait_sync(job: pgqueue.JobContext) -> None:
            if not first:
                first.append(time.perf_counter())
            time.sleep(wait)

        slots = {"concurrency": inflight}
    return _work(app, dsn, n, {**slots, **setting}, max_seconds, first)


def _work(app: pgqueue.App, dsn: str, n: int, setting: dict[str, Any], max_seconds: float,
          first: list[float]) -> tuple[int, float]:
    """Run a worker until n acks are written (or max_seconds); (done, seconds from the first
    handler start, which the handlers note in `first`)."""
    t0 = time.perf_counter()
    worker, thread = _start(app, dsn, **{"poll_interval": 1.0, **setting})
    deadline = t0 + max_seconds
    while worker.processed < n and time.perf_counter() < deadline:
        time.sleep(0.002)
    end = time.perf_counter()
    done = worker.processed
    worker.stop()
    thread.join(timeout=60)
    return min(done, n), end - (first[0] if first else t0)


def latency_worker(dsn: str, n: int, ready: Callable[[], None],
                   max_seconds: float) -> list[tuple[int, float, float]]:
    """Run an idle worker until n jobs started; [(index, enqueued_at, started_at)]."""
    app = pgqueue.App()
    records: list[tuple[int, float, float]] = []

    @app.job("lat")
    def lat(job: pgqueue.JobContext) -> None:
        started = time.time()
        body = job.json()
        records.append((int(body["i"]), float(body["t"]), started))

    worker, thread = _start(app, dsn, **LATENCY_SETTING)
    deadline = time.monotonic() + max_seconds
    while worker.worker_id == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    ready()
    while len(records) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    worker.stop()
    thread.join(timeout=60)
    return list(records)


def produce(dsn: str, n: int, interval: float) -> list[float]:
    """Enqueue n latency jobs, one every `interval` seconds, each carrying its enqueue time;
    returns each enqueue call's own duration (seconds)."""
    calls: list[float] = []
    with pgqueue.Queue(dsn, stream=STREAM) as q:
        due = time.perf_counter()
        for i in range(n):
            pause = due - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            t0 = time.perf_counter()
            q.enqueue({"t": time.time(), "i": i}, kind="lat")
            calls.append(time.perf_counter() - t0)
            due += interval
    return calls

