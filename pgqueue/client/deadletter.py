# DO NOT EDIT: generated from pgqueue/client/deadletter_async.py by tools/generate.py; edit that file.
"""Dead letters: jobs that used up their attempts, kept until an operator acts."""
from __future__ import annotations

from pgqueue import validate
from pgqueue.db import run
from pgqueue.models import JobInfo


def dead_letters(conn: run.Conn, stream: str, limit: int) -> list[JobInfo]:
    """The newest dead letters of `stream`."""
    validate.stream(stream)
    validate.integer(limit, "limit", low=1, high=1_000_000)
    rows = run.fetch(conn, "dead_letters", {"stream": stream, "limit": limit})
    return [JobInfo.from_row(r) for r in rows]


def requeue(conn: run.Conn, job_id: int) -> None:
    """Return a dead letter to pending with attempts reset (JobNotFound, DedupConflict)."""
    validate.integer(job_id, "job_id", low=1, high=validate.MAX_BIGINT)
    stream = run.scalar(conn, "dead_letter_stream", {"job_id": job_id})
    run.fetch(conn, "requeue_dead_letter", {"job_id": job_id, "stream": stream or ""})
