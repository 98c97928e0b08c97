"""`pgqueue jobs`: list jobs and show one, in any set (live, dead, parked).

Read-only: what an operator looks at first. A job that was acked is gone from every set (its
history stays in the op log: `pgqueue oplog tail --job ID`).
"""
from __future__ import annotations

from typing import Any

import click

import pgqueue

from .common import (
    EXIT_FAILED,
    ago,
    console,
    fail,
    job_json,
    jobs_table,
    kv_table,
    open_queue,
    print_json,
)


@click.group()
def jobs() -> None:
    """List, show, inspect and resolve jobs."""


@jobs.command("list")
@click.option("--stream", default=None, help="Only this stream (default: every stream).")
@click.option("--state", type=click.Choice(pgqueue.JOB_STATES), default=None,
              help="Only jobs in this state.")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True,
              help="At most this many jobs, newest first.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def list_(stream: str | None, state: str | None, limit: int, as_json: bool) -> None:
    """List jobs, newest first."""
    with open_queue("default" if stream is None else stream) as q:
        found = q.jobs(state=state, all_streams=stream is None, limit=limit)
    if as_json:
        print_json([job_json(j) for j in found])
        return
    if not found:
        click.echo("no jobs")
        return
    console().print(jobs_table(f"jobs ({len(found)} shown, newest first)", found))


def job_fields(job: pgqueue.JobInfo) -> dict[str, Any]:
    """The fields of one job for people, in reading order."""
    data = job_json(job)
    cp = data.pop("checkpoint")
    fields: dict[str, Any] = {}
    for key, value in data.items():
        if key.endswith("_encoding"):
            continue
        if key in ("payload", "dedup_key") and data[f"{key}_encoding"] == "base64":
            value = f"(base64) {value}"
        if key.endswith("_at") or key in ("not_before",):
            value = ago(getattr(job, key))
        fields[key] = value
    for key, value in cp.items():
        if key == "cursor_encoding" or value in (None, {}):
            continue
        if key == "cursor" and cp["cursor_encoding"] == "base64":
            value = f"(base64) {value}"
        fields[f"checkpoint.{key}"] = value
    return fields


@jobs.command()
@click.argument("job_id", metavar="ID", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def show(job_id: int, as_json: bool) -> None:
    """Show one job of any stream in any set; exits 1 when it is gone or never existed."""
    with open_queue() as q:
        job = q.job(job_id)
    if job is None:
        fail(f"job {job_id} not found (acked jobs are gone; see `pgqueue oplog tail --job "
             f"{job_id}`)", EXIT_FAILED)
    if as_json:
        print_json(job_json(job))
        return
    console().print(kv_table(f"job {job.job_id}", job_fields(job)))
