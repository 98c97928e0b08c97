# DO NOT EDIT: generated from pgqueue/telemetry/gauges_async.py by tools/generate.py; edit that file.
"""The database's gauges: what a metrics scrape and Queue.gauges report, by a bounded number of
cheap queries (no scan of the job table, whose size grows with the queue).
"""
from __future__ import annotations

from pgqueue import validate
from pgqueue.db import run
from pgqueue.errors import PgQueueError
from pgqueue.models import QueueGauges

#: A worker whose heartbeat is older than this is stale (three heartbeats, as `pgqueue workers`).
STALE_WORKER_SECONDS = 15.0


def gauges(conn: run.Conn, *, stale_after: float = STALE_WORKER_SECONDS) -> QueueGauges:
    """The figures a metrics scrape reports, by a bounded number of cheap queries: the job
    counts the writes keep (folded first where the database is writable), one index probe per
    stream for the oldest ready job, the op log's seq range, and the small tables (schedules,
    workers, replicas)."""
    validate.seconds(stale_after, "stale_after", positive=True)
    citus = run.on_citus(conn)
    try:
        if not citus:  # (on Citus the maintenance pass folds, shard group by shard group)
            run.fetch(conn, "fold_job_counts")
    except PgQueueError:
        pass  # a read-only database: the deltas are summed below all the same
    jobs = {(r["stream"], r["state"]): int(r["count"])
            for r in run.fetch(conn, "gauge_job_counts")}
    schedules = {(r["stream"], bool(r["paused"])): int(r["count"])
                 for r in run.fetch(conn, "gauge_schedules")}
    streams = sorted({s for s, _ in jobs} | {s for s, _ in schedules})
    if citus:  # a probe per stream, each on its node, in one round trip
        found = [rows[0] for rows in run.fetch_each(
            conn, "gauge_oldest_pending_of", [{"stream": s} for s in streams])]
    else:
        found = run.fetch(conn, "gauge_oldest_pending", {"streams": streams})
    oldest = {r["stream"]: r["age_seconds"] for r in found}
    ops = int(run.scalar(conn, "gauge_op_log_count" if citus else "gauge_op_log") or 0)
    row = run.fetch_one(conn, "gauge_workers", {"stale_after": stale_after})
    workers = {"live": int(row["live"]) if row else 0, "stale": int(row["stale"]) if row else 0}
    replicas = run.fetch(conn, "replica_status", {"stale_after": 86400.0, "wait": 0.0})
    return QueueGauges(streams, jobs, oldest, ops, schedules, workers, replicas)
