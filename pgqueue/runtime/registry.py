"""The worker registry: a worker announces itself (and what its handlers need the database to
know), heartbeats, and says goodbye. `pgqueue workers` and the metrics read it; maintenance
forgets a worker silent for ten minutes."""
from __future__ import annotations

import logging
import os
import socket
from collections.abc import Sequence

from psycopg.types.json import Jsonb

from pgqueue import validate
from pgqueue.db import queries
from pgqueue.runtime.app import App
from pgqueue.runtime.jobdefs import StepJob

log = logging.getLogger("pgqueue.worker")


def warn_unknown_streams(streams: Sequence[str], known: Sequence[str]) -> None:
    """Warn of each of a worker's streams no job, setting, schedule or worker ever named:
    most often a typo (the worker would idle on it while the jobs wait on the right one). It
    still works on it: enqueueing to a new stream creates it."""
    for stream in streams:
        if stream not in known:
            log.warning("worker: %s; working on it anyway (enqueueing creates a stream)",
                        validate.no_such_stream(stream, known),
                        extra={"pgqueue": {"event": "unknown_stream", "stream": stream}})


def register(conn: queries.Conn, *, node: int, streams: Sequence[str],
             concurrency: int) -> int | None:
    """Register this process as a worker; its registry id (a lease's worker_instance)."""
    row = queries.fetch_one(conn, "register_worker", {
        "node": node, "host": socket.gethostname(), "pid": os.getpid(),
        "streams": list(streams), "concurrency": concurrency})
    return None if row is None else int(row["id"])


def register_handlers(conn: queries.Conn, app: App, streams: Sequence[str],
                      worker_id: int | None = None) -> None:
    """Record the App's step lists and the kind settings its handlers name (quarantine
    thresholds, limits) where reclaim, the lease and a resumed job's compatibility check can
    see them; settings a handler leaves unnamed stay as configure_kind set them. With the
    worker's registry id, also the kinds it handles and their handlers' settings (what the
    dashboard's Kinds page lists)."""
    if worker_id is not None:
        queries.fetch(conn, "register_worker_kinds", {
            "id": worker_id,
            "kinds": Jsonb([h.described() for _, h in sorted(app.handlers.items())])})
    for handler in app.handlers.values():
        if isinstance(handler, StepJob) and handler.steps:
            queries.fetch(conn, "register_step_set", {
                "hash": handler.step_set_hash, "kind": handler.kind,
                "steps": Jsonb(handler.step_list)})
        settings = handler.kind_settings()
        if settings:
            for stream in streams:
                queries.fetch(conn, "configure_kind", {
                    "stream": stream, "kind": handler.kind, "settings": Jsonb(settings)})


def heartbeat(conn: queries.Conn, worker_id: int) -> None:
    queries.fetch(conn, "heartbeat_worker", {"id": worker_id})


def deregister(conn: queries.Conn, worker_id: int) -> None:
    queries.fetch(conn, "deregister_worker", {"id": worker_id})
