"""Operator transitions on one job: release, rewind, restart, skip a step, accept a new step
set, cancel. Each is a SQL function that refuses a job in a state where it makes no sense
(InvalidState, JobNotFound, DedupConflict) and logs its op."""
from __future__ import annotations

from pgqueue import validate
from pgqueue.aio import run


def _job_id(job_id: int) -> int:
    return validate.integer(job_id, "job_id", low=1, high=validate.MAX_BIGINT)


async def release(conn: run.AsyncConn, job_id: int, *, reset_crashes: bool = False) -> None:
    """A quarantined or undecodable job runs again."""
    await run.fetch(conn, "release_job", {"job_id": _job_id(job_id), "reset_crashes": reset_crashes})


async def rewind(conn: run.AsyncConn, job_id: int, to_step: str) -> None:
    """The job's next run starts at `to_step`."""
    if not isinstance(to_step, str) or not to_step:
        raise ValueError("to_step must be a step name")
    validate.step_name(to_step, "to_step")
    await run.fetch(conn, "rewind_job", {"job_id": _job_id(job_id), "to_step": to_step})


async def restart(conn: run.AsyncConn, job_id: int) -> None:
    """Drop the checkpoint: the job runs from step one."""
    await run.fetch(conn, "restart_job", {"job_id": _job_id(job_id)})


async def skip_step(conn: run.AsyncConn, job_id: int) -> str:
    """Count the step in progress as done without running it; returns the skipped step."""
    row = await run.fetch_one(conn, "skip_step_job", {"job_id": _job_id(job_id)})
    assert row is not None
    return str(row["last_completed_step"])


async def accept_step_set(conn: run.AsyncConn, job_id: int) -> None:
    """Accept the new step list of a job parked as step_set_changed."""
    await run.fetch(conn, "accept_step_set_job", {"job_id": _job_id(job_id)})


async def cancel(conn: run.AsyncConn, job_id: int) -> None:
    """Remove a job that is not leased, live or dead, for good."""
    await run.fetch(conn, "cancel_job", {"job_id": _job_id(job_id)})


async def configure_stream(conn: run.AsyncConn, stream: str, *, retry_base: float | None = None,
                           retry_cap: float | None = None, quarantine_after: int | None = None,
                           max_payload_bytes: int | None = None) -> None:
    """Set a stream's retry backoff (seconds), crash quarantine threshold and payload limit
    (bytes, 1 to 64 MiB; 16 MiB unless set). None leaves a setting as it is."""
    validate.stream(stream)
    if max_payload_bytes is not None:
        from pgqueue.enqueue import MAX_PAYLOAD_BYTES

        validate.integer(max_payload_bytes, "max_payload_bytes", low=1, high=MAX_PAYLOAD_BYTES)
    await run.fetch(conn, "configure_stream", {
        "max_payload_bytes": max_payload_bytes,
        "stream": stream,
        "retry_base_ms": None if retry_base is None else validate.to_ms(retry_base, "retry_base"),
        "retry_cap_ms": None if retry_cap is None else validate.to_ms(retry_cap, "retry_cap"),
        "quarantine_after": None if quarantine_after is None
        else validate.integer(quarantine_after, "quarantine_after", low=1),
    })
