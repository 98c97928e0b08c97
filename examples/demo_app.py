"""A small pgqueue App: a plain job and a three-step job with a cursor.

    pgqueue worker --app examples.demo_app:app
    python -c "import pgqueue, examples.demo_app as d; d.app.enqueue(pgqueue.Queue(DSN), 'resize', b'{}')"
"""
from __future__ import annotations

import logging

import pgqueue

log = logging.getLogger("examples.demo_app")
app = pgqueue.App()


@app.job("hello", max_attempts=3)
def hello(job: pgqueue.JobContext) -> None:
    log.info("hello from job %s: %r", job.job_id, job.payload[:80])


resize = app.step_job("resize", schema_version=1)


@resize.step("download")
def download(ctx: pgqueue.StepContext) -> None:
    log.info("job %s: download", ctx.job_id)


@resize.step("transform")
def transform(ctx: pgqueue.StepContext) -> None:
    start = int(ctx.cursor) if ctx.cursor else 0  # the last fully processed item
    for item in range(start, 100):
        ctx.advance(item + 1)


@resize.step("upload")
def upload(ctx: pgqueue.StepContext) -> None:
    log.info("job %s: upload", ctx.job_id)
