"""Reclaim: return expired leases to pending (or dead, or quarantined), counting a crash
against the step in progress. Idempotent and safe to run from many places at once."""
from __future__ import annotations

from dataclasses import dataclass

from pgqueue.db import run_async as run

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


async def reclaim_expired_jobs(conn: run.AsyncConn, *, batch: int = BATCH) -> list[Reclaimed]:
    """Reclaim every expired lease, in batches until one comes back short; the jobs."""
    found: list[Reclaimed] = []
    while True:
        rows = await run.fetch(conn, "reclaim_expired", {"limit": batch})
        found += [Reclaimed(**r) for r in rows]
        if len(rows) < batch:
            return found


async def reclaim_expired(conn: run.AsyncConn, *, batch: int = BATCH) -> int:
    """Reclaim every expired lease, in batches until one comes back short; returns the count."""
    return len(await reclaim_expired_jobs(conn, batch=batch))
