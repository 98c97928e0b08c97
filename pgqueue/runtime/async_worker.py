"""AsyncWorker: a Worker run from asyncio code (a FastAPI lifespan, an asyncio service).

The worker's own threads do the work (leasing, handler threads, its event loop for async
handlers), so the caller's event loop is never blocked: `run()` waits for the worker on a
thread of its own and returns once it has drained. Signals are the caller's to handle
(asyncio installs its own); call `stop()`, or cancel the task running `run()`, to drain.
"""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING

from pgqueue.runtime.app import App
from pgqueue.runtime.settings import WorkerOptions, WorkerSettings
from pgqueue.runtime.worker import Worker

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's from Python 3.11


class AsyncWorker:
    """A Worker for asyncio code: ``await AsyncWorker(app, dsn, settings).run()``, or
    ``async with AsyncWorker(...)`` to run it in the background and drain on exit. Takes
    what Worker takes (the settings, or their fields by name)."""

    def __init__(self, app: App, dsn: str | Sequence[str], settings: WorkerSettings | None = None,
                 **options: Unpack[WorkerOptions]) -> None:
        #: The Worker it runs (its settings, worker_id, processed and held_count).
        self.worker = Worker(app, dsn, settings, **options)
        self._task: asyncio.Task[None] | None = None

    @property
    def settings(self) -> WorkerSettings:
        """The settings it runs with."""
        return self.worker.settings

    def stop(self) -> None:
        """Stop leasing and drain; `run()` returns once the drain is done."""
        self.worker.stop()

    async def run(self) -> None:
        """Work until stop() (or this task is cancelled: then drain and re-raise)."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def work() -> None:
            try:
                self.worker.run()
            except BaseException as exc:  # handed to the awaiting task, raised there
                loop.call_soon_threadsafe(_settle, done, exc)
            else:
                loop.call_soon_threadsafe(_settle, done, None)

        threading.Thread(target=work, name="pgqueue-async-worker", daemon=True).start()
        try:
            await asyncio.shield(done)
        except asyncio.CancelledError:
            self.worker.stop()
            await done
            raise

    async def __aenter__(self) -> AsyncWorker:
        self._task = asyncio.create_task(self.run(), name="pgqueue-async-worker")
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        self.stop()
        if self._task is not None:
            await self._task


def _settle(future: asyncio.Future[None], exc: BaseException | None) -> None:
    """Resolve the run's future on the event loop (once: a cancelled one is left as is)."""
    if future.done():
        return
    if exc is None:
        future.set_result(None)
    else:
        future.set_exception(exc)
