"""The JSON form of pgqueue's records (jobs, checkpoints, ops, histories, schedules, kind
settings): one
shape for the CLI's --json and the dashboard's HTTP API, so the two never disagree.

Bytes (payloads, cursors, dedup keys) are UTF-8 text when they decode, else base64, with
their encoding beside them; a preview says how big the whole payload is.
"""
from __future__ import annotations

import base64
import datetime as dt
from typing import Any

from pgqueue.cron import Schedule
from pgqueue.models import Checkpoint, JobHistory, JobInfo, JobPreview, KindConfig, Op, OpPreview


def encode_bytes(value: bytes | None, *, prefix: bool = False) -> tuple[str | None, str | None]:
    """(text, encoding): UTF-8 text when the bytes decode, else base64; (None, None) for None.

    :param prefix: the bytes are the start of a longer value (a preview): a UTF-8 character
        cut in two at the end is dropped rather than making the whole preview base64.
    """
    if value is None:
        return None, None
    try:
        return value.decode("utf-8"), "utf-8"
    except UnicodeDecodeError as exc:
        if prefix and exc.end == len(value) and exc.reason == "unexpected end of data":
            try:
                return value[: exc.start].decode("utf-8"), "utf-8"
            except UnicodeDecodeError:
                pass
        return base64.b64encode(value).decode("ascii"), "base64"


def iso(value: dt.datetime | None) -> str | None:
    """An ISO 8601 timestamp, or None."""
    return None if value is None else value.isoformat()


def checkpoint_json(cp: Checkpoint) -> dict[str, Any]:
    """A checkpoint as JSON (cursor as text or base64, like payloads)."""
    cursor, cursor_encoding = encode_bytes(cp.cursor)
    return {
        "last_completed_step": cp.last_completed_step,
        "cursor_step": cp.cursor_step,
        "cursor": cursor,
        "cursor_encoding": cursor_encoding,
        "updated_at_ms": cp.updated_at_ms,
        "schema_version": cp.schema_version,
        "step_set_hash": cp.step_set_hash,
        "crashes_by_step": dict(cp.crashes_by_step),
    }


#: A job as commands get it: whole (`Queue.job`) or with its payload cut (`Queue.job_preview`).
AnyJob = JobInfo | JobPreview


def unwrap(job: AnyJob) -> tuple[JobInfo, int, bool]:
    """(snapshot, whole payload size, whether snapshot.payload is only its start)."""
    if isinstance(job, JobPreview):
        return job.job, job.payload_size, job.payload_truncated
    return job, len(job.payload), False


def job_json(job: AnyJob) -> dict[str, Any]:
    """Every field of a job snapshot as JSON; bytes say how they are encoded. payload_size is
    the whole payload's, and payload_truncated says the payload is only its start."""
    info, size, truncated = unwrap(job)
    payload, payload_encoding = encode_bytes(info.payload, prefix=truncated)
    dedup_key, dedup_key_encoding = encode_bytes(info.dedup_key)
    return {
        "job_id": info.job_id,
        "stream": info.stream,
        "kind": info.kind,
        "state": info.state,
        "state_reason": info.state_reason,
        "state_detail": info.state_detail,
        "priority": info.priority,
        "attempts": info.attempts,
        "max_attempts": info.max_attempts,
        "payload": payload,
        "payload_encoding": payload_encoding,
        "payload_size": size,
        "payload_truncated": truncated,
        "dedup_key": dedup_key,
        "dedup_key_encoding": dedup_key_encoding,
        "enqueued_at": iso(info.enqueued_at),
        "not_before": iso(info.not_before),
        "last_error": info.last_error,
        "error_summary": info.error_summary,
        "timeout": info.timeout,
        "lease_id": info.lease_id,
        "lease_expires_at": iso(info.lease_expires_at),
        "worker_node": info.worker_node,
        "worker_instance": info.worker_instance,
        "died_at": iso(info.died_at),
        "concurrency_key": info.concurrency_key,
        "cancel_requested_at": iso(info.cancel_requested_at),
        "checkpoint": checkpoint_json(info.checkpoint),
    }


def op_json(op: Op | OpPreview) -> dict[str, Any]:
    """One op as JSON (its body is already JSON). A preview's body holds only the start of
    its payload (base64, as in the whole body): payload_size is the whole payload's, and
    payload_truncated says so."""
    extra: dict[str, Any] = {}
    if isinstance(op, OpPreview):
        extra = {"payload_size": op.payload_size, "payload_truncated": op.payload_truncated}
        op = op.op
    return {"seq": op.seq, "stream": op.stream, "op": op.op, "job_id": op.job_id,
            "lease_id": op.lease_id, "xid": op.xid, "at": op.at.isoformat(), "body": op.body,
            **extra}


def history_json(history: JobHistory) -> dict[str, Any]:
    """A job's history as JSON: its state now (acked or cancelled once gone), when it finished,
    its lease, a cancel requested while it ran and what became of it, whether its first ops
    were pruned, and its ops oldest first."""
    return {"job_id": history.job_id, "state": history.state,
            "finished_at": None if history.finished_at is None else history.finished_at.isoformat(),
            "cancel_requested_at": iso(history.cancel_requested_at),
            "cancel": history.cancel,
            "lease_id": history.lease_id, "ops_pruned": history.ops_pruned,
            "payloads_cut": history.payloads_cut, "ops": [op_json(o) for o in history.ops]}


def schedule_json(s: Schedule) -> dict[str, Any]:
    payload, encoding = encode_bytes(s.payload)
    return {
        "stream": s.stream, "name": s.name, "cron": s.cron, "timezone": s.timezone,
        "payload": payload, "payload_encoding": encoding, "kind": s.kind,
        "priority": s.priority, "max_attempts": s.max_attempts, "catch_up": s.catch_up,
        "misfire_grace": s.misfire_grace, "paused": s.paused,
        "next_run_at": iso(s.next_run_at), "last_fired_at": iso(s.last_fired_at),
        "updated_at": iso(s.updated_at),
    }


def kind_json(k: KindConfig) -> dict[str, Any]:
    return {"stream": k.stream, "kind": k.kind, "quarantine_after": k.quarantine_after,
            "max_concurrency": k.max_concurrency,
            "rate_limit": None if k.rate_limit is None
            else {"count": k.rate_limit[0], "seconds": k.rate_limit[1]},
            "max_per_key": k.max_per_key}
