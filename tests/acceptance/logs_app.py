"""The App of the JSON-logs test (tests/acceptance/test_worker_logs.py): a job that fails with
a message of its own (never its payload), and one that succeeds."""
from __future__ import annotations

import pgqueue

app = pgqueue.App()


@app.job("boom", max_attempts=2)
def boom(job: pgqueue.JobContext) -> None:
    raise ValueError("the upstream refused the request")


@app.job("ok")
def ok(job: pgqueue.JobContext) -> None:
    pass
