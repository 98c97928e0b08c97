"""Enqueue: turn NewJobs into one call of pgqueue.enqueue (one round trip per batch), or of
pgqueue.enqueue_one for a single job.

Delays travel as milliseconds and are added to the server's clock, so producers with skewed
clocks still delay correctly; explicit not_before values are absolute.
"""
from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from pgqueue import queries, validate
from pgqueue.errors import ConnectionFailed
from pgqueue.models import NewJob

#: The payload limit of a stream that sets none (stream_config.max_payload_bytes).
DEFAULT_MAX_PAYLOAD_BYTES = 16 * 1024 * 1024
#: The most any stream may allow: every path (replay, both replica paths, seeding, verify, the
#: CLI) is tested to carry a job of this size.
MAX_PAYLOAD_BYTES = 64 * 1024 * 1024


def _columns(jobs: Sequence[NewJob]) -> dict[str, list[Any]]:
    """The jobs as one list per column of pgqueue.enqueue, each value checked. An error names
    the job (jobs[i].field) when there are several; the names are built only then (building
    them per job was a third of this function's time at 1,000 jobs)."""
    payloads: list[bytes] = []
    kinds: list[str | None] = []
    priorities: list[int] = []
    delays_ms: list[int | None] = []
    not_befores: list[Any] = []
    dedup_keys: list[bytes | None] = []
    max_attempts: list[int | None] = []
    schema_versions: list[int | None] = []
    for i, job in enumerate(jobs):
        if not isinstance(job, NewJob):
            raise TypeError(f"jobs[{i}] must be a pgqueue.NewJob, got {type(job).__name__}")
        try:
            if job.delay is not None and job.not_before is not None:
                raise ValueError("delay and not_before: give one or the other, not both")
            data = validate.payload(job.payload, "payload")
            if len(data) > MAX_PAYLOAD_BYTES:  # the stream's own limit is checked by the server
                raise ValueError(f"payload is {len(data)} bytes, over the most any stream "
                                 f"allows ({MAX_PAYLOAD_BYTES} bytes, 64 MiB)")
            payloads.append(data)
            kinds.append(validate.kind(job.kind, "kind"))
            priorities.append(validate.integer(job.priority, "priority", low=0, high=255))
            delays_ms.append(None if job.delay is None else validate.to_ms(job.delay, "delay"))
            not_befores.append(None if job.not_before is None
                               else validate.aware_datetime(job.not_before, "not_before"))
            dedup_keys.append(validate.dedup_key(job.dedup_key, "dedup_key"))
            max_attempts.append(
                None if job.max_attempts is None
                else validate.integer(job.max_attempts, "max_attempts", low=0, high=2**31 - 1))
            schema_versions.append(
                None if job.schema_version is None
                else validate.integer(job.schema_version, "schema_version", low=0,
                                      high=2**31 - 1))
        except (TypeError, ValueError) as exc:
            if len(jobs) == 1 or type(exc) not in (TypeError, ValueError):
                raise
            where = f"jobs[{i}]."
            message = str(exc).replace("delay and not_before", f"delay and {where}not_before")
            raise type(exc)(where + message) from None
    return {"payloads": payloads, "kinds": kinds, "priorities": priorities,
            "delays_ms": delays_ms, "not_befores": not_befores, "dedup_keys": dedup_keys,
            "max_attempts": max_attempts, "schema_versions": schema_versions}


def enqueue_many(conn: queries.Conn, stream: str, jobs: Sequence[NewJob], *,
                 request: uuid.UUID | None = None, resent: bool = False) -> list[int]:
    """Insert jobs into `stream` in the caller's transaction (or autocommit); ids in order.
    A call `resent` with the same `request` token returns its first attempt's ids."""
    validate.stream(stream)
    if isinstance(jobs, NewJob | str | bytes):
        raise TypeError("jobs must be a sequence of pgqueue.NewJob")
    jobs = list(jobs)
    if not jobs:
        return []
    params: dict[str, Any] = {"stream": stream, **_columns(jobs), "request": request,
                              "resent": resent}
    for optional in ("kinds", "delays_ms", "not_befores", "dedup_keys", "schema_versions"):
        if all(value is None for value in params[optional]):
            params[optional] = None  # NULL for every job: nothing to encode and send
    ids = [row[0] for row in queries.fetch_tuples(conn, "enqueue_jobs", params)]
    if None in ids:
        raise _lost_holder(request)
    return ids


def enqueue_one(conn: queries.Conn, stream: str, job: NewJob, *,
                request: uuid.UUID | None = None, resent: bool = False) -> int:
    """Insert one job (the same checks and semantics as enqueue_many, one scalar call)."""
    validate.stream(stream)
    cols = _columns([job])
    found = queries.scalar(conn, "enqueue_job", {
        "stream": stream, "payload": cols["payloads"][0], "kind": cols["kinds"][0],
        "priority": cols["priorities"][0], "delay_ms": cols["delays_ms"][0],
        "not_before": cols["not_befores"][0], "dedup_key": cols["dedup_keys"][0],
        "max_attempts": cols["max_attempts"][0], "schema_version": cols["schema_versions"][0],
        "request": request, "resent": resent,
    })
    if found is None:
        raise _lost_holder(request)
    return int(found)


def _lost_holder(request: uuid.UUID | None) -> ConnectionFailed:
    """A re-sent call whose first attempt deduplicated a job onto a holder that has finished
    since: which id it returned is no longer known."""
    return ConnectionFailed(
        f"enqueue request {request} was re-sent after a lost reply; its first attempt committed, "
        "but a job it matched by dedup key has finished since, so its id is unknown",
        retryable=False)
