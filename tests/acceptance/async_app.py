"""The async twin of worker_app.py: the same kinds, payloads and ledger rows, with `async def`
handlers and steps, so the process-level tests (SIGKILL mid-step, SIGTERM) run unchanged
against coroutines on the worker's event loop.

Ledger writes are blocking psycopg calls, run with asyncio.to_thread as a real async handler
would run blocking code; the steps await asyncio.sleep between items.
"""
from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable

import pgqueue
from tests.acceptance.worker_app import STEP_SETS, STEPS_ENV, maybe_die, record

app = pgqueue.App()


async def arecord(job_id: int, step: str, item: int | None = None) -> None:
    await asyncio.to_thread(record, job_id, step, item)


async def amaybe_die(ctx: pgqueue.JobContext, step: str, item: int | None = None) -> None:
    await asyncio.to_thread(maybe_die, ctx, step, item)


def simple_step(name: str) -> Callable[[pgqueue.AsyncStepContext], Awaitable[None]]:
    async def run(ctx: pgqueue.AsyncStepContext) -> None:
        await amaybe_die(ctx, name)
        await arecord(ctx.job_id, name)

    run.__name__ = name
    return run


async def transform(ctx: pgqueue.AsyncStepContext) -> None:
    """Process items after the cursor, one ledger row each, advancing the cursor per item."""
    p = ctx.json()
    start = 0 if ctx.cursor is None else int(ctx.cursor) + 1
    await arecord(ctx.job_id, "enter:transform", start)
    await amaybe_die(ctx, "transform")
    for i in range(start, int(p.get("items", 5))):
        await asyncio.sleep(float(p.get("sleep", 0)))
        await arecord(ctx.job_id, "transform", i)
        ctx.advance(i)
        await amaybe_die(ctx, "transform", i)


pipeline = app.step_job("pipeline")
for _name in STEP_SETS[os.environ.get(STEPS_ENV) or "v1"]:
    pipeline.step(_name)(transform if _name == "transform" else simple_step(_name))


@app.job("quick")
async def quick(job: pgqueue.JobContext) -> None:
    """Starts, sleeps payload["sleep"] seconds, ends."""
    await arecord(job.job_id, "quick:start")
    await asyncio.sleep(float(job.json().get("sleep", 0)))
    await arecord(job.job_id, "quick:end")
