"""chancy's adapter for bench/peers/peers_runner.py (runs in bench/peers/.venv).

chancy is imported inside the functions: it is not installed in pgqueue's environment, where
mypy checks this file (hence the `type: ignore[import-not-found]` comments).

Jobs are the async no-ops below, found by chancy through their import path
(`peers_chancy.noop`); the worker runs them with the AsyncExecutor. Chancy runs with its
default plugins (leadership, pruner, recovery, metrics, workflow) and a logger at WARNING (its
default logger writes a line per job at INFO). Processing: one Worker on a queue declared with
`concurrency` and eager polling; a job counts once its state is `succeeded` in chancy_jobs
(the worker writes job updates in batches, every second). Latency: an idle worker on a queue
with the default 5 s polling interval, woken by chancy's `queue.pushed` NOTIFY.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # mypy reads the repository; the runner imports adapters from bench/ itself
    from bench.peers.peers_wait import until_false
else:
    from peers_wait import until_false

QUEUE = "bench"

#: Candidate processing settings; the bench takes the fastest.
SETTINGS: list[dict[str, Any]] = [
    {"concurrency": 16, "executor": "async"},
    {"concurrency": 64, "executor": "async"},
    {"concurrency": 256, "executor": "async"},
]
LATENCY_SETTING: dict[str, Any] = {"concurrency": 16, "executor": "async", "polling_interval": 5}


class _State:
    """What the job functions below report to the process measuring them."""

    target = 0
    count = 0
    first = 0.0
    records: list[tuple[int, float, float]] = []  # noqa: RUF012
    reached: asyncio.Event | None = None


async def noop() -> None:
    if _State.count == 0:
        _State.first = time.perf_counter()
    _State.count += 1
    if _State.count >= _State.target and _State.reached is not None:
        _State.reached.set()


async def lat(t: float, i: int) -> None:
    _State.records.append((i, t, time.time()))
    if len(_State.records) >= _State.target and _State.reached is not None:
        _State.reached.set()


def version() -> str:
    from importlib.metadata import version as dist_version

    return dist_version("chancy")


def _chancy(dsn: str) -> Any:
    from chancy import Chancy  # type: ignore[import-not-found]

    log = logging.getLogger("bench.chancy")
    log.setLevel(logging.WARNING)
    if not log.handlers:
        log.addHandler(logging.StreamHandler())
    return Chancy(dsn, log=log)


def _job(func: Callable[..., Any], **kwargs: Any) -> Any:
    from chancy import Job

    return Job.from_func(func, queue=QUEUE, kwargs=kwargs)


def setup(dsn: str) -> None:
    async def run() -> None:
        async with _chancy(dsn) as chancy:
            await chancy.migrate()

    asyncio.run(run())


def enqueue_one(dsn: str, n: int) -> float:
    """Seconds to enqueue n jobs, one Chancy.push call (one transaction) each."""
    async def run() -> float:
        async with _chancy(dsn) as chancy:
            t0 = time.perf_counter()
            for _ in range(n):
                await chancy.push(_job(noop))
            return time.perf_counter() - t0

    return asyncio.run(run())


def enqueue_batch(dsn: str, n: int, batch: int) -> float:
    """Seconds to enqueue n jobs with Chancy.push_many (one transaction per `batch` jobs)."""
    async def run() -> float:
        async with _chancy(dsn) as chancy:
            t0 = time.perf_counter()
            jobs = [_job(noop) for _ in range(n)]
            async for _refs in chancy.push_many(jobs, batch_size=batch):
                pass
            return time.perf_counter() - t0

    return asyncio.run(run())


async def _declare(chancy: Any, setting: dict[str, Any], polling_interval: int,
                   eager: bool) -> None:
    from chancy import Chancy, Queue

    executor = {"async": Chancy.Executor.Async, "thread": Chancy.Executor.Threaded}
    await chancy.declare(Queue(QUEUE, concurrency=setting["concurrency"],
                               executor=executor[setting["executor"]],
                               polling_interval=polling_interval, eager_polling=eager),
                         upsert=True)


async def _wait_finished(chancy: Any, deadline: float) -> None:
    """Wait until no job of the bench queue is pending, running or retrying."""
    query = (f"SELECT EXISTS (SELECT 1 FROM {chancy.prefix}jobs WHERE queue = %s "
             "AND state NOT IN ('succeeded', 'failed'))")
    await until_false(chancy.pool, query, (QUEUE,), deadline)


def process(dsn: str, n: int, setting: dict[str, Any], max_seconds: float) -> tuple[int, float]:
    """(jobs done, seconds from the first handler start until no job is left unfinished)."""
    from chancy import Worker

    async def run() -> tuple[int, float]:
        _State.target, _State.count, _State.reached = n, 0, asyncio.Event()
        async with _chancy(dsn) as chancy:
            await _declare(chancy, setting, 1, True)
            t0 = time.perf_counter()
            deadline = t0 + max_seconds
            async with Worker(chancy, register_signal_handlers=False):
                try:
                    await asyncio.wait_for(_State.reached.wait(), timeout=max_seconds)
                    await _wait_finished(chancy, deadline)
                except asyncio.TimeoutError:
                    pass
                end = time.perf_counter()
            done = min(_State.count, n)
        return done, end - (_State.first if done else t0)

    return asyncio.run(run())


def latency_worker(dsn: str, n: int, ready: Callable[[], None],
                   max_seconds: float) -> list[tuple[int, float, float]]:
    """Run an idle worker until n jobs started; [(index, enqueued_at, started_at)]."""
    from chancy import Worker

    async def run() -> list[tuple[int, float, float]]:
        _State.target, _State.records, _State.reached = n, [], asyncio.Event()
        async with _chancy(dsn) as chancy:
            await _declare(chancy, LATENCY_SETTING, LATENCY_SETTING["polling_interval"], False)
            async with Worker(chancy, register_signal_handlers=False):
                await asyncio.sleep(0.5)
                ready()
                try:
                    await asyncio.wait_for(_State.reached.wait(), timeout=max_seconds)
                except asyncio.TimeoutError:
                    pass
        return list(_State.records)

    return asyncio.run(run())


def produce(dsn: str, n: int, interval: float) -> list[float]:
    """Enqueue n latency jobs, one every `interval` seconds, each carrying its enqueue time;
    returns each enqueue call's own duration (seconds)."""
    calls: list[float] = []
    async def run() -> None:
        async with _chancy(dsn) as chancy:
            due = time.perf_counter()
            for i in range(n):
                pause = due - time.perf_counter()
                if pause > 0:
                    await asyncio.sleep(pause)
                t0 = time.perf_counter()
                await chancy.push(_job(lat, t=time.time(), i=i))
                calls.append(time.perf_counter() - t0)
                due += interval

    asyncio.run(run())
    return calls
