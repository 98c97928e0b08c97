"""The App the acceptance tests run in real worker processes.

Every handler appends its side effects to a `ledger` table in the test database, so a test
can count exactly what ran, in which process, and when:

    CREATE TABLE ledger (job_id bigint, step text, item int, pid int,
                         at timestamptz DEFAULT clock_timestamp())

(the test creates it). The handlers reach it through the DSN in $PGQUEUE_TEST_LEDGER_DSN.

Behaviour comes from the job payload (JSON):

    {"items": 50,               # transform processes items 0..items-1, advancing the cursor
     "sleep": 0.05,             # seconds per item (plain jobs: seconds for the whole job)
     "die_at_step": "transform",  # where the worker kills itself with SIGKILL ...
     "die_at_item": null,       # ... on entering the step (null) or after this item
     "die_count": 3}            # ... while the ledger shows fewer deaths than this

and $PGQUEUE_TEST_STEPS picks the declared step list of "pipeline" (a key of STEP_SETS),
so a test can change the step list between a crash and the resume.

Ledger rows: "<step>" when a simple step ran; "transform" per item; "enter:transform" with
the first item the step is about to process (the saved cursor + 1, or 0); "die:<step>" just
before the process kills itself; "quick:start"/"quick:end", "patient:start"/"patient:stopped"/
"patient:end" and "note" for the plain jobs.
"""
from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

import psycopg

import pgqueue

LEDGER_DSN_ENV = "PGQUEUE_TEST_LEDGER_DSN"
STEPS_ENV = "PGQUEUE_TEST_STEPS"

#: The step lists "pipeline" can declare, by the name $PGQUEUE_TEST_STEPS gives.
STEP_SETS: dict[str, list[str]] = {
    "v1": ["download", "transform", "upload"],
    # a step inserted before the step a crashed job was in: incompatible
    "inserted": ["download", "validate", "transform", "upload"],
    # a step appended after the resume point: compatible
    "appended": ["download", "transform", "upload", "notify"],
}


def _connect() -> psycopg.Connection[Any]:
    return psycopg.connect(os.environ[LEDGER_DSN_ENV], autocommit=True, connect_timeout=5)


def record(job_id: int, step: str, item: int | None = None) -> None:
    """Append one side effect to the ledger."""
    with _connect() as conn:
        conn.execute("INSERT INTO ledger (job_id, step, item, pid) VALUES (%s, %s, %s, %s)",
                     (job_id, step, item, os.getpid()))


def deaths(job_id: int) -> int:
    """How many times this job has killed a worker so far."""
    with _connect() as conn:
        row = conn.execute("SELECT count(*) FROM ledger WHERE job_id = %s AND step LIKE 'die:%%'",
                           (job_id,)).fetchone()
    return int(row[0]) if row else 0


def maybe_die(ctx: pgqueue.JobContext, step: str, item: int | None = None) -> None:
    """SIGKILL this worker process when the payload asks for it here and the ledger shows
    fewer deaths than die_count (so the job stops dying once it has died often enough)."""
    p = ctx.json()
    if p.get("die_at_step") != step or p.get("die_at_item") != item:
        return
    if deaths(ctx.job_id) >= int(p.get("die_count", 1)):
        return
    record(ctx.job_id, f"die:{step}", item)
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)  # not reached: SIGKILL cannot be caught


app = pgqueue.App()


# -- "pipeline": download, transform (cursor), upload ------------------------------------------


def simple_step(name: str) -> Callable[[pgqueue.StepContext], None]:
    """A step with one side effect."""

    def run(ctx: pgqueue.StepContext) -> None:
        maybe_die(ctx, name)
        record(ctx.job_id, name)

    run.__name__ = name
    return run


def transform(ctx: pgqueue.StepContext) -> None:
    """Process items after the cursor, one ledger row each, advancing the cursor per item."""
    p = ctx.json()
    start = 0 if ctx.cursor is None else int(ctx.cursor) + 1
    record(ctx.job_id, "enter:transform", start)
    maybe_die(ctx, "transform")
    for i in range(start, int(p.get("items", 5))):
        time.sleep(float(p.get("sleep", 0)))
        record(ctx.job_id, "transform", i)
        ctx.advance(i)
        maybe_die(ctx, "transform", i)


pipeline = app.step_job("pipeline")
for _name in STEP_SETS[os.environ.get(STEPS_ENV) or "v1"]:
    pipeline.step(_name)(transform if _name == "transform" else simple_step(_name))


# -- "fragile": a step job with its own crash quarantine threshold ------------------------------

fragile = app.step_job("fragile", quarantine_after=1)
fragile.step("boom")(simple_step("boom"))


# -- plain jobs --------------------------------------------------------------------------------


@app.job("quick")
def quick(job: pgqueue.JobContext) -> None:
    """Starts, sleeps payload["sleep"] seconds, ends."""
    record(job.job_id, "quick:start")
    time.sleep(float(job.json().get("sleep", 0)))
    record(job.job_id, "quick:end")


@app.job("patient")
def patient(job: pgqueue.JobContext) -> None:
    """Works for up to payload["sleep"] seconds, looking at `job.cancelled` every 10 ms: on a
    cancel records "patient:stopped" and stops (pgqueue.Cancelled), else "patient:end"."""
    record(job.job_id, "patient:start")
    deadline = time.monotonic() + float(job.json().get("sleep", 0))
    while time.monotonic() < deadline:
        if job.cancelled:
            record(job.job_id, "patient:stopped")
            job.check_cancelled()
        time.sleep(0.01)
    record(job.job_id, "patient:end")


@app.job("note")
def note(job: pgqueue.JobContext) -> None:
    """One ledger row, then a short sleep."""
    record(job.job_id, "note")
    time.sleep(float(job.json().get("sleep", 0)))
