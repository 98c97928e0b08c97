"""Enqueue: turn NewJobs into one call of pgqueue.enqueue (one round trip per batch), or of
pgqueue.enqueue_one for a single job.

Delays travel as milliseconds and are added to the server's clock, so producers with skewed
clocks still delay correctly; explicit not_before values are absolute.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pgqueue import queries, validate
from pgqueue.models import NewJob


def _columns(jobs: Sequence[NewJob]) -> dict[str, list[Any]]:
    cols: dict[str, list[Any]] = {
        "payloads": [], "kinds": [], "priorities": [], "delays_ms": [],
        "not_befores": [], "dedup_keys": [], "max_attempts": [], "schema_versions": [],
    }
    for i, job in enumerate(jobs):
        where = f"jobs[{i}]." if len(jobs) > 1 else ""
        if not isinstance(job, NewJob):
            raise TypeError(f"jobs[{i}] must be a pgqueue.NewJob, got {type(job).__name__}")
        if job.delay is not None and job.not_before is not None:
            raise ValueError(f"{where}delay and {where}not_before: give one or the other, not both")
        cols["payloads"].append(validate.payload(job.payload, f"{where}payload"))
        cols["kinds"].append(validate.kind(job.kind, f"{where}kind"))
        cols["priorities"].append(validate.integer(job.priority, f"{where}priority", low=0, high=255))
        cols["delays_ms"].append(
            None if job.delay is None else validate.to_ms(job.delay, f"{where}delay")
        )
        cols["not_befores"].append(
            None if job.not_before is None
            else validate.aware_datetime(job.not_before, f"{where}not_before")
        )
        cols["dedup_keys"].append(validate.dedup_key(job.dedup_key, f"{where}dedup_key"))
        cols["max_attempts"].append(
            validate.integer(job.max_attempts, f"{where}max_attempts", low=0, high=2**31 - 1)
        )
        cols["schema_versions"].append(
            None if job.schema_version is None
            else validate.integer(job.schema_version, f"{where}schema_version", low=0,
                                  high=2**31 - 1)
        )
    return cols


def enqueue_many(conn: queries.Conn, stream: str, jobs: Sequence[NewJob]) -> list[int]:
    """Insert jobs into `stream` in the caller's transaction (or autocommit); ids in order."""
    validate.stream(stream)
    if isinstance(jobs, NewJob | str | bytes):
        raise TypeError("jobs must be a sequence of pgqueue.NewJob")
    jobs = list(jobs)
    if not jobs:
        return []
    params: dict[str, Any] = {"stream": stream, **_columns(jobs)}
    return [row["id"] for row in queries.fetch(conn, "enqueue_jobs", params)]


def enqueue_one(conn: queries.Conn, stream: str, job: NewJob) -> int:
    """Insert one job (the same checks and semantics as enqueue_many, one scalar call)."""
    validate.stream(stream)
    cols = _columns([job])
    return int(queries.scalar(conn, "enqueue_job", {
        "stream": stream, "payload": cols["payloads"][0], "kind": cols["kinds"][0],
        "priority": cols["priorities"][0], "delay_ms": cols["delays_ms"][0],
        "not_before": cols["not_befores"][0], "dedup_key": cols["dedup_keys"][0],
        "max_attempts": cols["max_attempts"][0], "schema_version": cols["schema_versions"][0],
    }))
