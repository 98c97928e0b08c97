"""`pgqueue jobs inspect|release|rewind|restart|skip-step|accept-step-set|cancel|set-threshold`.

The operator's transitions on one job. Each is a SQL function that logs its op and refuses,
with a message saying why, a job in a state where it makes no sense (exit 1).
"""
from __future__ import annotations

import json
from typing import Any

import click
from rich.text import Text

import pgqueue
from pgqueue.client import operate
from pgqueue.jsonview import history_json

from .common import (
    EXIT_FAILED,
    JOB_ID,
    PREVIEW_BYTES,
    AnyJob,
    console,
    fail,
    job_json,
    literal,
    open_queue,
    print_json,
    say,
    table,
    unwrap,
)
from .dead import requeue_dead
from .jobs import (
    FULL,
    JSON,
    fetch_history,
    fetch_job,
    jobs,
    print_history,
    print_job,
)


def _done(message: str, job: AnyJob | None, as_json: bool) -> None:
    if as_json:
        print_json(None if job is None else job_json(job))
    else:
        say(message)


@jobs.command()
@click.argument("job_id", metavar="ID", type=JOB_ID)
def requeue(job_id: int) -> None:
    """Return dead letter ID to pending with its attempts reset (as `pgqueue dead requeue`),
    saying what became of it."""
    requeue_dead(job_id)


@jobs.command()
@click.argument("job_id", metavar="ID", type=JOB_ID)
@FULL
@JSON
def inspect(job_id: int, full: bool, as_json: bool) -> None:
    """A job's checkpoint, recorded step list, crashes by step, last error, parking reason and
    history (also once it was acked or cancelled)."""
    with open_queue() as q:
        job = fetch_job(q, job_id, full)
        history = fetch_history(q, job_id, full)
        if job is None:
            if history is None:
                fail(f"job {job_id} not found: it never existed, or it finished and the op log "
                     f"was pruned past its ops", EXIT_FAILED)
            if as_json:
                print_json({"history": history_json(history)})
            else:
                print_history(history)
            return
        cp = unwrap(job)[0].checkpoint
        steps = q.step_list(cp.step_set_hash) if cp.step_set_hash else None
    if as_json:
        print_json({**job_json(job), "steps": steps,
                    "history": None if history is None else history_json(history)})
        return
    print_job(job, full)
    if steps:
        names = [s["name"] for s in steps]
        done = names.index(cp.last_completed_step) + 1 if cp.last_completed_step in names else 0
        console().print(table("steps", ["#", "step", "version", "status", "crashes"], [
            (i + 1, step["name"], step["version"],
             "completed" if i < done else "in progress" if step["name"] == cp.cursor_step
             else "to do",
             cp.crashes_by_step.get(step["name"], ""))
            for i, step in enumerate(steps)]))
    detail = unwrap(job)[0].state_detail
    if detail:
        console().print(Text("state detail", style="bold"))
        console().print(Text("\n".join(
            literal(line) for line in
            json.dumps(detail, indent=2, ensure_ascii=False, default=str).split("\n"))))
    if history is not None:
        print_history(history)


def _after(job_id: int, action: Any, message: str, as_json: bool) -> None:
    with open_queue() as q:
        action(q)
        _done(message, q.job_preview(job_id, preview_bytes=PREVIEW_BYTES), as_json)


@jobs.command()
@click.argument("job_id", metavar="ID", type=JOB_ID)
@click.option("--reset-crashes", is_flag=True, help="Also forget its crashes by step.")
@click.option("--json", "as_json", is_flag=True, help="Print the job as JSON afterwards.")
def release(job_id: int, reset_crashes: bool, as_json: bool) -> None:
    """Let a quarantined or undecodable job run again."""
    _after(job_id, lambda q: q.release(job_id, reset_crashes=reset_crashes),
           f"released job {job_id}", as_json)


@jobs.command()
@click.argument("job_id", metavar="ID", type=JOB_ID)
@click.option("--to-step", required=True, metavar="NAME", help="The step the next run starts at.")
@click.option("--json", "as_json", is_flag=True, help="Print the job as JSON afterwards.")
def rewind(job_id: int, to_step: str, as_json: bool) -> None:
    """Make a step job's next run start at step NAME (later completed steps run again)."""
    _after(job_id, lambda q: q.rewind(job_id, to_step),
           f"job {job_id} will resume at step {to_step}", as_json)


@jobs.command()
@click.argument("job_id", metavar="ID", type=JOB_ID)
@click.option("--json", "as_json", is_flag=True, help="Print the job as JSON afterwards.")
def restart(job_id: int, as_json: bool) -> None:
    """Drop a job's checkpoint: it runs again from step one."""
    _after(job_id, lambda q: q.restart(job_id), f"job {job_id} will run from step one", as_json)


@jobs.command("skip-step")
@click.argument("job_id", metavar="ID", type=JOB_ID)
@click.option("--json", "as_json", is_flag=True, help="Print the job as JSON afterwards.")
def skip_step(job_id: int, as_json: bool) -> None:
    """Count the job's step in progress as completed without running it."""
    skipped: list[str] = []
    _after(job_id, lambda q: skipped.append(q.skip_step(job_id)),
           f"job {job_id}: step skipped", as_json)
    if skipped and not as_json:
        say(f"skipped step: {skipped[0]}")


@jobs.command("accept-step-set")
@click.argument("job_id", metavar="ID", type=JOB_ID)
@click.option("--json", "as_json", is_flag=True, help="Print the job as JSON afterwards.")
def accept_step_set(job_id: int, as_json: bool) -> None:
    """Accept the new step list of a job parked as step_set_changed; it resumes after its last
    completed step."""
    _after(job_id, lambda q: q.accept_step_set(job_id),
           f"job {job_id} accepted its new step list", as_json)


@jobs.command()
@click.argument("job_id", metavar="ID", type=JOB_ID)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def cancel(job_id: int, as_json: bool) -> None:
    """Cancel a job. One that is not leased (pending, scheduled, parked or dead) is removed for
    good; one a worker runs is asked to stop: its handler sees the cancel at its next advance
    or step boundary (an async one at once) and the job ends as cancelled, never retried."""
    with open_queue() as q:
        outcome = q.cancel(job_id)
    if as_json:
        print_json({"job_id": job_id, "cancelled": outcome == "cancelled", "outcome": outcome})
    elif outcome == "requested":
        say(f"cancel of job {job_id} requested: a worker runs it; it stops at its next advance "
            f"or step boundary and ends as cancelled (`pgqueue jobs show {job_id}` tells when)")
    else:
        say(f"cancelled job {job_id}")


@jobs.command("set-threshold")
@click.argument("kind")
@click.option("--stream", default="default", show_default=True)
@click.option("--quarantine-after", type=click.IntRange(min=1), default=None,
              help="Crashes of one step before the job is quarantined (omit to remove the "
                   "kind's override and use the stream's).")
def set_threshold(kind: str, stream: str, quarantine_after: int | None) -> None:
    """Set a kind's crash quarantine threshold in a stream."""
    with open_queue(stream) as q:
        q.configure_kind(kind, quarantine_after=quarantine_after)
    shown = quarantine_after if quarantine_after is not None else "the stream's default"
    say(f"{stream}/{kind}: quarantine after {shown}")


@jobs.command()
@click.argument("action", metavar="ACTION", type=click.Choice(pgqueue.VERBS))
@click.option("--stream", default=None, help="Only this stream (default: every stream).")
@click.option("--state", type=click.Choice(pgqueue.JOB_STATES), default=None,
              help="Only jobs in this state.")
@click.option("--kind", default=None, help="Only jobs of this kind.")
@click.option("--to-step", default=None, metavar="NAME", help="The step to rewind to (rewind only).")
@click.option("--yes", is_flag=True, help="Do not ask: act on the jobs counted.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def bulk(action: str, stream: str | None, state: str | None, kind: str | None,
         to_step: str | None, yes: bool, as_json: bool) -> None:
    """Run ACTION (requeue, release, rewind, ...) on every job of a filter: counts them, asks,
    then acts on those counted (jobs enqueued after the count are left), each through the
    same transition as the one-job command. Jobs that changed meanwhile are listed as refused."""
    try:
        operate.check_verb(action, to_step)
    except ValueError as exc:
        raise click.UsageError(f"{exc} (--to-step NAME)") from None
    with open_queue() as q:
        counted = q.count_jobs(stream=stream, state=state, kind=kind)
        if counted.count == 0:
            if as_json:
                print_json({"action": action, "done": 0, "refused": 0, "requested": 0,
                            "reasons": []})
            else:
                say("no job matches: nothing to do")
            return
        if not yes and not click.confirm(f"{action} {counted.count:,} jobs?", err=True):
            fail("nothing done", EXIT_FAILED)
        result = q.act_on_jobs(action, stream=stream, state=state, kind=kind,
                               through=counted.newest, to_step=to_step)
    if as_json:
        print_json({"action": action, "done": result.done, "refused": result.refused,
                    "requested": result.requested,
                    "reasons": [{"job_id": i, "why": why} for i, why in result.reasons]})
        return
    asked = f", {result.requested:,} leased jobs asked to stop" if result.requested else ""
    say(f"{action}: {result.done:,} jobs done, {result.refused:,} refused{asked}")
    for job_id, why in result.reasons:
        say(f"  job {job_id}: {why}")
