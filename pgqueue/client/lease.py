# DO NOT EDIT: generated from pgqueue/client/lease_async.py by tools/generate.py; edit that file.
"""Lease and renew: hand jobs to a worker under a fencing lease id, and keep them.

A renewal extends many leases in one statement and carries each job's checkpoint in the same
UPDATE, so step boundaries cost no extra round trip and the update stays HOT.
"""
from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from typing import Any

from psycopg.types.json import Jsonb

from pgqueue import shapes, validate
from pgqueue.client.position import LeasePosition
from pgqueue.db import run
from pgqueue.models import Checkpoint, Lease, Renewed, by_stream


def lease(
    conn: run.Conn,
    stream: str,
    limit: int,
    visibility_timeout: float,
    worker_node: int,
    worker_instance: int,
    request: uuid.UUID | None = None,
    resent: bool = False,
    start: int | None = None,
    position: LeasePosition | None = None,
    *,
    kinds: Sequence[str] | None = None,
    not_kinds: Sequence[str] | None = None,
) -> list[Lease]:
    """Lease up to `limit` jobs of `stream` for `visibility_timeout` seconds. A call `resent`
    with the same `request` token returns the leases its first attempt granted that are still
    current, instead of leasing more. `start`: how many of the returned jobs (in order) the
    caller starts at once; the others are leased ahead (Lease.started False) until a renewal
    says they started (None: all count as started). `position`: the caller's last lease of
    the stream, where this one starts (a lease loop keeps one per stream: see
    pgqueue.client.position); it moves to this lease's last job. `kinds`: lease only jobs of
    these kinds; `not_kinds`: only jobs of other kinds (or none): a worker's lane of slots
    leases the kinds it runs (pgqueue/runtime/capacity.py)."""
    validate.stream(stream)
    validate.integer(limit, "limit", low=1, high=100_000)
    visibility_ms = validate.to_ms(visibility_timeout, "visibility_timeout", positive=True)
    validate.integer(worker_node, "worker_node", low=-(2**31), high=2**31 - 1)
    validate.integer(worker_instance, "worker_instance", low=-(2**31), high=2**31 - 1)
    if start is not None:
        validate.integer(start, "start", low=0, high=100_000)
    if position is not None and not isinstance(position, LeasePosition):
        raise TypeError(f"position must be a pgqueue.client.position.LeasePosition, got "
                        f"{type(position).__name__}")
    for name, given in (("kinds", kinds), ("not_kinds", not_kinds)):
        if isinstance(given, str):
            raise TypeError(f"{name} must be a list of kinds, not a str")
    only = None if kinds is None else [validate.kind(k, "kinds") for k in kinds]
    other = None if not_kinds is None else [validate.kind(k, "not_kinds") for k in not_kinds]
    after = None if position is None else position.after()
    rows = run.fetch_shaped(conn, "lease_jobs", {
        "stream": stream, "limit": limit, "visibility_ms": visibility_ms,
        "worker_node": worker_node, "worker_instance": worker_instance, "request": request,
        "resent": resent, "start": start,
        "after_priority": None if after is None else after[0],
        "after_id": None if after is None else after[1],
        "kinds": only, "not_kinds": other,
    }, shapes.LEASE)
    visibility = visibility_ms / 1000.0
    leased = [Lease.from_lease_row(r, visibility) for r in rows]
    if position is not None:
        position.moved(after, leased)
    return leased


def renew_many(
    conn: run.Conn,
    items: Sequence[tuple[Lease, float | None, Checkpoint | None]],
    started: Sequence[bool] | None = None,
) -> dict[int, dt.datetime]:
    """Renew (lease, visibility_timeout or None for the lease's own, checkpoint or None) in one
    statement; `started[i]` True says the i-th lease's handler has started (a job leased ahead).
    Returns {lease_id: new expiry} for the leases still current; absent = lost."""
    return {lease_id: r.expires_at
            for lease_id, r in (renew_leases(conn, items, started)).items()}


def renew_leases(
    conn: run.Conn,
    items: Sequence[tuple[Lease, float | None, Checkpoint | None]],
    started: Sequence[bool] | None = None,
) -> dict[int, Renewed]:
    """renew_many, saying of each lease still current whether its job's cancel was requested."""
    if not items:
        return {}
    if started is not None and len(started) != len(items):
        raise ValueError(f"started has {len(started)} flags for {len(items)} leases")
    # a statement per stream (pgqueue.models.by_stream), all in one round trip
    streams: dict[str, dict[str, Any]] = {}
    for i, (held, vt, checkpoint) in enumerate(items):
        if not isinstance(held, Lease):
            raise TypeError(f"lease must be a pgqueue.Lease, got {type(held).__name__}")
        if checkpoint is not None and not isinstance(checkpoint, Checkpoint):
            raise TypeError(f"checkpoint must be a pgqueue.Checkpoint, got {type(checkpoint).__name__}")
        params = streams.setdefault(held.stream, {
            "stream": held.stream, "job_ids": [], "lease_ids": [], "visibility_ms": [],
            "checkpoints": [], "started": None if started is None else []})
        params["job_ids"].append(held.job_id)
        params["lease_ids"].append(held.lease_id)
        params["visibility_ms"].append(validate.to_ms(
            held.visibility_timeout if vt is None else vt, "visibility_timeout", positive=True))
        params["checkpoints"].append(None if checkpoint is None else Jsonb(checkpoint.to_json()))
        if started is not None:
            params["started"].append(bool(started[i]))
    results = run.fetch_each(conn, "renew_leases", list(streams.values()))
    return {r["lease_id"]: Renewed(r["expires_at"], bool(r["cancel_requested"]))
            for rows in results for r in rows}


def cancel_requested(conn: run.Conn, leases: Sequence[Lease]) -> set[int]:
    """Of these leases, still current, those whose job an operator asked to cancel: a read
    by primary key, writing nothing (what a NOTIFY pgqueue_cancel, which any login may send,
    makes a worker look up)."""
    if not leases:
        return set()
    results = run.fetch_each(conn, "cancel_requested", [
        {"stream": stream, "job_ids": [held.job_id for held in group],
         "lease_ids": [held.lease_id for held in group]}
        for stream, group in by_stream(leases).items()])
    return {int(r["lease_id"]) for rows in results for r in rows}
