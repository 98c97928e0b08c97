# Generated from pgqueue/client/reclaim_async.py (python -m pgqueue.generate): edit that file.
"""Reclaim: return expired leases to pending (or dead, or quarantined), counting a crash
against the step in progress. Idempotent and safe to run from many places at once."""
from __future__ import annotations

from dataclasses import dataclass

from pgqueue.db import run

BATCH = 1000


@dataclass(frozen=True)
class Reclaimed:
    """One expired lease reclaimed: the job's new state (pending, dead or quarantined), and
    for a crash the step it was in and that step's crash count."""

    job_id: int
    stream: str
    kind: str | None
    state: str
    step: str | None
    crashes: int | None


def reclaim_expired_jobs(conn: run.Conn, *, batch: int = BATCH,
                         due_only: bool = False) -> list[Reclaimed]:
    """Reclaim every expired lease, in batches until one comes back short; the jobs.

    `due_only`: find them through the rows of pgqueue.lease_expiry that came due, which cost
    the same however long the vacuum horizon has been held (what a maintenance runner does on
    all but its first pass and one every few minutes); otherwise read every leased job, which
    also finds a lease no such row names (granted by the previous release during an upgrade)."""
    query = "reclaim_due" if due_only else "reclaim_expired"
    found: list[Reclaimed] = []
    while True:
        rows = run.fetch(conn, query, {"limit": batch})
        found += [Reclaimed(**r) for r in rows]
        if len(rows) < batch:
            return found


def reclaim_expired(conn: run.Conn, *, batch: int = BATCH) -> int:
    """Reclaim every expired lease, in batches until one comes back short; returns the count."""
    return len(reclaim_expired_jobs(conn, batch=batch))
