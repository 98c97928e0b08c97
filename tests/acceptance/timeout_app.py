"""The App the time-limit tests run in real worker processes (tests/acceptance/test_timeouts.py).

Each handler writes its side effects to the ledger of worker_app.py (`record`), so a test sees
what ran, in which process, and whether the handler was told of its limit:

- "cooperative" (plain, limit 0.5 s): checks `ctx.check_cancelled()` every 10 ms for up to
  $payload.seconds; "coop:start", then "coop:told" when JobTimeout reaches it (re-raised).
- "stuck" (plain, limit 0.3 s): sleeps $payload.seconds without looking, "stuck:start" and,
  once the sleep is over, "stuck:end".
- "slow" (async, limit 0.5 s): awaits a long sleep; "slow:start", then "slow:cancelled" when
  its task is cancelled (re-raised).
- "stepped" (plain steps): "one" is quick; "two" (its own limit 0.5 s) advances its cursor
  every 10 ms, for up to 30 s on the first attempt and at once on the next.
- "note": a quick job, "note" (what a new handler thread runs while a stuck one sleeps).
"""
from __future__ import annotations

import asyncio
import time

import pgqueue
from tests.acceptance.worker_app import record

app = pgqueue.App()


@app.job("cooperative", timeout=0.5, max_attempts=1)
def cooperative(ctx: pgqueue.JobContext) -> None:
    record(ctx.job_id, "coop:start")
    until = time.monotonic() + float(ctx.json()["seconds"])
    try:
        while time.monotonic() < until:
            ctx.check_cancelled()
            time.sleep(0.01)
    except pgqueue.JobTimeout:
        record(ctx.job_id, "coop:told")
        raise
    record(ctx.job_id, "coop:end")


@app.job("stuck", timeout=0.3, max_attempts=2)
def stuck(ctx: pgqueue.JobContext) -> None:
    record(ctx.job_id, "stuck:start")
    time.sleep(float(ctx.json()["seconds"]))  # never looks at its limit
    record(ctx.job_id, "stuck:end")


@app.job("slow", timeout=0.5, max_attempts=1)
async def slow(ctx: pgqueue.JobContext) -> None:
    await asyncio.to_thread(record, ctx.job_id, "slow:start")
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        await asyncio.to_thread(record, ctx.job_id, "slow:cancelled")
        raise


@app.job("note")
def note(ctx: pgqueue.JobContext) -> None:
    record(ctx.job_id, "note")


stepped = app.step_job("stepped", max_attempts=3)


@stepped.step("one")
def one(ctx: pgqueue.StepContext) -> None:
    record(ctx.job_id, "one")


@stepped.step("two", timeout=0.5)
def two(ctx: pgqueue.StepContext) -> None:
    record(ctx.job_id, "two:start", ctx.attempts)
    until = time.monotonic() + (30 if ctx.attempts == 0 else 0)
    i = 0
    while time.monotonic() < until:
        ctx.advance(i)  # raises JobTimeout once the step's limit has passed
        i += 1
        time.sleep(0.01)
    record(ctx.job_id, "two:end", ctx.attempts)
