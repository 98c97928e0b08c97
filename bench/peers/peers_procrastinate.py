"""procrastinate's adapter for bench/peers/peers_runner.py (runs in bench/peers/.venv).

procrastinate is imported inside the functions: it is not installed in pgqueue's environment,
where mypy checks this file (hence the `type: ignore[import-not-found]` comments).

Connector: PsycopgConnector (psycopg 3, async pool). Tasks are async no-ops. Processing: one
worker (App.run_worker_async) with `concurrency` parallel jobs; it claims one job per query.
A job counts once its status is `succeeded` in procrastinate_jobs (jobs are kept, the default
delete_jobs="never"). Latency: an idle worker with listen_notify on (the default) and the
default 5 s fetch polling interval.
"""
from __future__ import annotations

import asyncio
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
    {"concurrency": 10, "pool": 12},
    {"concurrency": 50, "pool": 20},
]
LATENCY_SETTING: dict[str, Any] = {"concurrency": 10, "pool": 12}
#: I/O-bound processing (the runner's io phase): async tasks only; the worker's concurrency is
#: the jobs in flight.
IO_SETTINGS: dict[str, list[dict[str, Any]]] = {"async": [{"pool": 12}, {"pool": 40}]}


def version() -> str:
    import procrastinate  # type: ignore[import-not-found]

    return str(procrastinate.__version__)


def _app(dsn: str, pool: int = 4) -> Any:
    import procrastinate

    return procrastinate.App(connector=procrastinate.PsycopgConnector(
        conninfo=dsn, min_size=min(4, pool), max_size=pool))


def setup(dsn: str) -> None:
    async def run() -> None:
        app = _app(dsn)
        async with app.open_async():
            await app.schema_manager.apply_schema_async()

    asyncio.run(run())


def _noop_task(app: Any) -> Any:
    async def noop() -> None:
        return None

    return app.task(name="noop", queue=QUEUE)(noop)


def enqueue_one(dsn: str, n: int) -> float:
    """Seconds to enqueue n jobs, one Task.defer_async call each."""
    async def run() -> float:
        app = _app(dsn)
        task = _noop_task(app)
        async with app.open_async():
            t0 = time.perf_counter()
            for _ in range(n):
                await task.defer_async()
            return time.perf_counter() - t0

    return asyncio.run(run())


def enqueue_batch(dsn: str, n: int, batch: int) -> float:
    """Seconds to enqueue n jobs with Task.batch_defer_async, `batch` jobs per call."""
    async def run() -> float:
        app = _app(dsn)
        task = _noop_task(app)
        async with app.open_async():
            t0 = time.perf_counter()
            for start in range(0, n, batch):
                await task.batch_defer_async(*({} for _ in range(min(batch, n - start))))
            return time.perf_counter() - t0

    return asyncio.run(run())


async def _wait_finished(app: Any, deadline: float) -> None:
    """Wait until no job of the bench queue is todo or doing."""
    query = ("SELECT EXISTS (SELECT 1 FROM procrastinate_jobs WHERE queue_name = %s "
             "AND status IN ('todo', 'doing'))")
    await until_false(app.connector.pool, query, (QUEUE,), deadline)


async def _stop(worker_task: asyncio.Task[Any]) -> None:
    worker_task.cancel()  # procrastinate stops gracefully when its worker task is cancelled
    try:
        await asyncio.wait_for(worker_task, timeout=30)
    except (asyncio.CancelledError, asyncio.TimeoutError):
        pass


def process(dsn: str, n: int, setting: dict[str, Any], max_seconds: float) -> tuple[int, float]:
    """(jobs done, seconds from the first handler start until no job is todo or doing)."""
    return _process(dsn, n, setting, max_seconds, concurrency=setting["concurrency"])


def process_io(dsn: str, n: int, setting: dict[str, Any], inflight: int, wait: float,
               mode: str, max_seconds: float) -> tuple[int, float]:
    """process, each async task awaiting asyncio.sleep(wait), with worker concurrency
    `inflight`."""
    return _process(dsn, n, setting, max_seconds, concurrency=inflight, wait=wait)


def _process(dsn: str, n: int, setting: dict[str, Any], max_seconds: float, *,
             concurrency: int, wait: float | None = None) -> tuple[int, float]:
    async def run() -> tuple[int, float]:
        app = _app(dsn, setting["pool"])
        state = {"count": 0}
        first: list[float] = []
        all_started = asyncio.Event()

        async def handler() -> None:
            if not first:
                first.append(time.perf_counter())
            state["count"] += 1
            if state["count"] >= n:
                all_started.set()
            if wait is not None:
                await asyncio.sleep(wait)

        app.task(name="noop", queue=QUEUE)(handler)
        async with app.open_async():
            t0 = time.perf_counter()
            deadline = t0 + max_seconds
            worker = asyncio.create_task(app.run_worker_async(
                queues=[QUEUE], concurrency=concurrency, install_signal_handlers=False))
            try:
                await asyncio.wait_for(all_started.wait(), timeout=max_seconds)
                await _wait_finished(app, deadline)
            except asyncio.TimeoutError:
                pass
            end = time.perf_counter()
            done = min(state["count"], n)
            await _stop(worker)
        return done, end - (first[0] if first else t0)

    return asyncio.run(run())


def latency_worker(dsn: str, n: int, ready: Callable[[], None],
                   max_seconds: float) -> list[tuple[int, float, float]]:
    """Run an idle worker until n jobs started; [(index, enqueued_at, started_at)]."""
    async def run() -> list[tuple[int, float, float]]:
        app = _app(dsn, LATENCY_SETTING["pool"])
        records: list[tuple[int, float, float]] = []
        enough = asyncio.Event()

        async def lat(t: float, i: int) -> None:
            records.append((i, t, time.time()))
            if len(records) >= n:
                enough.set()

        app.task(name="lat", queue=QUEUE)(lat)
        async with app.open_async():
            worker = asyncio.create_task(app.run_worker_async(
                queues=[QUEUE], concurrency=LATENCY_SETTING["concurrency"],
                install_signal_handlers=False))
            await asyncio.sleep(0.5)
            ready()
            try:
                await asyncio.wait_for(enough.wait(), timeout=max_seconds)
            except asyncio.TimeoutError:
                pass
            await _stop(worker)
        return list(records)

    return asyncio.run(run())


def produce(dsn: str, n: int, interval: float) -> list[float]:
    """Enqueue n latency jobs, one every `interval` seconds, each carrying its enqueue time;
    returns each enqueue call's own duration (seconds)."""
    calls: list[float] = []
    async def run() -> None:
        app = _app(dsn)

        async def lat(t: float, i: int) -> None:
            return None

        task = app.task(name="lat", queue=QUEUE)(lat)
        async with app.open_async():
            due = time.perf_counter()
            for i in range(n):
                pause = due - time.perf_counter()
                if pause > 0:
                    await asyncio.sleep(pause)
                t0 = time.perf_counter()
                await task.defer_async(t=time.time(), i=i)
                calls.append(time.perf_counter() - t0)
                due += interval

    asyncio.run(run())
    return calls

