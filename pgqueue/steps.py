"""Running one leased job: plain handlers, and step jobs with exact resume.

Step replay: entering a step writes cursor_step at once; finishing it writes
last_completed_step and clears the cursor at once (one write does both at a boundary);
`ctx.advance(cursor)` only moves the in-memory cursor, which the worker's next renewal writes,
so a crash repeats at most one renewal interval of the step in progress. The cursor means
"last fully processed position". Before a resumed job runs, its payload version and recorded
step list are checked against the code; a mismatch parks it as undecodable with a reason
instead of re-running completed side effects.
"""
from __future__ import annotations

import dataclasses
import json
import threading
from typing import Any, Protocol

from pgqueue.app import JobHandler, StepJob
from pgqueue.errors import LeaseLost
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


class Held:
    """A lease this worker holds, with its in-memory checkpoint.

    `state_lock` guards the in-memory fields (held briefly); `write_lock` serialises database
    writes about this job, so a renewal carrying an older checkpoint can never land after a
    step-boundary write. The order they are taken in, and who takes them: pgqueue/held.py."""

    __slots__ = ("_claim", "acking", "checkpoint", "flushed_version", "lease", "lost", "payload",
                 "start_said", "started", "state_lock", "version", "visibility_timeout",
                 "write_lock")

    def __init__(self, lease: Lease, visibility_timeout: float) -> None:
        self.lease = lease
        self.payload = lease.payload
        self.visibility_timeout = visibility_timeout
        self.checkpoint = lease.checkpoint
        self.version = 0          # bumped on every in-memory checkpoint change
        self.flushed_version = 0  # the version the database holds
        self.lost = Flag()
        self.acking = Flag()      # handed to the worker's acker, which alone releases it
        self._claim = [True]      # popped by whoever owns the start: see claim()
        self.started = Flag()     # its handler thread has started it
        # whether the database counts it as started (the lease said so, or a renewal since):
        # written under write_lock by the write that says so
        self.start_said = lease.started
        self.state_lock = threading.Lock()
        self.write_lock = threading.Lock()

    def claim(self) -> bool:
        """Take this job's one-way claim: True for the first caller only, never again. Who
        owns the start of the job (its handler thread, or the drain): pgqueue/held.py. A
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

    def check(self) -> None:
        """Raise LeaseLost when a renewal found the lease gone."""
        if self.lost.is_set():
            raise LeaseLost(
                f"lease {self.lease.lease_id} of job {self.lease.job_id} was lost; "
                "its work will be redone by another lease"
            )


class Settler(Protocol):
    """The database writes a running job needs (the worker's: pgqueue.settler.JobSettler)."""

    def write_checkpoint(self, held: Held) -> None: ...
    def ack(self, held: Held) -> None: ...
    def mark_undecodable(self, held: Held, reason: str, detail: dict[str, Any]) -> None: ...
    def upcast(self, held: Held, payload: bytes, schema_version: int) -> None: ...
    def step_list(self, step_set_hash: str) -> list[dict[str, Any]] | None: ...


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

    def json(self) -> Any:
        """The payload parsed as JSON."""
        return json.loads(self._held.payload)


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
        Raises LeaseLost when the lease is gone (stop working: another lease will redo it)."""
        self._held.check()
        encoded = encode_cursor(cursor)
        self._held.set_checkpoint(dataclasses.replace(self._held.checkpoint, cursor=encoded))

    def checkpoint_now(self) -> None:
        """Write the cursor at once instead of at the next renewal."""
        self._held.check()
        self._settler.write_checkpoint(self._held)


def run(handler: JobHandler | StepJob, held: Held, settler: Settler) -> None:
    """Run one leased job to its ack. Exceptions from handler code propagate (the worker
    nacks); for step jobs the cursor is written first, so a failure loses no progress."""
    if isinstance(handler, StepJob):
        _run_steps(handler, held, settler)
        return
    assert handler.fn is not None
    handler.fn(JobContext(held))
    held.check()
    settler.ack(held)


def _compatible_start(handler: StepJob, held: Held, settler: Settler) -> int | None:
    """The index of the step to resume at, or None after parking the job as undecodable."""
    cp = held.checkpoint
    new = handler.step_list
    names = [s["name"] for s in new]
    recorded = cp.step_set_hash
    if recorded is None or recorded == handler.step_set_hash:
        if cp.last_completed_step is None:
            return 0
        if cp.last_completed_step in names:
            return names.index(cp.last_completed_step) + 1
        old = None
    else:
        old = settler.step_list(recorded)
    if old is None:
        settler.mark_undecodable(held, "step_set_changed", {
            "message": "the job's recorded step list is unknown to this database",
            "old_hash": recorded, "new_hash": handler.step_set_hash, "new_steps": new,
            "last_completed_step": cp.last_completed_step, "cursor_step": cp.cursor_step,
        })
        return None
    old_names = [s["name"] for s in old]
    done = old_names.index(cp.last_completed_step) + 1 if cp.last_completed_step in old_names else 0
    ok = cp.last_completed_step is None or cp.last_completed_step in old_names
    ok = ok and old[:done] == new[:done]
    in_progress = cp.cursor_step is not None and cp.cursor_step != cp.last_completed_step
    if ok and in_progress:
        ok = done < len(old) and done < len(new) and old[done] == new[done]
    if ok:
        return done
    settler.mark_undecodable(held, "step_set_changed", {
        "message": "completed steps are no longer an unchanged prefix of the step list, "
                   "or the step in progress changed",
        "old_hash": recorded, "new_hash": handler.step_set_hash,
        "old_steps": old, "new_steps": new,
        "last_completed_step": cp.last_completed_step, "cursor_step": cp.cursor_step,
    })
    return None


def _upcast(handler: StepJob, held: Held, settler: Settler) -> bool:
    """Bring the payload to the code's schema version; False after parking the job."""
    code = handler.schema_version
    version = held.checkpoint.schema_version
    if version is None or version == code:
        return True
    missing = [v for v in range(version, code) if v not in handler.upcasters]
    if version > code or missing:
        settler.mark_undecodable(held, "payload_version", {
            "message": (f"payload version {version} is newer than the code's {code}"
                        if version > code
                        else f"no upcaster from version {missing[0]} (payload {version}, code {code})"),
            "job_schema_version": version, "code_schema_version": code,
        })
        return False
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
        held.set_checkpoint(dataclasses.replace(
            base, last_completed_step=names[i - 1] if i > 0 else None,
            cursor_step=names[i], cursor=cursor))
        settler.write_checkpoint(held)  # entering step i (and finishing i-1) is exact
        try:
            handler.steps[i].fn(StepContext(held, names[i], settler))
        except LeaseLost:
            raise
        except BaseException:
            if not held.lost.is_set():
                settler.write_checkpoint(held)  # keep the progress made before the failure
            raise
        held.check()
        cursor = None
    if start < len(names):
        held.set_checkpoint(dataclasses.replace(
            base, last_completed_step=names[-1], cursor_step=None, cursor=None))
        settler.write_checkpoint(held)
    settler.ack(held)
