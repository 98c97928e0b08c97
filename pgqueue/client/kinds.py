# DO NOT EDIT: generated from pgqueue/client/kinds_async.py by tools/generate.py; edit that file.
"""Kind settings: per stream and kind, the crash quarantine threshold and the limits the lease
enforces across every worker (max_concurrency, rate_limit, max_per_key). Each change is a
ConfigureKind op carrying the kind's whole settings, so replicas and replays rebuild them."""
from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb

from pgqueue import validate
from pgqueue.db import run
from pgqueue.models import KindConfig


def configure(conn: run.Conn, stream: str, kind: str, settings: dict[str, Any]) -> bool:
    """Set the settings given (validate.kind_settings' columns; None clears one), leave the
    others; True when anything changed."""
    validate.stream(stream)
    if validate.kind(kind) is None:
        raise ValueError("kind must be a name (settings belong to a kind)")
    if not settings:
        return False
    return bool(run.scalar(conn, "configure_kind", {
        "stream": stream, "kind": kind, "settings": Jsonb(settings)}))


def list_(conn: run.Conn, stream: str | None) -> list[KindConfig]:
    """The kinds with settings, of `stream` (every stream's when None), by stream and kind."""
    if stream is not None:
        validate.stream(stream)
    return [KindConfig.from_row(r) for r in run.fetch(conn, "kinds_list", {"stream": stream})]
