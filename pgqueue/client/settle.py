# DO NOT EDIT: generated from pgqueue/client/settle_async.py by tools/generate.py; edit that file.
"""Settle a lease: ack (done, deleted), nack (one failure: retry with backoff, or dead), or
end it as cancelled (its handler stopped on an operator's cancel).

Both are fenced by the lease id: a stale lease changes nothing and the caller learns it.
"""
from __future__ import annotations

from collections.abc import Sequence

from pgqueue import failures, validate
from pgqueue.db import run
from pgqueue.models import Lease, by_stream


def ack_many(conn: run.Conn, leases: Sequence[Lease], *,
             retried: bool = False) -> set[int]:
    """Ack leases in one statement; returns the job ids acked (the others were lost). A call
    `retried` after a lost reply also counts the acks its first attempt committed."""
    if not leases:
        return set()
    for held in leases:
        if not isinstance(held, Lease):
            raise TypeError(f"lease must be a pgqueue.Lease, got {type(held).__name__}")
    params = [{"stream": stream, "job_ids": [held.job_id for held in group],
               "lease_ids": [held.lease_id for held in group]}
              for stream, group in by_stream(leases).items()]
    acked = {r["id"] for rows in run.fetch_each(conn, "ack_jobs", params) for r in rows}
    if retried and len(acked) < len(leases):
        acked |= {r["job_id"] for rows in run.fetch_each(conn, "acked_before", params)
                  for r in rows}
    return acked


def nack(conn: run.Conn, held: Lease, error: str | BaseException | None,
         retry_in: float | None, max_attempts: int | None = None, *,
         retried: bool = False) -> str | None:
    """Record one failure (max_attempts, when given, replaces the job's limit first): an
    exception as its summary and the handler's traceback (failures.py), a str as it is (the
    database takes its summary from it). Returns the state the job went to: "pending" or
    "scheduled" (it will be retried), "dead", or "cancelled" (a cancel was requested: never
    retried); None: the lease was no longer current (nothing changed)."""
    if not isinstance(held, Lease):
        raise TypeError(f"lease must be a pgqueue.Lease, got {type(held).__name__}")
    summary: str | None = None
    if isinstance(error, BaseException):
        summary, error = failures.summary(error), failures.handler_traceback(error)
    elif error is not None and not isinstance(error, str):
        raise TypeError(f"error must be a str or an exception, got {type(error).__name__}")
    # what a failure said must not stop its nack
    error, summary = validate.error_text(error), validate.error_text(summary)
    retry_ms = None if retry_in is None else validate.to_ms(retry_in, "retry_in")
    row = run.fetch_one(conn, "nack_job", {
        "stream": held.stream, "job_id": held.job_id, "lease_id": held.lease_id,
        "error": error, "summary": summary,
        "retry_in_ms": retry_ms,
        "max_attempts": None if max_attempts is None
        else validate.integer(max_attempts, "max_attempts", low=0),
    })
    if row is None and retried:  # its first attempt may have committed before the reply was lost
        row = run.fetch_one(conn, "nacked_before", {
            "stream": held.stream, "job_id": held.job_id, "lease_id": held.lease_id})
    return None if row is None else str(row["state"])


def end_cancelled(conn: run.Conn, held: Lease) -> bool:
    """The handler stopped on a cancel: the job ends as cancelled. False: the lease was lost."""
    return bool(run.scalar(conn, "end_cancelled", {
        "stream": held.stream, "job_id": held.job_id, "lease_id": held.lease_id}))
