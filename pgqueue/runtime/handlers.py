"""Handler threads: run each held job to its end, then let go of it.

The worker's `concurrency` handler threads take held jobs off the work queue the lease
loops fill, run each with `steps.run` and the worker's settler, and nack a job whose handler
raised. A job that ends without an ack (nack, lost lease, undecodable) is released here; an
acked one stays held until the acker has written its ack (held.py). Kept apart from the
worker's lifecycle so the path one job takes through a handler thread reads in one place.

A thread starts a job only if it wins the job's claim (the drain may have given it back
meanwhile; held.py), logs every failure at WARNING (kind, job id, attempt, the error's type and
message, and the retry time or dead), and never dies: an error outside the handler is logged
with its traceback and the thread takes the next job.
"""
from __future__ import annotations

import datetime as dt
import logging
import queue as queue_mod
import threading
import time
from collections.abc import Callable

from pgqueue.errors import Cancelled, JobTimeout, LeaseLost
from pgqueue.runtime import compat, steps
from pgqueue.runtime.app import App
from pgqueue.runtime.deadlines import Deadlines
from pgqueue.runtime.held import HeldLeases, label
from pgqueue.runtime.jobdefs import JobHandler, StepJob
from pgqueue.runtime.running import Held
from pgqueue.runtime.settler import JobSettler, Nacked
from pgqueue.telemetry import tracing
from pgqueue.telemetry.logs import MAX_LOGGED_ERROR_CHARS as MAX_LOGGED_ERROR_CHARS
from pgqueue.telemetry.logs import error_summary

# The worker's logger: these lines are the worker's, and operators filter on its name.
log = logging.getLogger("pgqueue.worker")


def outcome(nacked: Nacked) -> str:
    """What became of a failed job, for its log line."""
    if nacked.state is None:
        return ("the failure was not recorded (its lease was lost, or the database stayed "
                "unreachable): the job runs again when its lease has expired")
    if nacked.state == "cancelled":
        return "cancelled: an operator had asked to cancel it, so it is not retried"
    if nacked.dead:
        return "dead: moved to the dead letters"
    if nacked.retry_at is None:
        return "it will be retried after the stream's backoff"
    wait = (nacked.retry_at - dt.datetime.now(dt.timezone.utc)).total_seconds()
    at = nacked.retry_at.astimezone(dt.timezone.utc).isoformat(timespec="milliseconds")
    return f"retry at {at} (in {max(wait, 0.0):.1f}s)"


class HandlerThreads:
    """A worker's handler threads and the work queue that feeds them."""

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
        self._leases = leases
        self._settler = settler
        self._stopping = stopping
        self._worker_id = worker_id
        # SimpleQueue (C) rather than Queue: two hand-offs per job, no task_done/join needed
        self.work: queue_mod.SimpleQueue[Held | None] = queue_mod.SimpleQueue()
        self._threads: list[threading.Thread] = []
        # threads given up on (their handler ran past its limit and the grace period): each
        # exits once its handler returns, and a new thread took its place
        self._abandoned: set[threading.Thread] = set()
        self._lock = threading.Lock()
        self._finishing = False
        self._started = 0

    def start(self, count: int) -> None:
        for _ in range(count):
            self._add_thread()

    def _add_thread(self) -> None:
        t = threading.Thread(target=self._loop, name=f"pgqueue-handler-{self._started}",
                             daemon=True)
        self._started += 1
        self._threads.append(t)
        t.start()

    def finish(self) -> None:
        """Each thread finishes its job, skips what is queued behind it, and exits. Call it
        once nothing more is put on the work queue."""
        with self._lock:
            self._finishing = True
            for _ in self._threads:
                self.work.put(None)

    def busy(self) -> bool:
        """Whether a thread has not exited yet (after `finish`: is still running a job).
        Threads given up on are not waited for."""
        with self._lock:
            return any(t.is_alive() for t in self._threads)

    def abandon(self, thread: threading.Thread) -> int:
        """Stop waiting for `thread` (its handler ran past its limit and the grace period):
        another thread takes its place, and it exits once its handler returns. Returns how
        many abandoned threads are still running."""
        with self._lock:
            if thread in self._threads:
                self._threads.remove(thread)
                self._abandoned.add(thread)
                self._add_thread()
                if self._finishing:
                    self.work.put(None)
            self._abandoned = {t for t in self._abandoned if t.is_alive()}
            return len(self._abandoned)

    def _loop(self) -> None:
        me = threading.current_thread()
        while True:
            if me in self._abandoned:
                return  # given up on: a new thread has taken this one's place
            held = self.work.get()
            if held is None:
                return
            try:
                if held.lost.is_set():
                    self._leases.release(held)  # lost before it started: nothing to do for it
                elif not self._stopping.is_set():  # else the drain returns it (no attempt)
                    self._execute(held)
            except BaseException:
                # never let a handler thread die: the worker would silently run with less
                # concurrency (SystemExit in a thread ends it without a word)
                log.exception("worker %s: %s: unexpected error", self._worker_id(), label(held))

    def _execute(self, held: Held) -> None:
        """Run a job taken off the work queue, if this thread wins its claim (the drain may
        have given it back meanwhile), and let go of it unless the acker has it."""
        if not self._leases.begin(held):
            return  # the drain returned it first: not ours to start
        if held.lease.rate_at_start and not rated_start(self._settler, self._leases,
                                                         self._worker_id(), held):
            return
        began = time.monotonic()
        arm_limit(self._app, held, self._deadlines, threading.current_thread())
        try:
            if tracing.active():  # checked first: a context manager per job costs ~1.5 us
                with tracing.consuming(held.lease):
                    self._run(held)
            else:
                self._run(held)
        finally:
            if held.time_limit is not None:
                held.time_limit.ended = True
            self._leases.end(held, time.monotonic() - began)

    def _run(self, held: Held) -> None:
        handler = self._app.handlers.get(held.lease.kind or "")
        try:
            if handler is None:
                refused = compat.unknown_kind(self._app.handlers, held.lease.kind)
                assert refused is not None
                self._settler.mark_undecodable(held, refused.reason, refused.detail)
                return
            steps.run(handler, held, self._settler)
        except LeaseLost as exc:
            discarded(self._worker_id(), held, exc)
        except Cancelled:
            cancelled(self._settler, self._worker_id(), held)
        except (Exception, JobTimeout) as exc:
            tracing.failed(exc)
            failed(self._settler, self._worker_id(), held, handler, exc)


# -- what handler threads and the event loop (coroutines.py) do alike ---------------------------


def arm_limit(app: App, held: Held, deadlines: Deadlines, runner: object) -> None:
    """The job starts on `runner` (a thread or task): its time limit (its own from enqueue,
    else its handler's) runs now. A job with no limit anywhere arms nothing."""
    handler = app.handlers.get(held.lease.kind or "")
    limit = held.lease.timeout or (None if handler is None else handler.timeout)
    if limit is not None or (isinstance(handler, StepJob)
                             and any(s.timeout is not None for s in handler.steps)):
        held.start_limit(limit, deadlines.arm, runner)


def fields(held: Held, **more: object) -> dict[str, dict[str, object]]:
    """A log record's structured fields about a job (`--log-format json`): never its payload."""
    lease = held.lease
    return {"pgqueue": {"stream": lease.stream, "kind": lease.kind, "job_id": lease.job_id,
                        "attempt": lease.attempts + 1, **more}}


def discarded(worker_id: int, held: Held, exc: LeaseLost) -> None:
    """A handler stopped because its lease was lost: nothing to write, its result is dropped."""
    held.outcome = "lost"
    log.warning("worker %s: %s: %s; result discarded", worker_id, label(held), exc,
                extra=fields(held, event="lost", outcome="lost",
                             lease_id=held.lease.lease_id))


def rated_start(settler: JobSettler, leases: HeldLeases, worker_id: int, held: Held) -> bool:
    """A job of a rate-limited kind leased ahead is about to start: True when the database
    counted it in its window; else it was deferred (back until the window has room), ended as
    cancelled, or its lease was lost, and it is let go of here. A database round trip: on the
    event loop, run it on a thread."""
    try:
        got = settler.start_rated(held)
    except LeaseLost:
        got = None
    if got == "started":
        return True
    held.outcome = got if got in ("deferred", "cancelled") else "lost"
    log.debug("worker %s: %s not started: %s", worker_id, label(held),
              "its kind's rate window is full, it waits in the queue" if got == "deferred"
              else "cancelled" if got == "cancelled" else "its lease was lost",
              extra=fields(held, event="not_started", outcome=held.outcome))
    leases.release(held)
    return False


def cancelled(settler: JobSettler, worker_id: int, held: Held) -> None:
    """The handler stopped on its job's cancel (pgqueue.Cancelled, or an async job's task
    cancelled): end the job as cancelled and say so. A database round trip: on the event loop,
    run it on a thread."""
    try:
        ended = settler.end_cancelled(held)
    except LeaseLost:
        ended = False
    held.outcome = "cancelled" if ended else "lost"
    if ended:
        log.info("worker %s: %s cancelled by an operator: its handler stopped", worker_id,
                 label(held), extra=fields(held, event="cancelled", outcome="cancelled"))
    else:
        log.warning("worker %s: %s stopped on a cancel after its lease was lost: whoever "
                    "reclaims it ends it as cancelled", worker_id, label(held),
                    extra=fields(held, event="lost", outcome="lost",
                                 lease_id=held.lease.lease_id))


def failed(settler: JobSettler, worker_id: int, held: Held, handler: JobHandler | StepJob | None,
           exc: BaseException) -> None:
    """A handler raised: nack the job (its summary and the handler's traceback kept:
    failures.py) and log the failure with what became of the job. A database round trip: on
    the event loop, run it on a thread."""
    if not held.lost.is_set():
        try:
            nacked = settler.nack(held, exc, handler.max_attempts if handler is not None else None)
        except LeaseLost:
            pass  # lost meanwhile: said below
        else:
            held.outcome = ("lost" if nacked.state is None else "dead" if nacked.dead
                            else "cancelled" if nacked.state == "cancelled" else "retried")
            log.warning("worker %s: %s failed: %s; %s", worker_id,
                        label(held, nacked.max_attempts), error_summary(exc), outcome(nacked),
                        extra=fields(held, event="failed", outcome=held.outcome,
                                     error=error_summary(exc),
                                     retry_at=None if nacked.retry_at is None
                                     else nacked.retry_at.isoformat()))
            return
    held.outcome = "lost"
    log.warning("worker %s: %s failed after its lease was lost (result discarded): %s",
                worker_id, label(held), error_summary(exc),
                extra=fields(held, event="failed", outcome="lost", error=error_summary(exc)))
