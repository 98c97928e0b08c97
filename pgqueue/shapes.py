"""Row shapes: the columns of each kind of row the SQL returns, written once, and the named
queries that return each.

A model reads its shape's columns by name (`JobInfo.from_row(row)` takes `row["id"]`); the
hot paths that fetch tuples for speed get them in the shape's order whatever the query's, by
the names in the result's description (`run.fetch_shaped`), so no row is ever unpacked by
the position a query happens to put a column at. tests/integration/db/test_shapes.py
describes every query named below on the current schema and fails when its columns and its
shape part ways, and checks that each model reads exactly its shape.
"""
from __future__ import annotations

#: A step job's checkpoint, as the job table holds it (Checkpoint.from_row).
CHECKPOINT = ("last_completed_step", "cursor_step", "cursor", "checkpoint_updated_at",
              "schema_version", "step_set_hash", "crashes_by_step")

#: A job in any set, as the pgqueue.jobs view has it (JobInfo.from_row).
JOB = ("id", "stream", "kind", "state", "payload", "priority", "attempts", "max_attempts",
       "not_before", "enqueued_at", "dedup_key", "last_error", "state_reason", "state_detail",
       "lease_id", "worker_node", "worker_instance", "lease_expires_at", "died_at",
       *CHECKPOINT, "concurrency_key", "cancel_requested_at", "error_summary", "timeout_ms")

#: A job whose payload is cut to its first bytes, and the whole payload's size (JobPreview;
#: the job_preview fragment of observe.sql).
JOB_PREVIEW = (*JOB, "payload_size")

#: A job just leased, as pgqueue.lease returns it (Lease.from_lease_row).
LEASE = ("id", "lease_id", "stream", "kind", "payload", "priority", "attempts", "max_attempts",
         "enqueued_at", "lease_expires_at", "lease_started", *CHECKPOINT, "not_before",
         "trace_context", "rate_at_start", "timeout_ms")

#: Jobs of one stream in one state (StreamStats).
STREAM_STATS = ("stream", "state", "count", "oldest_age_seconds")

#: One op of the op log (Op).
OP = ("seq", "stream", "op", "job_id", "lease_id", "body", "xid", "at")

#: A registered worker and the leases it holds (Queue.workers: the CLI and dashboard's rows).
WORKER = ("id", "node", "host", "pid", "streams", "concurrency", "started_at", "heartbeat_at",
          "heartbeat_age_seconds", "leases")

#: A kind's settings in one stream (KindConfig.from_row).
KIND_CONFIG = ("stream", "kind", "quarantine_after", "max_concurrency", "rate_count", "rate_ms",
               "max_per_key")

#: A cron schedule (Schedule.from_row).
SCHEDULE = ("stream", "name", "cron", "timezone", "payload", "kind", "priority", "max_attempts",
            "catch_up", "misfire_grace_ms", "paused", "next_run_at", "last_fired_at",
            "updated_at")

#: The new ids of an enqueue (a batch's in its order).
ENQUEUED = ("id",)

#: Each named query that returns rows of a shape, and which (some add columns of their own
#: before the shape's: jobs_page_of_kind's window).
RETURNS: dict[str, tuple[str, ...]] = {
    "job_by_id": JOB,
    "jobs_list": JOB,
    "dead_letters": JOB,
    "job_preview_by_id": JOB_PREVIEW,
    "jobs_preview_list": JOB_PREVIEW,
    "jobs_page": JOB_PREVIEW,
    "jobs_page_of_kind": ("window_floor", "window_size", *JOB_PREVIEW),
    "dead_letters_preview": JOB_PREVIEW,
    "lease_jobs": LEASE,
    "stats": STREAM_STATS,
    "oplog_tail": OP,
    "list_workers": WORKER,
    "kinds_list": KIND_CONFIG,
    "schedule_get": SCHEDULE,
    "schedules_list": SCHEDULE,
    "enqueue_jobs": ENQUEUED,
    "enqueue_job": ENQUEUED,
}
