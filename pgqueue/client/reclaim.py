# DO NOT EDIT: generated from pgqueue/client/reclaim_async.py by tools/generate.py; edit that file.
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
                         due_only: bool = False,
                         by_stream: bool | None = None) -> list[Reclaimed]:
    """Reclaim every expired lease, in batches until one comes back short; the jobs.

    `due_only`: find them through the rows of pgqueue.lease_expiry that came due, which cost
    the same however long the vacuum horizon has been held (what a maintenance runner does on
    all but its first pass and one every few minutes); otherwise read every leased job, which
    also finds a lease no such row names (granted by the previous release during an upgrade).

    `by_stream` (a Citus cluster, where a lock is taken on one node only): the streams with
    expired leases first, then a call per stream, the streams' calls of a batch in one round
    trip, each run on the node holding its stream; None: when the database is a Citus cluster's)."""
    if by_stream is None:
        by_stream = run.on_citus(conn)
    if by_stream:
        return _reclaim_by_stream(conn, batch=batch, due_only=due_only)
    query = "reclaim_due" if due_only else "reclaim_expired"
    found: list[Reclaimed] = []
    while True:
        rows = run.fetch(conn, query, {"limit": batch})
        found += [Reclaimed(**r) for r in rows]
        if len(rows) < batch:
            return found


def _reclaim_by_stream(conn: run.Conn, *, batch: int,
                       due_only: bool) -> list[Reclaimed]:
    query = "reclaim_due_of" if due_only else "reclaim_expired_of"
    streams = [str(r["stream"]) for r in run.fetch(conn, "streams_to_reclaim",
                                                          {"due_only": due_only})]
    found: list[Reclaimed] = []
    while streams:
        results = run.fetch_each(conn, query, [{"limit": batch, "stream": s}
                                               for s in streams])
        for rows in results:
            found += [Reclaimed(**r) for r in rows]
        streams = [s for s, rows in zip(streams, results, strict=True) if len(rows) >= batch]
    return found


def reclaim_expired(conn: run.Conn, *, batch: int = BATCH) -> int:
    """Reclaim every expired lease, in batches until one comes back short; returns the count."""
    return len(reclaim_expired_jobs(conn, batch=batch))
