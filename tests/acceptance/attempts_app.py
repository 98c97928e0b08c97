"""A worker App whose one handler always fails and declares its own max_attempts, for the
test that a job's own max_attempts (given at enqueue) wins over the handler's."""
from __future__ import annotations

import pgqueue

HANDLER_MAX_ATTEMPTS = 5

app = pgqueue.App()


@app.job("flaky", max_attempts=HANDLER_MAX_ATTEMPTS)
def flaky(job: pgqueue.JobContext) -> None:
    raise RuntimeError(f"job {job.job_id} fails, as it always does")
