# DO NOT EDIT: generated from pgqueue/client/oplog_async.py by tools/generate.py; edit that file.
"""The op log: read it, and replay one database's log into another.

Replay reads the source inside one REPEATABLE READ snapshot and takes every op that snapshot
sees committed, in seq order: for any one job that is commit order, because every transition
appends its op while holding the job's row lock. The target
applies each op with pgqueue.apply_op (the same function replicas use) and records its seq,
so replaying twice changes nothing.
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

import psycopg
from psycopg.types.json import Jsonb

from pgqueue import validate
from pgqueue.db import connection, run
from pgqueue.models import Op

BATCH = 2000


@dataclass(frozen=True)
class ReplayResult:
    """What a replay did: ops read from the source, and how many were new to the target."""

    read: int
    applied: int
    last_seq: int


def tail(conn: run.Conn, *, limit: int = 20, stream: str | None = None,
         job_id: int | None = None) -> list[Op]:
    """The newest ops, newest first."""
    validate.integer(limit, "limit", low=1, high=1_000_000)
    rows = run.fetch(conn, "oplog_tail", {"limit": limit, "stream": stream, "job_id": job_id})
    return [Op(**r) for r in rows]


def counts(conn: run.Conn) -> dict[str, int]:
    """Ops in the log by kind."""
    return {r["op"]: r["count"] for r in run.fetch(conn, "oplog_counts")}


@dataclass(frozen=True)
class Retention:
    """How long the maintenance passes keep ops, how many of the ring's 32 partitions hold
    some, and when the oldest of those was left (None: only the current one)."""

    seconds: float
    partitions: int
    oldest_closed_at: dt.datetime | None


def retention(conn: run.Conn) -> Retention:
    """The op log's retention (pgqueue.op_log_policy) and the ring's use."""
    row = run.fetch_one(conn, "op_log_retention")
    assert row is not None  # the policy table has its one row from the install on
    return Retention(float(row["seconds"]), int(row["partitions"]), row["oldest_closed_at"])


def set_retention(conn: run.Conn, keep: float | dt.timedelta) -> float:
    """Keep ops `keep` seconds (or a timedelta), at least 1 s: the maintenance passes truncate
    the ring's partitions once all their ops are older (pgqueue.set_op_log_retention, an
    operator's). Returns the retention in seconds."""
    seconds = validate.seconds(keep, "op log retention")
    if seconds < 1:
        raise ValueError(f"op log retention must be at least 1 second, got {seconds:g}")
    return float(run.scalar(conn, "set_op_log_retention", {"seconds": seconds}))


def recycle(conn: run.Conn) -> tuple[int, bool]:
    """One retention pass of the op log (pgqueue.recycle_op_log, what every maintenance pass
    runs): the ops it removed by truncating partitions, and whether the ring moved on (on
    Citus: whether any shard group's did)."""
    if run.on_citus(conn):  # each shard group's ring on its node, in one round trip
        keys = [str(r["key"]) for r in run.fetch(conn, "citus_shard_keys") if r["key"]]
        rows = [found[0] for found in run.fetch_each(
            conn, "recycle_op_log_of", [{"stream": k} for k in keys])]
        return (sum(int(r["pruned"] or 0) for r in rows), any(bool(r["rotated"]) for r in rows))
    row = run.fetch_one(conn, "recycle_op_log")
    return (0, False) if row is None else (int(row["pruned"] or 0), bool(row["rotated"]))


def replay(source_dsn: str, target_dsn: str, *, batch: int = BATCH,
           progress: Callable[[int], None] | None = None) -> ReplayResult:
    """Apply the source's whole committed op log to the (migrated) target."""
    read = applied = last = 0
    with connection.connect(source_dsn, autocommit=False) as src, \
            connection.connect(target_dsn, autocommit=False) as dst:
        src.set_isolation_level(psycopg.IsolationLevel.REPEATABLE_READ)
        src.set_read_only(True)
        connection.check_schema(src)  # opens the snapshot every batch below reads from
        connection.check_schema(dst)
        dst.commit()
        while True:
            rows = run.fetch(src, "oplog_visible_batch", {"after": last, "limit": batch})
            if not rows:
                break
            applied += int(run.scalar(
                dst, "oplog_ingest", {"ops": Jsonb([r["op"] for r in rows])}) or 0)
            dst.commit()
            read += len(rows)
            last = rows[-1]["seq"]
            if progress is not None:
                progress(len(rows))
        run.fetch(dst, "advance_sequences")
        dst.commit()
        src.rollback()
    return ReplayResult(read=read, applied=applied, last_seq=last)
