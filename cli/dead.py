"""`pgqueue dead`: the dead letters (jobs that used up their attempts) and requeueing them.

Dead letters stay until an operator acts; requeue returns one to pending with its attempts
reset, through the library's transition, so the op log records it.
"""
from __future__ import annotations

from collections.abc import Sequence

import click

import pgqueue

from .common import (
    EXIT_FAILED,
    JOB_ID,
    PREVIEW_BYTES,
    AnyJob,
    console,
    fail,
    job_json,
    jobs_table,
    open_queue,
    print_json,
    say,
)
from .jobs import FULL, JSON, show_job


@click.group()
def dead() -> None:
    """List, show and requeue dead letters."""


@dead.command("list")
@click.option("--stream", default=None, help="Only this stream (default: every stream).")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True,
              help="At most this many, newest first.")
@FULL
@JSON
def list_(stream: str | None, limit: int, full: bool, as_json: bool) -> None:
    """List dead letters, newest first, with their last error."""
    found: Sequence[AnyJob]
    with open_queue("default" if stream is None else stream) as q:
        if stream is None and full:
            found = q.jobs(state="dead", all_streams=True, limit=limit)
        elif stream is None:
            found = q.jobs_preview(state="dead", all_streams=True, limit=limit,
                                   preview_bytes=PREVIEW_BYTES)
        elif full:
            found = q.dead_letters(limit)
        else:
            found = q.dead_letters_preview(limit, preview_bytes=PREVIEW_BYTES)
    if as_json:
        print_json([job_json(j) for j in found])
        return
    if not found:
        say("no dead letters")
        return
    console().print(jobs_table(f"dead letters ({len(found)} shown, newest first)", found))


@dead.command()
@click.argument("job_id", metavar="ID", type=JOB_ID)
@FULL
@JSON
def show(job_id: int, full: bool, as_json: bool) -> None:
    """Show dead letter ID with its last error; exits 1 when it is not a dead letter."""
    show_job(job_id, full, as_json, dead_only=True)


@dead.command()
@click.argument("job_id", metavar="ID", type=JOB_ID)
def requeue(job_id: int) -> None:
    """Return dead letter ID to pending with its attempts reset.

    Exits 1 when ID is not a dead letter, or when a live job now holds its dedup key (the
    message names that job).
    """
    requeue_dead(job_id)


def requeue_dead(job_id: int) -> None:
    """Requeue a dead letter and say what became of it (`dead requeue`, `jobs requeue`)."""
    with open_queue() as q:
        before = q.job_preview(job_id, preview_bytes=0)
        try:
            q.requeue_dead_letter(job_id)
        except pgqueue.JobNotFound as exc:
            fail(str(exc), EXIT_FAILED)
        except pgqueue.DedupConflict as exc:
            message = str(exc)
            if exc.holder is not None and str(exc.holder) not in message:
                message += f" (held by job {exc.holder})"
            fail(message, EXIT_FAILED)
        after = q.job_preview(job_id, preview_bytes=0)
    was = "" if before is None else (
        f" (it was dead after {before.job.attempts} attempt(s)"
        + (f": {before.job.error_summary}" if before.job.error_summary else "") + ")")
    now = "gone already" if after is None else (
        f"{after.job.state} in stream {after.job.stream!r}, its attempts reset to "
        f"{after.job.attempts} of {after.job.max_attempts or 'no limit'}")
    say(f"requeued job {job_id}: {now}{was}")
