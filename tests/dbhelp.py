"""Helpers the tests share: polling for a condition, a pinned clock, leases long expired, forced
reclaims, op and state counts, table statistics reported at once."""
from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from psycopg.types.json import Jsonb

from pgqueue.client import lease, reclaim
from pgqueue.db import connection, queries
from pgqueue.db.queries import Conn
from pgqueue.models import Checkpoint, Lease

UTC = dt.timezone.utc
T0 = dt.datetime(2030, 1, 1, tzinfo=UTC)
FAR = dt.datetime(2100, 1, 1, tzinfo=UTC)

T = TypeVar("T")


def lock_waiters(conn: Conn) -> int:
    """Sessions of this database waiting for a lock, on every node of a Citus cluster (where a
    statement about a stream waits on the node holding it: citus_stat_activity) or on this
    server."""
    view = "citus_stat_activity" if on_citus(conn) else "pg_stat_activity"
    row = conn.execute(f"SELECT count(*) FROM {view} WHERE wait_event_type = 'Lock' "
                       "AND datname = current_database()").fetchone()
    return 0 if row is None else int(row[0])


def wait_for(cond: Callable[[], T | None], timeout: float, what: str, interval: float = 0.05) -> T:
    """Poll `cond` until it returns something truthy; fail naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def set_now(conn: Conn, when: dt.datetime) -> None:
    """Pin pgqueue.now_ms() on this connection (for its session) to `when`."""
    conn.execute("SELECT set_config('pgqueue.now', %s, false)", (when.isoformat(),))


@contextmanager
def pinned(dsn: str, when: dt.datetime) -> Iterator[Conn]:
    """An autocommit connection whose pgqueue.now_ms() is pinned to `when`."""
    with connection.connect(dsn) as conn:
        set_now(conn, when)
        yield conn


def lease_long_ago(dsn: str, stream: str, limit: int = 1,
                   checkpoint: Checkpoint | None = None) -> list[Lease]:
    """Lease up to `limit` jobs of `stream` as of an hour ago, for a second (then renewed, for
    a second, with `checkpoint` when given): leases that have long expired now, without
    waiting for a visibility timeout to pass. One server only: on a Citus cluster the clock
    pinned is the coordinator session's, not the streams' nodes'."""
    with pinned(dsn, dt.datetime.now(UTC) - dt.timedelta(hours=1)) as conn:
        held = lease.lease(conn, stream, limit, 1.0, 0, 0)
        if checkpoint is not None:
            renewed = lease.renew_many(conn, [(h, 1.0, checkpoint) for h in held])
            assert {h.lease_id for h in held} <= set(renewed), renewed
        return held


def expire_leases(dsn: str) -> None:
    """Make every lease have run out an hour ago, behind its holder's back, as if its
    visibility timeout had passed: nothing reclaims them (on every layout; on one server the
    leases' expiry entries, which reclaim reads, keep their times)."""
    with connection.connect(dsn) as conn:
        conn.execute("UPDATE pgqueue.job SET lease_expires_at = now() - interval '1 hour' "
                     "WHERE state = 'leased'")


def force_reclaim(dsn: str) -> int:
    """Reclaim every lease, as if the clock had jumped far ahead (behind any worker's back).
    On a Citus cluster every lease is made to have expired instead: a clock pinned in this
    session (pgqueue.now) is the coordinator's, and reclaim runs on the streams' nodes."""
    with connection.connect(dsn) as conn:
        if on_citus(conn):
            conn.execute("UPDATE pgqueue.job SET lease_expires_at = now() - interval '1 hour' "
                         "WHERE state = 'leased'")
            return reclaim.reclaim_expired(conn)
    with pinned(dsn, FAR) as conn:
        return reclaim.reclaim_expired(conn)


def on_citus(conn: Conn) -> bool:
    """Whether the connection's database is a Citus cluster's."""
    row = conn.execute("SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')"
                       ).fetchone()
    return bool(row and row[0])


def ring_bytes(conn: Conn, parent: str) -> int:
    """The bytes a ring's partitions hold (pgqueue.job_count_delta, pgqueue.ready, ...): on
    Citus, of every shard on every node."""
    size = "citus_relation_size" if on_citus(conn) else "pg_relation_size"
    row = conn.execute(f"SELECT coalesce(sum({size}(inhrelid)), 0) FROM pg_inherits "
                       "WHERE inhparent = %s::regclass", (parent,)).fetchone()
    return int(row[0]) if row else 0


def job_rows_deleted(conn: Conn) -> int:
    """Rows deleted from pgqueue.job so far, by this server's table statistics, this
    connection's own included: pg_stat_force_next_flush makes its backend report them as that
    statement ends (otherwise it does at most once a second, or ten seconds after it went
    idle)."""
    conn.execute("SELECT pg_stat_force_next_flush()")
    row = conn.execute("SELECT coalesce(n_tup_del, 0) FROM pg_stat_user_tables "
                       "WHERE relid = 'pgqueue.job'::regclass").fetchone()
    return int(row[0]) if row else 0


def fold_counts(conn: Conn) -> None:
    """Fold the job counts' deltas as a maintenance pass does: on Citus on every shard group's
    node (pgqueue.recycle_rings, naming a stream hashed to each)."""
    if not on_citus(conn):
        conn.execute("SELECT pgqueue.fold_job_counts()")
        return
    for _shard, key in conn.execute(queries.get("citus_shard_keys").sql).fetchall():
        conn.execute("SELECT pgqueue.fold_job_counts(%s)", (key,))


def op_counts(dsn: str) -> dict[str, int]:
    """Ops in the log by kind."""
    with connection.connect(dsn) as conn:
        rows = conn.execute("SELECT op, count(*) FROM pgqueue.op_log GROUP BY op").fetchall()
    return {str(op): int(n) for op, n in rows}


def state_snapshot(dsn: str) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    """Every job and dead-letter row, for "nothing changed" checks."""
    with connection.connect(dsn) as conn:
        jobs = [tuple(r) for r in conn.execute("SELECT * FROM pgqueue.job ORDER BY id")]
        dead = [tuple(r) for r in conn.execute("SELECT * FROM pgqueue.dead_letter ORDER BY id")]
    return jobs, dead


def register_etl_step_sets(dsn: str, old: str, new: str) -> None:
    """Record two step lists of kind etl under the hashes `old` (steps a, b) and `new` (a, x,
    b): the step set of a job that changed, for parking and accepting it."""
    with connection.connect(dsn) as conn:
        conn.execute("SELECT pgqueue.register_step_set(%s, 'etl', %s)",
                     [old, Jsonb([{"name": "a", "version": 1}, {"name": "b", "version": 1}])])
        conn.execute("SELECT pgqueue.register_step_set(%s, 'etl', %s)",
                     [new, Jsonb([{"name": "a", "version": 1}, {"name": "x", "version": 1},
                                  {"name": "b", "version": 1}])])


def listening(dsn: str, channel: str) -> bool:
    """Whether a session of this database has run LISTEN on `channel` (a worker's listener
    runs it last: pgqueue_cancel after pgqueue_jobs), so a test's NOTIFY cannot beat it."""
    with connection.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND query ILIKE %s", [f"LISTEN %{channel}%"]).fetchone()
    return bool(row and row[0])
