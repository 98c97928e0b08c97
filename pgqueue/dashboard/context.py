"""What every dashboard request shares (the queue, the admin token, caches, the listener),
and how the library's errors become HTTP statuses."""
from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

from pgqueue.client.queue_async import AsyncQueue
from pgqueue.dashboard.auth import Auth
from pgqueue.dashboard.data import Cache
from pgqueue.dashboard.live import Broadcaster
from pgqueue.errors import (
    ConnectionFailed,
    Contention,
    DedupConflict,
    InvalidState,
    JobNotFound,
    NotLeader,
    PermissionDenied,
    PgQueueError,
    SchemaError,
    SchemaMissing,
)


@dataclass
class Context:
    """The dashboard's state: one AsyncQueue (its pool serves every stream), the auth rule,
    the throughput cache and the LISTEN broadcaster."""

    queue: AsyncQueue
    auth: Auth
    cache: Cache
    live: Broadcaster


def context(request: Request) -> Context:
    ctx: Context = request.app.state.pgqueue
    return ctx


def status_for(exc: Exception) -> int | None:
    """The HTTP status of an error the library raised (None: not one of ours, a bug: 500)."""
    if isinstance(exc, JobNotFound):
        return 404
    if isinstance(exc, PermissionDenied):
        return 403  # the dashboard's database role may not: the message names the role it needs
    if isinstance(exc, InvalidState | DedupConflict):
        return 409
    if isinstance(exc, NotLeader | ConnectionFailed | SchemaMissing | SchemaError | Contention):
        return 503  # Contention: a deadlock or serialization failure; trying again works
    if isinstance(exc, ValueError):
        return 400  # an argument check (params.BadInput is a ValueError too)
    if isinstance(exc, PgQueueError):
        return 500
    return None
