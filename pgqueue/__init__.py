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

from typing import TYPE_CHECKING, Any

from pgqueue.errors import (
    Cancelled,
    ConnectionFailed,
    Contention,
    DedupConflict,
    InvalidState,
    JobNotFound,
    JobTimeout,
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
    DeadLetterGroup,
    JobCount,
    JobHistory,
    JobInfo,
    JobState,
    KindConfig,
    Lease,
    NewJob,
    Op,
    StreamStats,
    WorkerInfo,
)

#: The public names that live in a subsystem, by the module holding each: loaded at first use
#: (`pgqueue.Queue`, `from pgqueue import Worker`), so `import pgqueue` costs two small modules
#: and a web process that only enqueues never loads the worker, alembic or prometheus_client.
_LAZY = {
    "AsyncQueue": "pgqueue.client.queue_async",
    "AsyncStepContext": "pgqueue.runtime.steps_async",
    "App": "pgqueue.runtime.app",
    "JobHandler": "pgqueue.runtime.jobdefs",
    "Step": "pgqueue.runtime.jobdefs",
    "StepJob": "pgqueue.runtime.jobdefs",
    "Parked": "pgqueue.client.deploy",
    "ReplayResult": "pgqueue.client.oplog",
    "replay": "pgqueue.client.oplog",
    "Queue": "pgqueue.client.queue",
    "JobContext": "pgqueue.runtime.running",
    "Schedule": "pgqueue.cron",
    "TickResult": "pgqueue.cron",
    "StepContext": "pgqueue.runtime.steps",
    "Worker": "pgqueue.runtime.worker",
    "WorkerSettings": "pgqueue.runtime.settings",
    "AsyncWorker": "pgqueue.runtime.async_worker",
}

if TYPE_CHECKING:
    from pgqueue.client.deploy import Parked
    from pgqueue.client.oplog import ReplayResult, replay
    from pgqueue.client.queue import Queue
    from pgqueue.client.queue_async import AsyncQueue
    from pgqueue.cron import Schedule, TickResult
    from pgqueue.runtime.app import App
    from pgqueue.runtime.async_worker import AsyncWorker
    from pgqueue.runtime.jobdefs import JobHandler, Step, StepJob
    from pgqueue.runtime.running import JobContext
    from pgqueue.runtime.settings import WorkerSettings
    from pgqueue.runtime.steps import StepContext
    from pgqueue.runtime.steps_async import AsyncStepContext
    from pgqueue.runtime.worker import Worker


def __getattr__(name: str) -> Any:
    """A public name of a subsystem, imported at its first use (PEP 562)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pgqueue' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


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
    "AsyncWorker",
    "BulkResult",
    "Cancelled",
    "Checkpoint",
    "ConnectionFailed",
    "Contention",
    "DeadLetterGroup",
    "DedupConflict",
    "InvalidState",
    "JobContext",
    "JobCount",
    "JobHandler",
    "JobHistory",
    "JobInfo",
    "JobNotFound",
    "JobState",
    "JobTimeout",
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
    "WorkerInfo",
    "WorkerSettings",
    "__version__",
    "migrate",
    "replay",
]
