"""A job while this worker runs it: the held lease with its in-memory checkpoint, and what a
handler sees of it (JobContext; a step's context, sync and async, is in steps.py).

The same for handler threads and for coroutines on the worker's event loop: the in-memory
fields are guarded by threading locks held for a few attribute reads, so the loop thread may
take them too (never across an await). The lock order is in docs/internals.md.
"""
from __future__ import annotations

import inspect
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from pgqueue.errors import Cancelled, JobTimeout, LeaseLost
from pgqueue.models import Checkpoint, Lease


class Flag:
    """A one-way boolean another thread may set: what `threading.Event` offers without its
    Condition (nobody waits on it; the Event's construction was the largest single cost per job
    in a py-spy profile of the worker's GIL-holding time)."""

    __slots__ = ("_on",)

    def __init__(self) -> None:
        self._on = False

    def set(self) -> None:
        self._on = True

    def is_set(self) -> bool:
        return self._on


class TimeLimit:
    """A running job's time limits: made when it starts, only for a job that has one.
    `timed_out` and `ended` are one-way booleans another thread reads (as Flag's)."""

    __slots__ = ("arm", "deadline", "ended", "job_deadline", "job_limit", "runner", "text",
                 "timed_out")

    def __init__(self, arm: Callable[[Held, float], None], runner: Any,
                 job_limit: float | None) -> None:
        self.arm = arm                   # tells the worker's watchdog of a new deadline
        self.runner = runner             # the thread or task running the handler
        self.job_limit = job_limit       # the job's own limit (s); a step's may be shorter
        self.job_deadline: float | None = None
        self.deadline: float | None = None  # when the limit in force ends (time.monotonic())
        self.text = ""                   # what that limit is, for the messages
        self.timed_out = False           # the handler was told
        self.ended = False               # its handler code returned or raised


class Held:
    """A lease this worker holds, with its in-memory checkpoint.

    `state_lock` guards the in-memory fields (held briefly); `write_lock` serialises database
    writes about this job, so a renewal carrying an older checkpoint can never land after a
    step-boundary write. The order they are taken in, and who takes them: pgqueue/runtime/held.py."""

    __slots__ = ("_claim", "acking", "cancelled", "checkpoint", "ended", "finishing",
                 "flushed_version", "lease", "lost", "on_cancel", "outcome", "payload",
                 "start_said", "started", "state_lock", "time_limit", "version",
                 "visibility_timeout", "write_lock")

    def __init__(self, lease: Lease, visibility_timeout: float) -> None:
        self.lease = lease
        self.payload = lease.payload
        self.visibility_timeout = visibility_timeout
        self.checkpoint = lease.checkpoint
        self.version = 0          # bumped on every in-memory checkpoint change
        self.flushed_version = 0  # the version the database holds
        self.lost = Flag()
        #: an operator asked to cancel the job (learnt from a renewal, or NOTIFY pgqueue_cancel)
        self.cancelled = Flag()
        #: called (on the thread that learnt it) when the cancel is requested: an async job's
        #: runner sets it to cancel its task
        self.on_cancel: Callable[[], None] | None = None
        #: its handler code has returned (what follows is its last write and the ack): a cancel
        #: now comes too late, and an async job's task is no longer cancelled for one
        self.finishing = Flag()
        self.acking = Flag()      # handed to the worker's acker, which alone releases it
        #: a write that ended its lease committed (a nack, parked undecodable, ended
        #: cancelled, given back by a rate limit): set under write_lock, so a renewal that
        #: took its snapshot before knows, once it has the lock, not to renew it (nor to call
        #: the lease lost when the row says it is gone)
        self.ended = Flag()
        self._claim = [True]      # popped by whoever owns the start: see claim()
        self.started = Flag()     # its handler thread has started it
        # whether the database counts it as started (the lease said so, or a renewal since):
        # written under write_lock by the write that says so
        self.start_said = lease.started
        self.state_lock = threading.Lock()
        self.write_lock = threading.Lock()
        #: how the worker let go of it (metrics.OUTCOMES), set by whoever decided it
        self.outcome = "lost"
        #: its time limits (deadlines.py), made only for a job that has one: the others
        #: carry nothing more per job
        self.time_limit: TimeLimit | None = None

    def claim(self) -> bool:
        """Take this job's one-way claim: True for the first caller only, never again. Who
        owns the start of the job (its handler thread, or the drain): pgqueue/runtime/held.py. A
        list's pop is one atomic operation, so no lock is needed (nor the GIL)."""
        try:
            return self._claim.pop()
        except IndexError:
            return False

    def start_unsaid(self) -> bool:
        """Started, and the database does not know yet (the next write about it says so)."""
        return not self.start_said and self.started.is_set()

    @property
    def dirty(self) -> bool:
        return self.version != self.flushed_version

    def set_checkpoint(self, checkpoint: Checkpoint) -> int:
        """Replace the in-memory checkpoint; returns its version."""
        with self.state_lock:
            self.checkpoint = checkpoint
            self.version += 1
            return self.version

    def snapshot(self) -> tuple[Checkpoint, int]:
        with self.state_lock:
            return self.checkpoint, self.version

    def mark_flushed(self, version: int) -> None:
        with self.state_lock:
            self.flushed_version = max(self.flushed_version, version)

    def request_cancel(self) -> None:
        """An operator asked to cancel the job: the handler stops at its next advance or step
        boundary (an async one at once). Said once, whoever learns it first."""
        if self.cancelled.is_set():
            return
        self.cancelled.set()
        hook = self.on_cancel
        if hook is not None:
            hook()

    def check_cancelled(self) -> None:
        """Raise Cancelled when an operator asked to cancel the job, and JobTimeout when its
        time limit has passed."""
        if self.cancelled.is_set():
            raise Cancelled(f"job {self.lease.job_id} was cancelled by an operator")
        if self.time_limit is not None and self.time_limit.timed_out:
            raise self.timeout_error()

    # -- time limits (the state: TimeLimit; the watchdog: deadlines.py) ------------------------

    @property
    def timed_out(self) -> bool:
        """It ran past its time limit (the handler has been told)."""
        return self.time_limit is not None and self.time_limit.timed_out

    def start_limit(self, seconds: float | None, arm: Callable[[Held, float], None],
                    runner: Any) -> None:
        """The job starts on `runner` (a thread or task): its own limit (None: none; a step
        may have its own) runs from now, and `arm` tells the watchdog of each deadline."""
        self.time_limit = TimeLimit(arm, runner, seconds)
        if seconds is not None:
            self.time_limit.job_deadline = time.monotonic() + seconds
            self._set_deadline(self.time_limit.job_deadline, f"its time limit of {seconds:g} s")

    def step_limit(self, step: str | None, seconds: float | None) -> None:
        """A step with its own limit starts (None: the step in progress ended): the earlier of
        its limit and the job's is in force until it ends."""
        limit = self.time_limit
        if limit is None or limit.timed_out:
            return
        if step is not None and seconds is not None:
            at = time.monotonic() + seconds
            if limit.job_deadline is None or at < limit.job_deadline:
                self._set_deadline(at, f"the time limit of its step {step!r} ({seconds:g} s)")
                return
        if limit.deadline != limit.job_deadline:
            self._set_deadline(limit.job_deadline, f"its time limit of {limit.job_limit:g} s"
                               if limit.job_limit is not None else "")

    def _set_deadline(self, at: float | None, text: str) -> None:
        assert self.time_limit is not None
        self.time_limit.deadline, self.time_limit.text = at, text
        if at is not None:
            self.time_limit.arm(self, at)

    def time_out(self) -> bool:
        """The limit in force has passed (the watchdog, at its deadline): True when the handler
        is told now (False: it has already returned, or was told)."""
        limit = self.time_limit
        if limit is None or limit.ended or limit.timed_out or self.finishing.is_set():
            return False
        limit.timed_out = True
        hook = self.on_cancel  # an async job's runner cancels its task
        if hook is not None:
            hook()
        return True

    def timeout_error(self, stack: str | None = None, grace: float | None = None) -> JobTimeout:
        """What the job failed with: JobTimeout naming the limit (and, when the worker stopped
        waiting, the grace period and where the handler was)."""
        text = self.time_limit.text if self.time_limit is not None else ""
        message = f"job {self.lease.job_id} ran past {text or 'its time limit'}"
        if grace is not None:
            message += (f" and did not stop within the worker's grace period ({grace:g} s): the "
                        f"worker stopped waiting for it")
        return JobTimeout(message, stack=stack)

    def check(self) -> None:
        """Raise LeaseLost when a renewal found the lease gone."""
        if self.lost.is_set():
            raise LeaseLost(
                f"lease {self.lease.lease_id} of job {self.lease.job_id} was lost; "
                "its work will be redone by another lease"
            )


def encode_cursor(cursor: bytes | str | int) -> bytes:
    """Cursor values are stored as bytes: str as UTF-8, int as its decimal digits."""
    if isinstance(cursor, bytes):
        return cursor
    if isinstance(cursor, bytearray | memoryview):
        return bytes(cursor)
    if isinstance(cursor, str):
        return cursor.encode("utf-8")
    if isinstance(cursor, int) and not isinstance(cursor, bool):
        return str(cursor).encode("ascii")
    raise TypeError(f"cursor must be bytes, str or int, got {type(cursor).__name__}")


class JobContext:
    """What a plain handler sees of its job."""

    def __init__(self, held: Held) -> None:
        self._held = held

    @property
    def job_id(self) -> int:
        return self._held.lease.job_id

    @property
    def kind(self) -> str | None:
        return self._held.lease.kind

    @property
    def payload(self) -> bytes:
        return self._held.payload

    @property
    def attempts(self) -> int:
        """Failures so far (nacks and reclaims), not counting this run."""
        return self._held.lease.attempts

    @property
    def lease(self) -> Lease:
        return self._held.lease

    @property
    def lease_lost(self) -> bool:
        """True once a renewal found this lease gone; the result will be discarded."""
        return self._held.lost.is_set()

    @property
    def cancelled(self) -> bool:
        """True once an operator asked to cancel this job (`Queue.cancel`): stop and raise
        `pgqueue.Cancelled` (`advance()` and step boundaries raise it for you). A handler that
        returns anyway has its job acked."""
        return self._held.cancelled.is_set()

    def check_cancelled(self) -> None:
        """Raise `pgqueue.Cancelled` when an operator asked to cancel this job, and
        `pgqueue.JobTimeout` when it ran past its time limit: call it between units of work (a
        step's `advance()` does)."""
        self._held.check_cancelled()

    @property
    def timed_out(self) -> bool:
        """True once the job ran past its time limit (`check_cancelled()` then raises)."""
        return self._held.timed_out

    def json(self) -> Any:
        """The payload parsed as JSON; an empty payload (a job enqueued with none) raises a
        ValueError that says so, as does one that is not JSON."""
        payload = self._held.payload
        if not payload:
            raise ValueError(f"job {self.job_id} (kind {self.kind}) has an empty payload, which "
                             f"is not JSON: enqueue it with one (a schedule's payload is {{}} "
                             f"unless given), or read job.payload")
        try:
            return json.loads(payload)
        except ValueError as exc:
            raise ValueError(f"job {self.job_id} (kind {self.kind}): its payload is not JSON "
                             f"({exc}); read job.payload") from None


def refuse_awaitable(result: object, what: str) -> None:
    """Fail a job whose handler returned an awaitable instead of doing its work: a plain def
    wrapping an async function (run on a thread, nobody awaits it), or an async def that
    returned a coroutine without awaiting it. Either would be acked with the work undone."""
    if not inspect.isawaitable(result):
        return
    close = getattr(result, "close", None)
    if callable(close):
        close()  # no "never awaited" warning on top of the error below
    raise TypeError(f"{what} returned {type(result).__name__}, an awaitable nobody awaits (its "
                    f"job would be acked with the work undone): await it in the handler, or "
                    f"declare the handler async def so it runs on the worker's event loop")
