"""`pgqueue jobs`: list jobs and show one, in any set (live, dead, parked).

Read-only: what an operator looks at first. `show` prints a job with its history (its ops,
oldest first, from `Queue.history`); a job that was acked or cancelled is gone from every set,
and `show` still tells how and when it finished, for as long as the op log keeps its ops.

Payloads are previewed: the database sends only their first PREVIEW_BYTES bytes and their
size, so a 200 MiB job shows as fast as a small one; --full fetches and prints the whole.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

import pgqueue
from pgqueue.jsonview import history_json

from .common import (
    EXIT_FAILED,
    JOB_ID,
    PREVIEW_BYTES,
    AnyJob,
    ago,
    console,
    encode_bytes,
    fail,
    job_json,
    jobs_table,
    kv_table,
    open_queue,
    print_json,
    say,
    say_lines,
    size_note,
    unwrap,
)
from .oplog import ops_table

FULL = click.option("--full", is_flag=True,
                    help=f"The whole payload (default: its first {PREVIEW_BYTES:,} bytes and "
                         "its size; JSON says payload_truncated).")
JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


@click.group()
def jobs() -> None:
    """List, show, inspect and resolve jobs."""


@jobs.command("list")
@click.option("--stream", default=None, help="Only this stream (default: every stream).")
@click.option("--state", type=click.Choice(pgqueue.JOB_STATES), default=None,
              help="Only jobs in this state.")
@click.option("--kind", default=None, help="Only jobs of this kind.")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True,
              help="At most this many jobs, newest first.")
@FULL
@JSON
def list_(stream: str | None, state: str | None, kind: str | None, limit: int, full: bool,
          as_json: bool) -> None:
    """List jobs, newest first (a scheduled job with the time it runs)."""
    with open_queue("default" if stream is None else stream) as q:
        found: Sequence[AnyJob] = (
            q.jobs(state=state, all_streams=stream is None, limit=limit, kind=kind) if full else
            q.jobs_preview(state=state, all_streams=stream is None, limit=limit,
                           preview_bytes=PREVIEW_BYTES, kind=kind))
        unknown = q.unknown_stream() if stream is not None and not found else None
    if unknown is not None:  # a typo is not "no jobs"
        fail(unknown, EXIT_FAILED)
    if as_json:
        print_json([job_json(j) for j in found])
        return
    if not found:
        say("no jobs")
        return
    console().print(jobs_table(f"jobs ({len(found)} shown, newest first)", found))


def fetch_job(q: pgqueue.Queue, job_id: int, full: bool) -> AnyJob | None:
    """Job `job_id`, whole with `full`, else with its payload cut by the database."""
    return q.job(job_id) if full else q.job_preview(job_id, preview_bytes=PREVIEW_BYTES)


def job_fields(job: AnyJob, *, with_payload: bool = True) -> dict[str, Any]:
    """The fields of one job for people, in reading order."""
    info, size, truncated = unwrap(job)
    data = job_json(job)
    cp = data.pop("checkpoint")
    fields: dict[str, Any] = {}
    for key, value in data.items():
        if key.endswith("_encoding") or key == "payload_truncated":
            continue
        if (key == "payload" and not with_payload) or key == "last_error":
            continue  # the traceback follows the table, line by line (print_job)
        if key in ("payload", "dedup_key") and data[f"{key}_encoding"] == "base64":
            value = f"(base64) {value}"
        if key == "payload" and truncated:
            value = f"{value}…"
        if key == "payload_size":
            value = size_note(size, len(info.payload) if truncated else None)
        if key.endswith("_at") or key in ("not_before",):
            value = ago(getattr(info, key))
        fields[key] = value
    for key, value in cp.items():
        if key == "cursor_encoding" or value in (None, {}):
            continue
        if key == "cursor" and cp["cursor_encoding"] == "base64":
            value = f"(base64) {value}"
        fields[f"checkpoint.{key}"] = value
    return fields


def print_job(job: AnyJob, full: bool) -> None:
    """One job for people: its fields, and with --full the whole payload after them (a table
    cell of many megabytes would take rich minutes to lay out)."""
    info = unwrap(job)[0]
    console().print(kv_table(f"job {info.job_id}", job_fields(job, with_payload=not full)))
    if info.last_error is not None and info.last_error != info.error_summary:
        say("last error:")
        say_lines(info.last_error.rstrip("\n"), job_data=True)
        say()
    if full:
        text, encoding = encode_bytes(info.payload)
        say(f"payload ({len(info.payload):,} bytes, {encoding}):")
        say(text)


def fetch_history(q: pgqueue.Queue, job_id: int, full: bool) -> pgqueue.JobHistory | None:
    """The job's history, with payloads in op bodies cut by the database unless `full`."""
    return q.history(job_id, preview_bytes=None if full else PREVIEW_BYTES)


def print_history(history: pgqueue.JobHistory) -> None:
    """The job's ops for people, and plainly what is missing or how it finished."""
    if history.state in pgqueue.FINISHED_STATES:
        under = "" if history.lease_id is None else f" under lease {history.lease_id}"
        say(f"job {history.job_id} is gone: {history.state} {ago(history.finished_at)}{under}")
    if history.cancel == "too late":
        say(f"a cancel was requested {ago(history.cancel_requested_at)}, too late: its handler "
            f"finished first and it was acked")
    elif history.cancel == "requested":
        say(f"a cancel was requested {ago(history.cancel_requested_at)}: the worker running it "
            f"stops it at its next advance or step boundary")
    if not history.ops:
        say(f"no ops of job {history.job_id} are kept: the op log was pruned past them")
        return
    if history.ops_pruned:
        say(f"the op log no longer holds the first ops of job {history.job_id} (pruned): its "
            f"history below starts at seq {history.ops[0].seq}")
    console().print(ops_table(f"history of job {history.job_id} ({len(history.ops)} ops, oldest "
                              f"first)", history.ops, with_stream=False))


def show_job(job_id: int, full: bool, as_json: bool, *, dead_only: bool = False) -> None:
    """`jobs show` (and `dead show`, with dead_only)."""
    with open_queue() as q:
        job = fetch_job(q, job_id, full)
        history = fetch_history(q, job_id, full)
        verbs = [] if job is None else q.allowed_verbs(unwrap(job)[0])
    if job is not None and dead_only and unwrap(job)[0].state != "dead":
        fail(f"job {job_id} is not a dead letter (it is {unwrap(job)[0].state}); see "
             f"`pgqueue jobs show {job_id}`", EXIT_FAILED)
    if job is None and (dead_only or history is None):
        fail(f"job {job_id} not found: it never existed, or it finished and the op log was "
             f"pruned past its ops", EXIT_FAILED)
    if as_json:
        data = {} if job is None else {**job_json(job), "actions": verbs}
        print_json({**data, "history": None if history is None else history_json(history)})
        return
    if job is not None:
        print_job(job, full)
        say(f"actions its state allows: {', '.join(verbs) if verbs else 'none'}")
    if history is not None:
        print_history(history)


@jobs.command()
@click.argument("job_id", metavar="ID", type=JOB_ID)
@FULL
@JSON
def show(job_id: int, full: bool, as_json: bool) -> None:
    """Show one job of any stream in any set, with its history (also once it was acked or
    cancelled); exits 1 when nothing of it is left or it never existed."""
    show_job(job_id, full, as_json)
