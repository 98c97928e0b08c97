# DO NOT EDIT: generated from pgqueue/runtime/steps_async.py by tools/generate.py; edit that file.
"""Running one leased job: plain handlers, and step jobs with exact resume.

Step replay: entering a step writes cursor_step at once; finishing it writes
last_completed_step and clears the cursor at once (one write does both at a boundary);
`ctx.advance(cursor)` only moves the in-memory cursor, which the worker's next renewal writes,
so a crash repeats at most one renewal interval of the step in progress. The cursor means
"last fully processed position". Before a resumed job runs, its payload version and recorded
step list are checked against the code; a mismatch parks it as undecodable with a reason
instead of re-running completed side effects (the rule: compat.py, shared with deploy-check).

pgqueue/runtime/steps_async.py is the source: it runs `async def` jobs on the worker's event loop
(coroutines.py), and pgqueue/runtime/steps.py, generated from it, runs plain ones on handler threads.
In an async job the settler's writes are awaited (`await ctx.checkpoint_now()`); `advance`
stays a plain call, as it only moves the in-memory cursor.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Protocol

from pgqueue.errors import LeaseLost
from pgqueue.models import Verdict
from pgqueue.runtime import compat
from pgqueue.runtime.jobdefs import JobHandler, StepJob
from pgqueue.runtime.running import Held, JobContext, encode_cursor, refuse_awaitable


class Settler(Protocol):
    """The database writes a running job needs (the worker's JobSettler, settler.py; an async
    job awaits them through coroutines.py)."""

    def write_checkpoint(self, held: Held) -> None: ...
    def ack(self, held: Held) -> None: ...  # a hand-off to the acker: no I/O to await
    def mark_undecodable(self, held: Held, reason: str, detail: dict[str, Any]) -> None: ...
    def upcast(self, held: Held, payload: bytes, schema_version: int) -> None: ...
    def step_list(self, step_set_hash: str) -> list[dict[str, Any]] | None: ...


class StepContext(JobContext):
    """What a step sees: the job, the current step, and its cursor."""

    def __init__(self, held: Held, step: str, settler: Settler) -> None:
        super().__init__(held)
        self._step = step
        self._settler = settler

    @property
    def step(self) -> str:
        return self._step

    @property
    def cursor(self) -> bytes | None:
        """The last fully processed position in this step, or None at its start."""
        return self._held.checkpoint.cursor

    def advance(self, cursor: bytes | str | int) -> None:
        """Record `cursor` as fully processed. Kept in memory; the next renewal writes it.
        Raises LeaseLost when the lease is gone (stop working: another lease will redo it),
        and pgqueue.Cancelled when an operator cancelled the job (stop: it ends cancelled)."""
        self._held.check()
        self._held.check_cancelled()
        encoded = encode_cursor(cursor)
        self._held.set_checkpoint(dataclasses.replace(self._held.checkpoint, cursor=encoded))

    def checkpoint_now(self) -> None:
        """Write the cursor at once instead of at the next renewal."""
        self._held.check()
        self._held.check_cancelled()
        self._settler.write_checkpoint(self._held)


def run(handler: JobHandler | StepJob, held: Held, settler: Settler) -> None:
    """Run one leased job to its ack. Exceptions from handler code propagate (the worker
    nacks); for step jobs the cursor is written first, so a failure loses no progress.
    pgqueue.Cancelled propagates when an operator cancelled the job: before it starts, at an
    `advance()` or at a step boundary (the worker ends it as cancelled)."""
    held.check_cancelled()
    if isinstance(handler, StepJob):
        _run_steps(handler, held, settler)
        return
    assert handler.fn is not None
    refused = compat.plain_with_checkpoint(handler, held.checkpoint)
    if refused is not None:
        settler.mark_undecodable(held, refused.reason, refused.detail)
        return
    refuse_awaitable(handler.fn(JobContext(held)), f"the handler of {handler.kind!r}")
    held.finishing.set()
    held.check()
    settler.ack(held)


def _compatible_start(handler: StepJob, held: Held, settler: Settler) -> int | None:
    """The index of the step to resume at, or None after parking the job as undecodable."""
    cp = held.checkpoint
    recorded = (settler.step_list(cp.step_set_hash)
                if cp.step_set_hash is not None and compat.needs_recorded_steps(handler, cp)
                else None)
    start = compat.resume(handler, cp, recorded)
    if isinstance(start, Verdict):
        settler.mark_undecodable(held, start.reason, start.detail)
        return None
    return start


def _upcast(handler: StepJob, held: Held, settler: Settler) -> bool:
    """Bring the payload to the code's schema version; False after parking the job."""
    code = handler.schema_version
    version = held.checkpoint.schema_version
    refused = compat.payload(handler, version)
    if refused is not None:
        settler.mark_undecodable(held, refused.reason, refused.detail)
        return False
    if version is None or version == code:
        return True
    payload = held.payload
    for v in range(version, code):
        payload = handler.upcasters[v](payload)
        if not isinstance(payload, bytes):
            raise TypeError(f"upcaster from version {v} must return bytes, got {type(payload).__name__}")
    settler.upcast(held, payload, code)
    return True


def _run_steps(handler: StepJob, held: Held, settler: Settler) -> None:
    if not handler.steps:
        raise ValueError(f"step job {handler.kind!r} declares no steps")
    if not _upcast(handler, held, settler):
        return
    start = _compatible_start(handler, held, settler)
    if start is None:
        return
    names = [s.name for s in handler.steps]
    saved = held.checkpoint
    cursor = saved.cursor if start < len(names) and saved.cursor_step == names[start] else None
    base = dataclasses.replace(saved, schema_version=handler.schema_version,
                               step_set_hash=handler.step_set_hash)
    for i in range(start, len(names)):
        held.check_cancelled()  # a step boundary: a cancelled job runs no further step
        held.set_checkpoint(dataclasses.replace(
            base, last_completed_step=names[i - 1] if i > 0 else None,
            cursor_step=names[i], cursor=cursor))
        settler.write_checkpoint(held)  # entering step i (and finishing i-1) is exact
        held.check_cancelled()  # that write may have brought the cancel
        step = handler.steps[i]
        if step.timeout is not None:
            held.step_limit(step.name, step.timeout)
        try:
            refuse_awaitable(step.fn(StepContext(held, names[i], settler)),
                             f"step {names[i]!r} of {handler.kind!r}")
        except LeaseLost:
            raise
        except BaseException:
            if not held.lost.is_set() and not held.cancelled.is_set():
                settler.write_checkpoint(held)  # keep the progress made before the failure
            raise
        if step.timeout is not None:
            held.step_limit(None, None)  # the job's own limit again
        held.check()
        cursor = None
    held.finishing.set()  # every step ran: a cancel from here on comes too late
    if start < len(names):
        held.set_checkpoint(dataclasses.replace(
            base, last_completed_step=names[-1], cursor_step=None, cursor=None))
        settler.write_checkpoint(held)
    settler.ack(held)
