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

from pgqueue.aio.queue import AsyncQueue
from pgqueue.aio.steps import AsyncStepContext
from pgqueue.app import App, JobHandler, Step, StepJob
from pgqueue.deploy import Parked
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
from pgqueue.oplog import ReplayResult, replay
from pgqueue.queue import Queue
from pgqueue.running import JobContext
from pgqueue.schedule import Schedule, TickResult
from pgqueue.steps import StepContext
from pgqueue.worker import Worker

__version__ = "0.1.0"


def migrate(dsn: str) -> None:
    """Bring the database's pgqueue schema up to date (idempotent). Needs CREATE rights."""
    from pgqueue import schema  # alembic is imported only when migrating

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
