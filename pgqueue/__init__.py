"""pgqueue: a Postgres-backed job queue with fenced leases, an op log and step replay.

    import pgqueue
    pgqueue.migrate(dsn)
    with pgqueue.Queue(dsn, stream="default") as q:
        q.enqueue({"to": "a@example.com"}, kind="send_email")
        for lease in q.lease(limit=10):
            ...
            q.ack(lease)
"""
from __future__ import annotations

from pgqueue.client.deploy import Parked
from pgqueue.client.oplog import ReplayResult, replay
from pgqueue.client.queue import Queue
from pgqueue.client.queue_async import AsyncQueue
from pgqueue.client.schedule import Schedule, TickResult
from pgqueue.errors import (
    Cancelled,
    ConnectionFailed,
    Contention,
    DedupConflict,
    InvalidState,
    JobNotFound,
    LeaseLost,
    NotLeader,
    PermissionDenied,
    PgQueueError,
    SchemaError,
    SchemaMissing,
    SchemaTooNew,
)
from pgqueue.models import (
    FINISHED_STATES,
    JOB_STATES,
    VERBS,
    BulkResult,
    Checkpoint,
    JobCount,
    JobHistory,
    JobInfo,
    JobState,
    KindConfig,
    Lease,
    NewJob,
    Op,
    StreamStats,
)
from pgqueue.runtime.app import App, JobHandler, Step, StepJob
from pgqueue.runtime.running import JobContext
from pgqueue.runtime.steps import StepContext
from pgqueue.runtime.steps_async import AsyncStepContext
from pgqueue.runtime.worker import Worker

__version__ = "0.1.0"


def migrate(dsn: str) -> None:
    """Bring the database's pgqueue schema up to date (idempotent). Needs CREATE rights."""
    from pgqueue.db import schema  # alembic is imported only when migrating

    schema.migrate(dsn)


__all__ = [
    "FINISHED_STATES",
    "JOB_STATES",
    "VERBS",
    "App",
    "AsyncQueue",
    "AsyncStepContext",
    "BulkResult",
    "Cancelled",
    "Checkpoint",
    "ConnectionFailed",
    "Contention",
    "DedupConflict",
    "InvalidState",
    "JobContext",
    "JobCount",
    "JobHandler",
    "JobHistory",
    "JobInfo",
    "JobNotFound",
    "JobState",
    "KindConfig",
    "Lease",
    "LeaseLost",
    "NewJob",
    "NotLeader",
    "Op",
    "Parked",
    "PermissionDenied",
    "PgQueueError",
    "Queue",
    "ReplayResult",
    "Schedule",
    "SchemaError",
    "SchemaMissing",
    "SchemaTooNew",
    "Step",
    "StepContext",
    "StepJob",
    "StreamStats",
    "TickResult",
    "Worker",
    "__version__",
    "migrate",
    "replay",
]
