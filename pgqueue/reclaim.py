# Generated from pgqueue/aio/reclaim.py (python -m pgqueue.aio.generate): edit that file.
"""Reclaim: return expired leases to pending (or dead, or quarantined), counting a crash
against the step in progress. Idempotent and safe to run from many places at once."""
from __future__ import annotations

from pgqueue import run

BATCH = 1000


def reclaim_expired(conn: run.Conn, *, batch: int = BATCH) -> int:
    """Reclaim every expired lease, in batches until one comes back short; returns the count."""
    total = 0
    while True:
        n = int(run.scalar(conn, "reclaim_expired", {"limit": batch}) or 0)
        total += n
        if n < batch:
            return total
