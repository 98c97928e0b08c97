"""NewJobs as the columns of pgqueue.enqueue: every value checked, errors naming the job.

Pure (no I/O): shared by the async source of the enqueue stage (pgqueue/client/enqueue_async.py) and
the sync module generated from it.
"""
from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from pgqueue import validate
from pgqueue.errors import ConnectionFailed
from pgqueue.models import NewJob

#: The payload limit of a stream that sets none (stream_config.max_payload_bytes).
DEFAULT_MAX_PAYLOAD_BYTES = 16 * 1024 * 1024
#: The most any stream may allow: every path (replay, both replica paths, seeding, verify, the
#: CLI) is tested to carry a job of this size.
MAX_PAYLOAD_BYTES = 64 * 1024 * 1024


def columns(jobs: Sequence[NewJob]) -> dict[str, list[Any]]:
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
    concurrency_keys: list[str | None] = []
    timeouts_ms: list[int | None] = []
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
            concurrency_keys.append(validate.concurrency_key(job.concurrency_key))
            timeouts_ms.append(None if job.timeout is None
                               else validate.timeout_ms(job.timeout, "timeout"))
        except (TypeError, ValueError) as exc:
            if len(jobs) == 1 or type(exc) not in (TypeError, ValueError):
                raise
            where = f"jobs[{i}]."
            message = str(exc).replace("delay and not_before", f"delay and {where}not_before")
            raise type(exc)(where + message) from None
    return {"payloads": payloads, "kinds": kinds, "priorities": priorities,
            "delays_ms": delays_ms, "not_befores": not_befores, "dedup_keys": dedup_keys,
            "max_attempts": max_attempts, "schema_versions": schema_versions,
            "concurrency_keys": concurrency_keys, "timeouts_ms": timeouts_ms}


def lost_holder(request: uuid.UUID | None) -> ConnectionFailed:
    """A re-sent call whose first attempt deduplicated a job onto a holder that has finished
    since: which id it returned is no longer known."""
    return ConnectionFailed(
        f"enqueue request {request} was re-sent after a lost reply; its first attempt committed, "
        "but a job it matched by dedup key has finished since, so its id is unknown",
        retryable=False)
