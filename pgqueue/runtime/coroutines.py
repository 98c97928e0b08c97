"""Async handlers: `async def` jobs run as coroutines on the worker's event loop.

Beside the handler threads (handlers.py), a worker whose App has `async def` handlers runs one
thread with an asyncio event loop and `async_concurrency` runner coroutines on it: each takes a
held job of an async kind, runs it with `pgqueue.runtime.steps_async.run` (generated into the threads'
`steps.run`, so both follow one source), and lets go of it exactly as a handler thread does.
The two share the held leases, the renewer, the acker and the drain, and the lease counts both
kinds of slot as the worker's capacity.

What an async job writes about itself (a step boundary, `await ctx.checkpoint_now()`, a nack,
parking it as undecodable, an upcast) is the worker's settler's blocking write, run on a few
writer threads so the loop never waits on the database; the ack only hands the job to the
acker, on the loop. On the hot path a job crosses threads twice: the lease loop queues it for
the loop (one wake-up per lease batch, not per job), and the ack hands it to the acker.

An operator's cancel of a running async job (Queue.cancel) cancels its task while the
handler's code runs: the handler gets asyncio.CancelledError at the await it is in, and the job
ends as cancelled (as with pgqueue.Cancelled, which advance() and step boundaries raise).

The drain: runners skip jobs queued behind them (given back by the drain) and end once their
coroutine returned; coroutines still running after the grace period are cancelled once their
leases were given back (their result would be discarded anyway).
"""
from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from pgqueue.errors import Cancelled, JobTimeout, LeaseLost
from pgqueue.runtime import compat
from pgqueue.runtime import steps_async as aio_steps
from pgqueue.runtime.app import App
from pgqueue.runtime.deadlines import Deadlines
from pgqueue.runtime.handlers import arm_limit, cancelled, discarded, failed, rated_start
from pgqueue.runtime.held import HeldLeases, label
from pgqueue.runtime.jobdefs import JobHandler, StepJob
from pgqueue.runtime.running import Held
from pgqueue.runtime.settler import JobSettler
from pgqueue.telemetry import tracing

# The worker's logger: these lines are the worker's, and operators filter on its name.
log = logging.getLogger("pgqueue.worker")

T = TypeVar("T")

#: Threads (and pool connections) for the blocking writes async jobs make about themselves.
WRITERS = 4


class LoopSettler:
    """The worker's settler as an `aio.steps.AsyncSettler`: its writes run on writer threads."""

    def __init__(self, settler: JobSettler, blocking: Callable[..., Any]) -> None:
        self._settler = settler
        self._blocking = blocking

    async def write_checkpoint(self, held: Held) -> None:
        await self._blocking(self._settler.write_checkpoint, held)

    def ack(self, held: Held) -> None:
        self._settler.ack(held)  # a hand-off to the acker: no I/O

    async def mark_undecodable(self, held: Held, reason: str, detail: dict[str, Any]) -> None:
        await self._blocking(self._settler.mark_undecodable, held, reason, detail)

    async def upcast(self, held: Held, payload: bytes, schema_version: int) -> None:
        await self._blocking(self._settler.upcast, held, payload, schema_version)

    async def step_list(self, step_set_hash: str) -> list[dict[str, Any]] | None:
        result: list[dict[str, Any]] | None = await self._blocking(
            self._settler.step_list, step_set_hash)
        return result


class AsyncHandlers:
    """The worker's event-loop thread, its runner coroutines and the jobs queued for them."""

    def __init__(self, app: App, leases: HeldLeases, settler: JobSettler, *,
                 stopping: threading.Event, worker_id: Callable[[], int],
                 deadlines: Deadlines) -> None:
        """
        :param stopping: set when the worker drains: a job not started by then is skipped
            (the drain gives its lease back).
        :param worker_id: the worker's registry id, for log lines (it changes on failover).
        :param deadlines: the worker's watchdog of time limits (deadlines.py).
        """
        self._app = app
        self._deadlines = deadlines
        #: runners given up on (their job's handler ignored its cancellation past the grace
        #: period): each returns once that handler does, and a new runner took its place
        self._abandoned: set[asyncio.Task[None]] = set()
        self._leases = leases
        self._settler = settler
        self._stopping = stopping
        self._worker_id = worker_id
        self._loop_settler = LoopSettler(settler, self._blocking)
        # Jobs handed over by the lease loops, moved onto the loop's queue by one callback per
        # batch: `_scheduled` says a move is pending (a lost race only schedules one more).
        self._pending: collections.deque[Held] = collections.deque()
        self._scheduled = False
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[Held | None] | None = None
        self._runners: list[asyncio.Task[None]] = []
        self._cancelled = False  # the drain cancelled the runners (set on the loop thread)
        #: the job each runner's handler is running now (on the loop thread only): an
        #: operator's cancel cancels the task only while it runs that job's handler code
        self._handling: dict[asyncio.Task[None], Held] = {}
        #: lease ids of the jobs whose task this loop cancelled for an operator's cancel
        self._stopped: set[int] = set()
        self._thread: threading.Thread | None = None
        self._writers = concurrent.futures.ThreadPoolExecutor(
            max_workers=WRITERS, thread_name_prefix="pgqueue-async-writer")

    def start(self, count: int) -> None:
        """Start the loop thread with `count` runner coroutines (returns once they wait)."""
        self._thread = threading.Thread(target=self._main, args=(count,),
                                        name="pgqueue-event-loop", daemon=True)
        self._thread.start()
        self._ready.wait()

    def put(self, held: Held) -> None:
        """Queue a held job for the runners (any thread)."""
        self._pending.append(held)
        if not self._scheduled:
            self._scheduled = True
            assert self._loop is not None
            self._loop.call_soon_threadsafe(self._move_pending)

    def finish(self) -> None:
        """Each runner finishes its job, skips what is queued behind it, and returns. Call it
        once nothing more is put."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._end_runners)

    def busy(self) -> bool:
        """Whether the loop thread still runs (after `finish`: a coroutine is still running)."""
        return self._thread is not None and self._thread.is_alive()

    def cancel(self) -> None:
        """Cancel the coroutines still running (after the drain gave their leases back), and
        wait a moment for the loop thread to end."""
        if self._loop is not None and self.busy():
            try:
                self._loop.call_soon_threadsafe(self._cancel_runners)
            except RuntimeError:
                pass  # the loop closed meanwhile
            if self._thread is not None:
                self._thread.join(timeout=5.0)
        self._writers.shutdown(wait=False, cancel_futures=True)

    # -- on the loop thread ------------------------------------------------------------------

    def _main(self, count: int) -> None:
        asyncio.run(self._serve(count))

    async def _serve(self, count: int) -> None:
        self._loop = asyncio.get_running_loop()
        self._queue = asyncio.Queue()
        self._runners = [asyncio.create_task(self._runner(), name=f"pgqueue-runner-{i}")
                         for i in range(count)]
        self._ready.set()
        await asyncio.gather(*self._runners, return_exceptions=True)

    def _move_pending(self) -> None:
        self._scheduled = False  # before popping: a job appended after this schedules again
        assert self._queue is not None
        while self._pending:
            self._queue.put_nowait(self._pending.popleft())

    def _end_runners(self) -> None:
        self._move_pending()
        assert self._queue is not None
        for _ in self._runners:
            self._queue.put_nowait(None)

    def abandon(self, task: asyncio.Task[None]) -> None:
        """Stop waiting for the runner `task` (any thread): a new runner takes its place."""
        if self._loop is not None:
            try:
                self._loop.call_soon_threadsafe(self._replace, task)
            except RuntimeError:
                pass  # the loop closed meanwhile

    def _replace(self, task: asyncio.Task[None]) -> None:
        if task not in self._runners or self._cancelled:
            return
        self._runners.remove(task)
        self._abandoned = {t for t in self._abandoned if not t.done()} | {task}
        self._runners.append(asyncio.create_task(self._runner(),
                                                 name="pgqueue-runner-replacement"))

    def _cancel_runners(self) -> None:
        self._cancelled = True
        for task in self._runners:
            task.cancel()

    async def _handle(self, handler: JobHandler | StepJob, held: Held) -> None:
        """Run the job's handler code, cancelling its task when an operator cancels the job."""
        task = asyncio.current_task()
        assert task is not None and self._loop is not None
        loop = self._loop
        self._handling[task] = held
        def stop() -> None:  # on the thread that learnt of the cancel
            loop.call_soon_threadsafe(self._stop, task, held)

        held.on_cancel = stop
        try:
            await aio_steps.run(handler, held, self._loop_settler)
        finally:
            held.on_cancel = None
            del self._handling[task]
            if held.lease.lease_id in self._stopped:
                self._stopped.discard(held.lease.lease_id)
                uncancel = getattr(task, "uncancel", None)  # Python 3.11 on
                if uncancel is not None and not self._cancelled:
                    uncancel()  # this runner goes on to other jobs: no cancel is pending

    def _stop(self, task: asyncio.Task[None], held: Held) -> None:
        """On the loop: an operator cancelled `held`; cancel the task if it still runs its
        handler (not once it has returned: its ack or failure is being written)."""
        if (self._handling.get(task) is held and not held.finishing.is_set()
                and held.lease.lease_id not in self._stopped):
            self._stopped.add(held.lease.lease_id)
            task.cancel(f"job {held.lease.job_id} was cancelled by an operator"
                        if held.cancelled.is_set() else str(held.timeout_error()))

    async def _blocking(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking call (a database write) on a writer thread."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._writers, functools.partial(fn, *args))

    async def _runner(self) -> None:
        assert self._queue is not None
        while True:
            if asyncio.current_task() in self._abandoned:
                return  # given up on: a new runner has taken this one's place
            held = await self._queue.get()
            if held is None:
                return
            try:
                if held.lost.is_set():
                    self._leases.release(held)  # lost before it started: nothing to do for it
                elif not self._stopping.is_set():  # else the drain returns it (no attempt)
                    await self._execute(held)
            except asyncio.CancelledError:
                raise  # the drain gave up on it: its lease was given back
            except BaseException:
                # never let a runner end: the worker would silently run with fewer slots
                log.exception("worker %s: %s: unexpected error", self._worker_id(), label(held))

    async def _execute(self, held: Held) -> None:
        """Run a job if this runner wins its claim (the drain may have given it back), and
        let go of it unless the acker has it."""
        if not self._leases.begin(held):
            return  # the drain returned it first: not ours to start
        if held.lease.rate_at_start and not await self._blocking(
                rated_start, self._settler, self._leases, self._worker_id(), held):
            return
        began = time.monotonic()
        arm_limit(self._app, held, self._deadlines, asyncio.current_task())
        try:
            if tracing.active():  # checked first: a context manager per job costs ~1.5 us
                with tracing.consuming(held.lease):
                    await self._run(held)
            else:
                await self._run(held)
        finally:
            if held.time_limit is not None:
                held.time_limit.ended = True
            self._leases.end(held, time.monotonic() - began)

    async def _run(self, held: Held) -> None:
        handler = self._app.handlers.get(held.lease.kind or "")
        try:
            if handler is None:
                refused = compat.unknown_kind(self._app.handlers, held.lease.kind)
                assert refused is not None
                await self._loop_settler.mark_undecodable(held, refused.reason, refused.detail)
                return
            await self._handle(handler, held)
        except LeaseLost as exc:
            discarded(self._worker_id(), held, exc)
        except Cancelled:  # raised at an advance() or a step boundary, or by the handler
            await self._blocking(cancelled, self._settler, self._worker_id(), held)
        except asyncio.CancelledError as exc:
            if self._cancelled:
                raise  # the drain's: its lease was given back
            if held.cancelled.is_set():  # an operator's cancel (this loop cancelled the task)
                await self._blocking(cancelled, self._settler, self._worker_id(), held)
                return
            if held.timed_out:  # its time limit (this loop cancelled the task)
                timeout = held.timeout_error()
                timeout.__cause__ = exc  # where the handler was when it was cancelled
                tracing.failed(timeout)
                await self._blocking(failed, self._settler, self._worker_id(), held, handler,
                                     timeout)
                return
            # the handler's own (an awaited task it was cancelled): a failure like any other
            await self._blocking(failed, self._settler, self._worker_id(), held, handler, exc)
        except (Exception, JobTimeout) as exc:
            tracing.failed(exc)
            await self._blocking(failed, self._settler, self._worker_id(), held, handler, exc)
