"""Observe the queue: one job, lists of jobs, counts by stream and state (read-only).

(Named observe, not inspect, so it never shadows the standard library's module.)
"""
from __future__ import annotations

from pgqueue import queries, validate
from pgqueue.models import JOB_STATES, JobInfo, StreamStats


def job(conn: queries.Conn, job_id: int) -> JobInfo | None:
    """A job in any set, or None when it is gone (acked) or never existed."""
    validate.integer(job_id, "job_id")
    if not -validate.MAX_BIGINT <= job_id <= validate.MAX_BIGINT:
        return None  # no job id can be outside bigint: it never existed
    row = queries.fetch_one(conn, "job_by_id", {"job_id": job_id})
    return None if row is None else JobInfo.from_row(row)


def jobs(conn: queries.Conn, *, stream: str | None = None, state: str | None = None,
         limit: int = 100) -> list[JobInfo]:
    """Jobs, newest first, optionally of one stream and state."""
    if stream is not None:
        validate.stream(stream)
    if state is not None and state not in JOB_STATES:
        raise ValueError(f"state must be one of {', '.join(JOB_STATES)}, got {state!r}")
    validate.integer(limit, "limit", low=1, high=1_000_000)
    rows = queries.fetch(conn, "jobs_list", {"stream": stream, "state": state, "limit": limit})
    return [JobInfo.from_row(r) for r in rows]


def stats(conn: queries.Conn) -> list[StreamStats]:
    """Job counts by stream and state."""
    return [
        StreamStats(stream=r["stream"], state=r["state"], count=r["count"],
                    oldest_age_seconds=r["oldest_age_seconds"])
        for r in queries.fetch(conn, "stats")
    ]
