"""The App of the hoarding test (tests/acceptance/test_lanes.py), as a new team writes one: an
async kind, and a step job of plain `def` steps that take a second each."""
from __future__ import annotations

import asyncio
import time

import pgqueue

app = pgqueue.App()


@app.job("notify")
async def notify(job: pgqueue.JobContext) -> None:
    await asyncio.sleep(0.01)


report = app.step_job("report")


@report.step("gather")
def gather(ctx: pgqueue.StepContext) -> None:
    time.sleep(1.0)


@report.step("render")
def render(ctx: pgqueue.StepContext) -> None:
    time.sleep(1.0)
