"""Whether this code can run a job that older code wrote: the one rule the worker and
`deploy-check` share.

A job the code cannot run is parked as undecodable with a reason, never run from step one:
- `unknown_kind`: no handler for its kind;
- `payload_version`: its payload version is newer than the code's, or older with no chain of
  upcasters up to it;
- `step_set_changed`: its recorded step list no longer starts with its completed steps
  unchanged, or the step in progress changed, or the list is unknown to the database, or the
  kind became a plain job while the job was part way through its steps.

The worker (steps.py, handlers.py, coroutines.py) calls these functions between its own writes
(the upcast of a payload it can bring forward, the step list looked up only when the job's
differs from the code's); `verdict` calls them in the same order for a job it only reads, so
the two cannot disagree.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pgqueue.models import Checkpoint, Verdict
from pgqueue.runtime.jobdefs import JobHandler, StepJob

#: The reasons, in the order the rule checks them.
REASONS = ("unknown_kind", "payload_version", "step_set_changed")
#: The handlers of an App, by kind (App.handlers).
Handlers = Mapping[str, JobHandler | StepJob]


def unknown_kind(handlers: Handlers, kind: str | None) -> Verdict | None:
    """A job of a kind none of `handlers` runs."""
    if (kind or "") in handlers:
        return None
    return Verdict("unknown_kind", {"message": f"no handler for kind {kind!r} in this worker",
                                    "kind": kind, "known_kinds": sorted(handlers)})


def plain_with_checkpoint(handler: JobHandler, cp: Checkpoint) -> Verdict | None:
    """A job part way through the steps of a kind that is now a plain job: running the plain
    handler would start its work over."""
    if cp.step_set_hash is None and cp.last_completed_step is None and cp.cursor_step is None:
        return None
    return Verdict("step_set_changed", {
        "message": f"kind {handler.kind!r} is now a plain job, and this job was part way "
                   f"through its steps",
        "old_hash": cp.step_set_hash, "new_steps": [],
        "last_completed_step": cp.last_completed_step, "cursor_step": cp.cursor_step})


def payload(handler: StepJob, version: int | None) -> Verdict | None:
    """A payload version the code cannot bring to its own (None: it can, maybe by upcasting)."""
    code = handler.schema_version
    if version is None or version == code:
        return None
    missing = [v for v in range(version, code) if v not in handler.upcasters]
    if version < code and not missing:
        return None
    return Verdict("payload_version", {
        "message": (f"payload version {version} is newer than the code's {code}"
                    if version > code
                    else f"no upcaster from version {missing[0]} (payload {version}, code {code})"),
        "job_schema_version": version, "code_schema_version": code})


def needs_recorded_steps(handler: StepJob, cp: Checkpoint) -> bool:
    """Whether `resume` needs the job's recorded step list (its hash is not the code's)."""
    return cp.step_set_hash is not None and cp.step_set_hash != handler.step_set_hash


def resume(handler: StepJob, cp: Checkpoint,
           recorded: list[dict[str, Any]] | None) -> int | Verdict:
    """The index of the step to resume at, or why the job cannot resume.

    :param recorded: the job's recorded step list, when `needs_recorded_steps` (None: the
        database does not know it).
    """
    new = handler.step_list
    names = [s["name"] for s in new]
    if not needs_recorded_steps(handler, cp):
        if cp.last_completed_step is None:
            return 0
        if cp.last_completed_step in names:
            return names.index(cp.last_completed_step) + 1
        old = None
    else:
        old = recorded
    if old is None:
        return Verdict("step_set_changed", {
            "message": "the job's recorded step list is unknown to this database",
            "old_hash": cp.step_set_hash, "new_hash": handler.step_set_hash, "new_steps": new,
            "last_completed_step": cp.last_completed_step, "cursor_step": cp.cursor_step})
    old_names = [s["name"] for s in old]
    done = old_names.index(cp.last_completed_step) + 1 if cp.last_completed_step in old_names else 0
    ok = cp.last_completed_step is None or cp.last_completed_step in old_names
    ok = ok and old[:done] == new[:done]
    in_progress = cp.cursor_step is not None and cp.cursor_step != cp.last_completed_step
    if ok and in_progress:
        ok = done < len(old) and done < len(new) and old[done] == new[done]
    if ok:
        return done
    return Verdict("step_set_changed", {
        "message": "completed steps are no longer an unchanged prefix of the step list, "
                   "or the step in progress changed",
        "old_hash": cp.step_set_hash, "new_hash": handler.step_set_hash,
        "old_steps": old, "new_steps": new,
        "last_completed_step": cp.last_completed_step, "cursor_step": cp.cursor_step})


def verdict(handlers: Handlers, kind: str | None, cp: Checkpoint,
            step_list: Callable[[str], list[dict[str, Any]] | None]) -> Verdict | None:
    """What a worker running `handlers` (an App's) would decide for a job of `kind` with
    checkpoint `cp` (its schema_version included), in the worker's order; None: it would run
    it.

    :param step_list: a recorded step list by hash (called only when the rule needs one).
    """
    found = unknown_kind(handlers, kind)
    if found is not None:
        return found
    handler = handlers[kind or ""]
    if isinstance(handler, JobHandler):
        return plain_with_checkpoint(handler, cp)
    if not handler.steps:
        return None  # not undecodable: the worker fails it (a step job with no steps)
    found = payload(handler, cp.schema_version)
    if found is not None:
        return found
    recorded = (step_list(cp.step_set_hash)
                if cp.step_set_hash is not None and needs_recorded_steps(handler, cp) else None)
    start = resume(handler, cp, recorded)
    return start if isinstance(start, Verdict) else None
