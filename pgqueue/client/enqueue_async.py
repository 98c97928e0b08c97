"""Enqueue: turn NewJobs into one call of pgqueue.enqueue (one round trip per batch), or of
pgqueue.enqueue_one for a single job.

Delays travel as milliseconds and are added to the server's clock, so producers with skewed
clocks still delay correctly; explicit not_before values are absolute.
"""
from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from psycopg.types.json import Jsonb

from pgqueue import shapes, validate
from pgqueue.client import newjobs
from pgqueue.client.newjobs import DEFAULT_MAX_PAYLOAD_BYTES, MAX_PAYLOAD_BYTES
from pgqueue.db import run_async as run
from pgqueue.models import NewJob

__all__ = ["DEFAULT_MAX_PAYLOAD_BYTES", "MAX_PAYLOAD_BYTES", "enqueue_many", "enqueue_one"]

async def enqueue_many(conn: run.AsyncConn, stream: str, jobs: Sequence[NewJob], *,
                       request: uuid.UUID | None = None, resent: bool = False,
                       trace: dict[str, str] | None = None,
                       traces: Sequence[dict[str, str] | None] | None = None) -> list[int]:
    """Insert jobs into `stream` in the caller's transaction (or autocommit); ids in order.
    A call `resent` with the same `request` token returns its first attempt's ids. `trace`
    is the trace context every job carries (tracing.py), or `traces` one per job."""
    validate.stream(stream)
    if isinstance(jobs, NewJob | str | bytes):
        raise TypeError("jobs must be a sequence of pgqueue.NewJob")
    jobs = list(jobs)
    if not jobs:
        return []
    if traces is None and trace is not None:
        traces = [trace] * len(jobs)
    params: dict[str, Any] = {
        "stream": stream, **newjobs.columns(jobs), "request": request, "resent": resent,
        "traces": None if traces is None or not any(traces)
        else [None if t is None else Jsonb(t) for t in traces]}
    for optional in ("kinds", "delays_ms", "not_befores", "dedup_keys", "schema_versions",
                     "concurrency_keys", "timeouts_ms"):
        if all(value is None for value in params[optional]):
            params[optional] = None  # NULL for every job: nothing to encode and send
    if await run.on_citus(conn):
        # the stream's node does not notify (pgqueue.notify_ready): the coordinator, where
        # workers listen, is told here, in the same round trip
        ids = [row[0] for row in await run.fetch_shaped_then(
            conn, "enqueue_jobs", params, shapes.ENQUEUED, "notify_jobs_here",
            {"stream": stream})]
    else:
        ids = [row[0] for row in await run.fetch_shaped(conn, "enqueue_jobs", params,
                                                        shapes.ENQUEUED)]
    if None in ids:
        raise newjobs.lost_holder(request)
    return ids


def one_params(stream: str, job: NewJob, *, request: uuid.UUID | None = None,
               resent: bool = False, trace: dict[str, str] | None = None) -> dict[str, Any]:
    """The parameters of the enqueue_job statement for one job (what enqueue_one sends; the
    benchmark renders the same statement with them)."""
    validate.stream(stream)
    cols = newjobs.columns([job])
    return {
        "stream": stream, "payload": cols["payloads"][0], "kind": cols["kinds"][0],
        "priority": cols["priorities"][0], "delay_ms": cols["delays_ms"][0],
        "not_before": cols["not_befores"][0], "dedup_key": cols["dedup_keys"][0],
        "max_attempts": cols["max_attempts"][0], "schema_version": cols["schema_versions"][0],
        "request": request, "resent": resent, "trace": None if trace is None else Jsonb(trace),
        "concurrency_key": cols["concurrency_keys"][0], "timeout_ms": cols["timeouts_ms"][0],
    }


async def enqueue_one(conn: run.AsyncConn, stream: str, job: NewJob, *,
                      request: uuid.UUID | None = None, resent: bool = False,
                      trace: dict[str, str] | None = None) -> int:
    """Insert one job (the same checks and semantics as enqueue_many, one scalar call)."""
    params = one_params(stream, job, request=request, resent=resent, trace=trace)
    if await run.on_citus(conn):  # (as enqueue_many)
        rows = await run.fetch_shaped_then(conn, "enqueue_job", params, shapes.ENQUEUED,
                                           "notify_jobs_here", {"stream": stream})
        found = rows[0][0] if rows else None
    else:
        found = await run.scalar(conn, "enqueue_job", params)
    if found is None:
        raise newjobs.lost_holder(request)
    return int(found)
