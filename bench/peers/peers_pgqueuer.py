"""pgqueuer's adapter for bench/peers/peers_runner.py (runs in bench/peers/.venv).

pgqueuer is imported inside the functions: it is not installed in pgqueue's environment, where
mypy checks this file (hence the `type: ignore[import-not-found]` comments).

Driver: asyncpg (pgqueuer's recommended driver), one connection (AsyncpgDriver) or a pool
(AsyncpgPoolDriver). Processing: one QueueManager; a job counts once pgqueuer has removed it
from its queue table (its completion log buffer flushed). Latency: an idle QueueManager, woken
by the NOTIFY its enqueue trigger sends (dequeue_timeout 30 s, the default).
"""
from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

PAYLOAD = b"{}"

#: Candidate processing settings; the bench takes the fastest.
SETTINGS: list[dict[str, Any]] = [
    {"batch_size": 10, "driver": "connection"},
    {"batch_size": 100, "driver": "connection"},
    {"batch_size": 100, "driver": "pool"},
    {"batch_size": 500, "driver": "connection"},
    {"batch_size": 1000, "driver": "connection"},
]
LATENCY_SETTING: dict[str, Any] = {"batch_size": 10, "driver": "connection"}
#: I/O-bound processing (the runner's io phase): async entrypoints only; the worker's
#: max_concurrent_tasks is the jobs in flight (at least twice the batch, pgqueuer requires).
IO_SETTINGS: dict[str, list[dict[str, Any]]] = {"async": [
    {"batch_size": 10, "driver": "connection"},
    {"batch_size": 100, "driver": "connection"},
    {"batch_size": 250, "driver": "pool"},
]}


def version() -> str:
    import pgqueuer  # type: ignore[import-not-found]

    return str(pgqueuer.__version__)


def _connect_kwargs(dsn: str) -> dict[str, Any]:
    """asyncpg takes keywords (or a URL), not a libpq key=value string."""
    from psycopg.conninfo import conninfo_to_dict

    parts = conninfo_to_dict(dsn)
    kwargs: dict[str, Any] = {
        "host": parts.get("host") or parts.get("hostaddr") or "localhost",
        "port": int(parts.get("port") or 5432),
        "user": parts.get("user"),
        "database": parts.get("dbname"),
    }
    if parts.get("password"):
        kwargs["password"] = parts["password"]
    return kwargs


async def _connection(dsn: str) -> Any:
    import asyncpg  # type: ignore[import-not-found]

    return await asyncpg.connect(**_connect_kwargs(dsn))


async def _queries(dsn: str, driver: str = "connection") -> tuple[Any, Any]:
    """(pgqueuer Queries, the connection or pool to close afterwards)."""
    import asyncpg
    from pgqueuer import AsyncpgDriver, AsyncpgPoolDriver, Queries

    if driver == "pool":
        pool = await asyncpg.create_pool(min_size=4, max_size=8, **_connect_kwargs(dsn))
        return Queries(AsyncpgPoolDriver(pool)), pool
    conn = await _connection(dsn)
    return Queries(AsyncpgDriver(conn)), conn


def setup(dsn: str) -> None:
    async def run() -> None:
        queries, conn = await _queries(dsn)
        try:
            await queries.install()
        finally:
            await conn.close()

    asyncio.run(run())


def _queue_table() -> str:
    from pgqueuer.domain.settings import db_settings  # type: ignore[import-not-found]

    return str(db_settings().queue_table)


def enqueue_one(dsn: str, n: int) -> float:
    """Seconds to enqueue n jobs, one Queries.enqueue call each."""
    async def run() -> float:
        queries, conn = await _queries(dsn)
        try:
            t0 = time.perf_counter()
            for _ in range(n):
                await queries.enqueue("noop", PAYLOAD)
            return time.perf_counter() - t0
        finally:
            await conn.close()

    return asyncio.run(run())


def enqueue_batch(dsn: str, n: int, batch: int) -> float:
    """Seconds to enqueue n jobs with Queries.enqueue given lists, `batch` jobs per call."""
    async def run() -> float:
        queries, conn = await _queries(dsn)
        try:
            t0 = time.perf_counter()
            for start in range(0, n, batch):
                k = min(batch, n - start)
                await queries.enqueue(["noop"] * k, [PAYLOAD] * k, [0] * k)
            return time.perf_counter() - t0
        finally:
            await conn.close()

    return asyncio.run(run())


def enqueue_concurrent(dsn: str, n: int, tasks: int) -> float:
    """Seconds for `tasks` asyncio tasks to enqueue n jobs, one Queries.enqueue call each, on
    an asyncpg pool of up to 8 connections (AsyncpgPoolDriver)."""
    async def run() -> float:
        queries, pool = await _queries(dsn, driver="pool")
        try:
            share = [n // tasks + (1 if i < n % tasks else 0) for i in range(tasks)]

            async def produce(k: int) -> None:
                for _ in range(k):
                    await queries.enqueue("noop", PAYLOAD)

            t0 = time.perf_counter()
            await asyncio.gather(*(produce(k) for k in share))
            return time.perf_counter() - t0
        finally:
            await pool.close()

    return asyncio.run(run())


async def _wait_empty(conn: Any, deadline: float) -> None:
    """Wait until the queue table holds no job (pgqueuer deletes a job when it logs its end)."""
    query = f"SELECT EXISTS (SELECT 1 FROM {_queue_table()})"
    while await conn.fetchval(query) and time.perf_counter() < deadline:
        await asyncio.sleep(0.002)


def process(dsn: str, n: int, setting: dict[str, Any], max_seconds: float) -> tuple[int, float]:
    """(jobs done, seconds from the first handler start until the queue table is empty)."""
    return _process(dsn, n, setting, max_seconds)


def process_io(dsn: str, n: int, setting: dict[str, Any], inflight: int, wait: float,
               mode: str, max_seconds: float) -> tuple[int, float]:
    """process, each async entrypoint awaiting asyncio.sleep(wait), at most `inflight` at
    once (the worker's max_concurrent_tasks; its batch at most half of it, as pgqueuer wants)."""
    return _process(dsn, n, setting, max_seconds, wait=wait, inflight=inflight)


def _process(dsn: str, n: int, setting: dict[str, Any], max_seconds: float, *,
             wait: float | None = None, inflight: int | None = None) -> tuple[int, float]:
    from pgqueuer import QueueManager

    async def run() -> tuple[int, float]:
        queries, conn = await _queries(dsn, setting["driver"])
        qm = QueueManager(queries)
        state = {"count": 0}
        first: list[float] = []
        all_started = asyncio.Event()

        async def handler(job: Any) -> None:
            if not first:
                first.append(time.perf_counter())
            state["count"] += 1
            if state["count"] >= n:
                all_started.set()
            if wait is not None:
                await asyncio.sleep(wait)

        qm.entrypoint("noop")(handler)
        watcher = await _connection(dsn)
        t0 = time.perf_counter()
        deadline = t0 + max_seconds
        options: dict[str, Any] = {"batch_size": setting["batch_size"]}
        if inflight is not None:
            options = {"batch_size": min(setting["batch_size"], inflight // 2),
                       "max_concurrent_tasks": inflight}
        task = asyncio.create_task(qm.run(**options))
        try:
            await asyncio.wait_for(all_started.wait(), timeout=max_seconds)
            await _wait_empty(watcher, deadline)
        except asyncio.TimeoutError:
            pass
        end = time.perf_counter()
        done = min(state["count"], n)
        qm.shutdown.set()
        try:
            await asyncio.wait_for(task, timeout=30)
        finally:
            await conn.close()
            await watcher.close()
        return done, end - (first[0] if first else t0)

    return asyncio.run(run())


def latency_worker(dsn: str, n: int, ready: Callable[[], None],
                   max_seconds: float) -> list[tuple[int, float, float]]:
    """Run an idle QueueManager until n jobs started; [(index, enqueued_at, started_at)]."""
    from pgqueuer import QueueManager

    async def run() -> list[tuple[int, float, float]]:
        queries, conn = await _queries(dsn, LATENCY_SETTING["driver"])
        qm = QueueManager(queries)
        records: list[tuple[int, float, float]] = []
        enough = asyncio.Event()

        async def lat(job: Any) -> None:
            started = time.time()
            body = json.loads(job.payload)
            records.append((int(body["i"]), float(body["t"]), started))
            if len(records) >= n:
                enough.set()

        qm.entrypoint("lat")(lat)
        task = asyncio.create_task(qm.run(batch_size=LATENCY_SETTING["batch_size"]))
        await asyncio.sleep(0.5)  # verify_structure and LISTEN happen first in run()
        ready()
        try:
            await asyncio.wait_for(enough.wait(), timeout=max_seconds)
        except asyncio.TimeoutError:
            pass
        qm.shutdown.set()
        try:
            await asyncio.wait_for(task, timeout=30)
        finally:
            await conn.close()
        return list(records)

    return asyncio.run(run())


def produce(dsn: str, n: int, interval: float) -> list[float]:
    """Enqueue n latency jobs, one every `interval` seconds, each carrying its enqueue time;
    returns each enqueue call's own duration (seconds)."""
    calls: list[float] = []
    async def run() -> None:
        queries, conn = await _queries(dsn)
        try:
            due = time.perf_counter()
            for i in range(n):
                pause = due - time.perf_counter()
                if pause > 0:
                    await asyncio.sleep(pause)
                t0 = time.perf_counter()
                await queries.enqueue("lat", json.dumps({"t": time.time(), "i": i}).encode())
                calls.append(time.perf_counter() - t0)
                due += interval
        finally:
            await conn.close()

    asyncio.run(run())
    return calls
