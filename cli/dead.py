"""`pgqueue dead`: the dead letters (jobs that used up their attempts) and requeueing them.

Dead letters stay until an operator acts; requeue returns one to pending with its attempts
reset, through the library's transition, so the op log records it.
"""
from __future__ import annotations

import click

import pgqueue

from .common import EXIT_FAILED, console, fail, job_json, jobs_table, open_queue, print_json


@click.group()
def dead() -> None:
    """List and requeue dead letters."""


@dead.command("list")
@click.option("--stream", default=None, help="Only this stream (default: every stream).")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True,
              help="At most this many, newest first.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def list_(stream: str | None, limit: int, as_json: bool) -> None:
    """List dead letters, newest first, with their last error."""
    with open_queue("default" if stream is None else stream) as q:
        if stream is None:
            found = q.jobs(state="dead", all_streams=True, limit=limit)
        else:
            found = q.dead_letters(limit)
    if as_json:
        print_json([job_json(j) for j in found])
        return
    if not found:
        click.echo("no dead letters")
        return
    console().print(jobs_table(f"dead letters ({len(found)} shown, newest first)", found))


@dead.command()
@click.argument("job_id", metavar="ID", type=int)
def requeue(job_id: int) -> None:
    """Return dead letter ID to pending with its attempts reset.

    Exits 1 when ID is not a dead letter, or when a live job now holds its dedup key (the
    message names that job).
    """
    with open_queue() as q:
        try:
            q.requeue_dead_letter(job_id)
        except pgqueue.JobNotFound as exc:
            fail(str(exc), EXIT_FAILED)
        except pgqueue.DedupConflict as exc:
            message = str(exc)
            if exc.holder is not None and str(exc.holder) not in message:
                message += f" (held by job {exc.holder})"
            fail(message, EXIT_FAILED)
    click.echo(f"requeued job {job_id}")
