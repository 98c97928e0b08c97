"""The App of the recovery test (tests/acceptance/test_recovery.py): a plain `def` kind and an
`async def` kind, each taking a fifth of a second and recording every run (job id and time)
in the file $RECOVERY_RUNS, so the test can tell a job that ran twice."""
from __future__ import annotations

import asyncio
import os
import time

import pgqueue

app = pgqueue.App()
RUN_SECONDS = 0.2


def _record(job: pgqueue.JobContext) -> None:
    with open(os.environ["RECOVERY_RUNS"], "a") as runs:  # one short append per line
        runs.write(f"{job.job_id} {time.time():.3f}\n")


@app.job("plain")
def plain(job: pgqueue.JobContext) -> None:
    time.sleep(RUN_SECONDS)
    _record(job)


@app.job("coro")
async def coro(job: pgqueue.JobContext) -> None:
    await asyncio.sleep(RUN_SECONDS)
    _record(job)
