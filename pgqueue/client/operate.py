# DO NOT EDIT: generated from pgqueue/client/operate_async.py by tools/generate.py; edit that file.
"""Operator transitions on one job: release, rewind, restart, skip a step, accept a new step
set, cancel. Each is a SQL function that refuses a job in a state where it makes no sense
(InvalidState, JobNotFound, DedupConflict) and logs its op. `act` runs one by its verb name
(models.VERBS: the names the CLI and the HTTP API use), `act_on_jobs` one on every job of a
filter through the same SQL functions."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pgqueue import validate
from pgqueue.client import deadletter, observe
from pgqueue.db import run
from pgqueue.errors import InvalidState, JobNotFound
from pgqueue.models import VERBS, BulkResult


def _job_id(job_id: int) -> int:
    return validate.integer(job_id, "job_id", low=1, high=validate.MAX_BIGINT)


@dataclass(frozen=True)
class Whereabouts:
    """Where a job is: its stream (None when no job has the id), and its lease when leased
    with no cancel requested yet."""

    stream: str | None
    lease_id: int | None


def whereabouts(conn: run.Conn, job_id: int) -> Whereabouts:
    """Find a job's stream first: a verb names it, so that on Citus it runs on the node holding
    the stream and its op takes that node's seq (a job's stream never changes)."""
    row = run.fetch_one(conn, "job_whereabouts", {"job_id": _job_id(job_id)})
    assert row is not None
    return Whereabouts(row["stream"], row["lease_id"])


def _on_its_stream(conn: run.Conn, name: str, job_id: int,
                   **params: object) -> list[dict[str, object]]:
    """Run the verb query `name` on a job, naming the job's stream ("" when no job has the id:
    the function then raises its own not-found error; never a NULL, which crashes Citus 14.0's
    coordinator: see pgqueue.each_stream)."""
    found = whereabouts(conn, job_id)
    return run.fetch(conn, name, {"job_id": job_id, "stream": found.stream or "", **params})


def release(conn: run.Conn, job_id: int, *, reset_crashes: bool = False) -> None:
    """A quarantined or undecodable job runs again."""
    _on_its_stream(conn, "release_job", _job_id(job_id), reset_crashes=reset_crashes)


def rewind(conn: run.Conn, job_id: int, to_step: str) -> None:
    """The job's next run starts at `to_step`."""
    if not isinstance(to_step, str) or not to_step:
        raise ValueError("to_step must be a step name")
    validate.step_name(to_step, "to_step")
    _on_its_stream(conn, "rewind_job", _job_id(job_id), to_step=to_step)


def restart(conn: run.Conn, job_id: int) -> None:
    """Drop the checkpoint: the job runs from step one."""
    _on_its_stream(conn, "restart_job", _job_id(job_id))


def skip_step(conn: run.Conn, job_id: int) -> str:
    """Count the step in progress as done without running it; returns the skipped step."""
    rows = _on_its_stream(conn, "skip_step_job", _job_id(job_id))
    return str(rows[0]["last_completed_step"])


def accept_step_set(conn: run.Conn, job_id: int) -> None:
    """Accept the new step list of a job parked as step_set_changed."""
    _on_its_stream(conn, "accept_step_set_job", _job_id(job_id))


def cancel(conn: run.Conn, job_id: int) -> str:
    """Cancel a job: one that is not leased (live or dead) is removed for good ("cancelled");
    a leased one is asked to stop ("requested": its worker ends it as cancelled). On Citus the
    worker is told from here, on the coordinator where workers listen."""
    found = whereabouts(conn, _job_id(job_id))
    outcome = str(run.scalar(conn, "cancel_job", {"job_id": job_id,
                                                  "stream": found.stream or ""}))
    if outcome == "requested" and found.lease_id is not None and run.on_citus(conn):
        _tell_cancelled(conn, str(found.stream), [job_id])
    return outcome


def _tell_cancelled(conn: run.Conn, stream: str, job_ids: list[int]) -> None:
    """On Citus: tell the workers holding these jobs' leases (read now, after the request)
    that their cancel was requested, on the coordinator where they listen (the stream's node
    does not notify: pgqueue.notify_cancel)."""
    leases = [r["lease_id"] for r in run.fetch(conn, "cancel_requested_leases",
                                               {"stream": stream, "job_ids": job_ids})]
    if leases:
        run.fetch(conn, "notify_cancels_here", {"lease_ids": leases})


def configure_stream(conn: run.Conn, stream: str, *, retry_base: float | None = None,
                     retry_cap: float | None = None, quarantine_after: int | None = None,
                     max_payload_bytes: int | None = None) -> None:
    """Set a stream's retry backoff (seconds), crash quarantine threshold and payload limit
    (bytes, 1 to 64 MiB; 16 MiB unless set). None leaves a setting as it is."""
    validate.stream(stream)
    if max_payload_bytes is not None:
        from pgqueue.client.enqueue import MAX_PAYLOAD_BYTES

        validate.integer(max_payload_bytes, "max_payload_bytes", low=1, high=MAX_PAYLOAD_BYTES)
    run.fetch(conn, "configure_stream", {
        "max_payload_bytes": max_payload_bytes,
        "stream": stream,
        "retry_base_ms": None if retry_base is None else validate.to_ms(retry_base, "retry_base"),
        "retry_cap_ms": None if retry_cap is None else validate.to_ms(retry_cap, "retry_cap"),
        "quarantine_after": None if quarantine_after is None
        else validate.integer(quarantine_after, "quarantine_after", low=1),
    })


def check_verb(verb: str, to_step: str | None, *, name: str = "verb") -> str | None:
    """An operator verb checked, and the step it goes back to: rewind needs one, no other verb
    takes one (the library's, the CLI's and the HTTP API's one rule; `name`: the parameter's
    name in the caller's terms)."""
    if verb not in VERBS:
        raise ValueError(f"{name} must be one of {', '.join(VERBS)}, got {verb[:40]!r}")
    if verb == "rewind":
        if not isinstance(to_step, str) or not to_step:
            raise ValueError("to_step is required: the name of the step to rewind to")
        return validate.step_name(to_step, "to_step")
    if to_step is not None:
        raise ValueError(f"to_step is for rewind only, not {verb}")
    return None


def act(conn: run.Conn, verb: str, job_id: int, *, to_step: str | None = None) -> None:
    """Run the operator verb named `verb` on one job (JobNotFound: no such job; InvalidState:
    the verb does not fit the job's state)."""
    step = check_verb(verb, to_step)
    if verb == "requeue":
        try:
            deadletter.requeue(conn, job_id)
        except JobNotFound:
            job = observe.job(conn, job_id)
            if job is None:
                raise
            raise InvalidState(f"cannot requeue job {job_id}: it is {job.state}, not dead; only "
                               f"dead letters are requeued") from None
        return
    if verb == "release":
        release(conn, job_id)
    elif verb == "rewind":
        assert step is not None
        rewind(conn, job_id, step)
    elif verb == "restart":
        restart(conn, job_id)
    elif verb == "skip-step":
        skip_step(conn, job_id)
    elif verb == "accept-step-set":
        accept_step_set(conn, job_id)
    else:
        cancel(conn, job_id)


#: Jobs per statement of a bulk action: each its own subtransaction, one commit per batch, and
#: below Postgres's 64 subtransactions per transaction (past them every session slows down).
BULK_BATCH = 50


@dataclass(frozen=True)
class BatchOutcome:
    """What a verb did to one batch of jobs beyond doing it: the jobs it did not fit, with
    why, and the leased jobs a cancel asked to stop."""

    refused: dict[int, str]
    requested: list[int]
    count: int = 0  # jobs sent


def _apply_by_stream(conn: run.Conn, verb: str, page: Sequence[tuple[int, str]], *,
                     to_step: str | None, state: str | None,
                     kind: str | None) -> list[BatchOutcome]:
    """One batch of (id, stream), a statement per stream in one round trip: each names its
    stream (as the filter it already is), so on Citus each runs on the stream's node."""
    step = check_verb(verb, to_step)
    by_stream: dict[str, list[int]] = {}
    for job_id, job_stream in page:
        by_stream.setdefault(job_stream, []).append(job_id)
    results = run.fetch_each(conn, "apply_verb_to_jobs", [
        {"verb": verb, "job_ids": ids, "to_step": step, "stream": one_stream, "state": state,
         "kind": kind} for one_stream, ids in by_stream.items()])
    outcomes = [_outcome(rows, len(ids))
                for rows, ids in zip(results, by_stream.values(), strict=True)]
    if verb == "cancel" and run.on_citus(conn):
        for one_stream, outcome in zip(by_stream, outcomes, strict=True):
            if outcome.requested:
                _tell_cancelled(conn, one_stream, outcome.requested)
    return outcomes


def _outcome(rows: Sequence[dict[str, object]], count: int) -> BatchOutcome:
    return BatchOutcome(
        refused={int(str(r["job_id"])): str(r["refused"]) for r in rows
                 if r["outcome"] == "refused"},
        requested=[int(str(r["job_id"])) for r in rows if r["outcome"] == "requested"],
        count=count)


def apply_to_jobs(conn: run.Conn, verb: str, job_ids: Sequence[int], *,
                  to_step: str | None = None, stream: str | None = None,
                  state: str | None = None, kind: str | None = None) -> BatchOutcome:
    """One verb on each job still matching the filter (stream, state, kind; None: any), each
    locked, checked and changed in its own subtransaction of one statement."""
    step = check_verb(verb, to_step)
    where = observe.job_filter(stream, state, kind)
    ids = [_job_id(i) for i in job_ids]
    if len(ids) > BULK_BATCH:
        raise ValueError(f"job_ids: at most {BULK_BATCH} at a time, got {len(ids)}")
    if stream is None and run.on_citus(conn):
        return _apply_anywhere(conn, verb, ids, to_step=to_step, state=state, kind=kind)
    rows = run.fetch(conn, "apply_verb_to_jobs" if stream is not None
                     else "apply_verb_to_jobs_any_stream",
                     {"verb": verb, "job_ids": ids, "to_step": step, **where})
    return _outcome(rows, len(ids))


def _apply_anywhere(conn: run.Conn, verb: str, ids: list[int], *,
                    to_step: str | None, state: str | None,
                    kind: str | None) -> BatchOutcome:
    """apply_to_jobs without a stream on Citus: each job's stream looked up first, then each
    stream's jobs on its node. An id of no job is sent under the stream "" (the function
    refuses it as it does on one server: no such job)."""
    found = {int(r["id"]): str(r["stream"])
             for r in run.fetch(conn, "jobs_streams", {"job_ids": ids})}
    page = [(i, found.get(i, "")) for i in ids]
    outcomes = _apply_by_stream(conn, verb, page, to_step=to_step, state=state, kind=kind)
    return BatchOutcome(
        refused={k: v for o in outcomes for k, v in o.refused.items()},
        requested=[i for o in outcomes for i in o.requested], count=len(ids))


def act_on_jobs(conn: run.Conn, verb: str, *, stream: str | None = None,
                state: str | None = None, kind: str | None = None,
                through: int | None = None, to_step: str | None = None,
                batch: int = BULK_BATCH) -> BulkResult:
    """Run `verb` on every job of a filter with an id of at most `through` (JobCount.newest
    from the count shown before confirming: later jobs are left), newest first, a batch per
    statement. Each job is checked against the filter again under its row lock: one that
    left it meanwhile, or that the verb no longer fits, is counted as refused."""
    check_verb(verb, to_step)
    observe.job_filter(stream, state, kind)
    validate.integer(batch, "batch", low=1, high=BULK_BATCH)
    done = refused = requested = 0
    reasons: list[tuple[int, str]] = []
    after: int | None = None
    while True:
        page = observe.jobs_page_ids(conn, stream=stream, state=state, kind=kind,
                                     after=after, through=through, limit=batch)
        if not page:
            break
        for batch_outcome in _apply_by_stream(conn, verb, page, to_step=to_step,
                                              state=state, kind=kind):
            failed = batch_outcome.refused
            done += batch_outcome.count - len(failed) - len(batch_outcome.requested)
            refused += len(failed)
            requested += len(batch_outcome.requested)
            reasons.extend(list(failed.items())[:BulkResult.MAX_REASONS - len(reasons)])
        after = page[-1][0]
        if len(page) < batch:
            break
    return BulkResult(verb, done, refused, reasons, requested)
