"""Expired leases found through pgqueue.lease_expiry (revision 0014): every lease and renewal
call appends one row with the expiry it gave; reclaim reads the rows that came due, and a pass
truncates a partition once its buckets are past and reclaim is done with it. What a pass reads
must not grow with the jobs handled while something holds the vacuum horizon back."""
from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

import pgqueue
from pgqueue.client import enqueue, lease, settle
from pgqueue.db import connection, schema
from pgqueue.db.queries import Conn
from pgqueue.maintenance import maintain
from tests.dbhelp import T0, set_now, wait_for
from tests.integration.db.test_ready_upgrade import OldClients
from tests.pgbed import Bed

STREAM = "expiry"
S = dt.timedelta(seconds=1)


@pytest.fixture
def clock(dsn: str) -> Iterator[Conn]:
    """An autocommit connection whose queue clock the test moves (pgqueue.now_ms)."""
    with connection.connect(dsn) as conn:
        set_now(conn, T0)
        yield conn


def rows(conn: Conn, job_id: int) -> list[tuple[Any, ...]]:
    """The rows of pgqueue.lease_expiry naming a job: (slot, expires_at)."""
    return [tuple(r) for r in conn.execute(
        "SELECT slot, expires_at FROM pgqueue.lease_expiry WHERE %s = ANY(job_ids) "
        "ORDER BY expires_at", [job_id]).fetchall()]


def due(conn: Conn) -> list[tuple[int, str]]:
    return [(int(r[0]), str(r[1])) for r in conn.execute(
        "SELECT job_id, state FROM pgqueue.reclaim_due_jobs()").fetchall()]


def state(conn: Conn, job_id: int) -> str:
    row = conn.execute("SELECT state FROM pgqueue.job WHERE id = %s", [job_id]).fetchone()
    return "gone" if row is None else str(row[0])


def test_a_lease_and_each_renewal_append_one_row_per_call_and_reclaim_finds_the_due_ones(
        clock: Conn) -> None:
    ids = enqueue.enqueue_many(clock, STREAM, [pgqueue.NewJob(b"a"), pgqueue.NewJob(b"b"),
                                               pgqueue.NewJob(b"c")])
    held = lease.lease(clock, STREAM, 3, 1.0, 0, 1)  # expires at T0 + 1 s
    assert sorted(h.job_id for h in held) == sorted(ids)
    # one row for the call, naming its three jobs
    assert clock.execute("SELECT count(*), sum(cardinality(job_ids)) FROM pgqueue.lease_expiry"
                         ).fetchone() == (1, 3)
    first, second, third = sorted(held, key=lambda h: h.job_id)
    # the first is renewed to T0 + 10 s, the second acked, the third left to expire
    clock.execute("SELECT * FROM pgqueue.renew(%s, %s, %s, %s)",
                  ([first.job_id], [first.lease_id], [10_000], [None]))
    assert [r[1] for r in rows(clock, first.job_id)] == [T0 + S, T0 + 10 * S]
    settle.ack_many(clock, [second])
    set_now(clock, T0 + 0.5 * S)
    assert due(clock) == []  # nothing expired yet
    set_now(clock, T0 + 2 * S)
    assert due(clock) == [(third.job_id, "pending")]
    assert state(clock, first.job_id) == "leased"  # renewed: its row says T0 + 10 s
    assert due(clock) == []  # reclaimed once
    set_now(clock, T0 + 11 * S)
    assert due(clock) == [(first.job_id, "pending")]
    assert state(clock, second.job_id) == "gone"


def test_a_job_another_transaction_holds_is_found_by_a_later_pass_and_keeps_its_partition(
        dsn: str, clock: Conn) -> None:
    (job_id,) = enqueue.enqueue_many(clock, STREAM, [pgqueue.NewJob(b"a")])
    (held,) = lease.lease(clock, STREAM, 1, 1.0, 0, 1)
    set_now(clock, T0 + 20 * S)  # due, and its bucket past (T0 + 1 s is 2 buckets back)
    with psycopg.connect(dsn) as other:
        other.execute("SELECT 1 FROM pgqueue.job WHERE id = %s FOR UPDATE", [job_id])
        assert due(clock) == []  # passed over, not waited for
        clock.execute("SELECT pgqueue.recycle_lease_expiry()")
        assert rows(clock, job_id) != []  # reclaim is not done with it: kept
        other.rollback()
    assert due(clock) == [(job_id, "pending")]
    assert held.job_id == job_id
    emptied = clock.execute("SELECT pgqueue.recycle_lease_expiry()").fetchone()
    assert emptied == (1,)
    assert rows(clock, job_id) == []


def test_a_long_lease_moves_on_when_its_partition_is_emptied_and_is_reclaimed_when_due(
        clock: Conn) -> None:
    (job_id,) = enqueue.enqueue_many(clock, STREAM, [pgqueue.NewJob(b"a")])
    # 10 minutes: beyond the ring's 120 s ahead, the row goes to the bucket 120 s ahead
    lease.lease(clock, STREAM, 1, 600.0, 0, 1)
    (slot, expires) = rows(clock, job_id)[0]
    assert expires == T0 + 600 * S
    set_now(clock, T0 + 140 * S)  # that bucket is past now: its partition is emptied
    assert clock.execute("SELECT pgqueue.recycle_lease_expiry()").fetchone() == (1,)
    moved = rows(clock, job_id)
    assert len(moved) == 1 and moved[0][1] == expires and moved[0][0] != slot
    assert due(clock) == []
    for at in range(150, 600, 60):  # the clock goes round the ring; the row keeps moving on
        set_now(clock, T0 + at * S)
        clock.execute("SELECT pgqueue.recycle_lease_expiry()")
        assert [r[1] for r in rows(clock, job_id)] == [expires], at
        assert due(clock) == []
    set_now(clock, T0 + 601 * S)
    assert due(clock) == [(job_id, "pending")]


def test_a_promotion_gives_the_leases_the_apply_path_copied_their_rows(clock: Conn) -> None:
    (job_id,) = enqueue.enqueue_many(clock, STREAM, [pgqueue.NewJob(b"a")])
    lease.lease(clock, STREAM, 1, 1.0, 0, 1)
    clock.execute("TRUNCATE pgqueue.lease_expiry")  # as on a replica, which writes none
    clock.execute("SELECT pgqueue.set_role('replica', 'r', 'leader-dsn')")
    clock.execute("SELECT pgqueue.set_role('leader')")
    assert [r[1] for r in rows(clock, job_id)] == [T0 + S]
    set_now(clock, T0 + 2 * S)
    assert due(clock) == [(job_id, "pending")]


def test_a_runners_first_pass_and_one_every_few_minutes_read_every_leased_job(
        dsn: str, clock: Conn, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lease no row names (granted by the previous release during the upgrade) is still
    reclaimed: by the first pass, by the first after a promotion, and every few minutes."""
    def orphan() -> int:
        enqueue.enqueue_many(clock, STREAM, [pgqueue.NewJob(b"o")])
        (held,) = lease.lease(clock, STREAM, 1, 1.0, 0, 1)
        clock.execute("TRUNCATE pgqueue.lease_expiry")
        return held.job_id

    t = T0

    def later() -> None:
        nonlocal t
        t += 5 * S
        set_now(clock, t)

    first = orphan()
    later()
    assert [r.job_id for r in maintain.run_pass(clock).reclaimed_jobs] == [first]
    second = orphan()
    later()
    assert maintain.run_pass(clock).reclaimed_jobs == ()  # only what came due
    monkeypatch.setattr(maintain, "FULL_RECLAIM_SECONDS", 0.0)
    assert [r.job_id for r in maintain.run_pass(clock).reclaimed_jobs] == [second]
    monkeypatch.setattr(maintain, "FULL_RECLAIM_SECONDS", 300.0)
    third = orphan()
    clock.execute("SELECT pgqueue.set_role('replica', 'r', 'leader-dsn')")
    assert maintain.run_pass(clock).leader is False
    clock.execute("SELECT pgqueue.set_role('leader')")
    clock.execute("TRUNCATE pgqueue.lease_expiry")  # as if the promotion had written none
    later()
    assert [r.job_id for r in maintain.run_pass(clock).reclaimed_jobs] == [third]


def pass_buffers(conn: Conn) -> dict[str, int]:
    """Shared buffers the due reclaim and the ring's recycling read now (hits and reads)."""
    found: dict[str, int] = {}
    for name in ("reclaim_due_jobs", "recycle_lease_expiry", "reclaim_expired_jobs"):
        conn.execute(f"SELECT * FROM pgqueue.{name}()")  # its plans made
        row = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT * FROM pgqueue.{name}()"
                           ).fetchone()
        assert row is not None
        plan = (row[0] if isinstance(row[0], list) else json.loads(row[0]))[0]["Plan"]
        found[name] = int(plan["Shared Hit Blocks"]) + int(plan["Shared Read Blocks"])
    return found


def churn(conn: Conn, jobs: int, at: dt.datetime) -> dt.datetime:
    """Enqueue, lease (1 s visibility) and ack `jobs` jobs at `at`, then move the clock 20 s
    on (their rows due, their buckets past) and run two passes' reclaim and recycling."""
    set_now(conn, at)
    for _ in range(jobs // 200):
        enqueue.enqueue_many(conn, STREAM, [pgqueue.NewJob(b"x") for _ in range(200)])
        while held := lease.lease(conn, STREAM, 50, 1.0, 0, 1):
            settle.ack_many(conn, held)
    at += 20 * S
    set_now(conn, at)
    for _ in range(2):
        conn.execute("SELECT * FROM pgqueue.reclaim_due_jobs()")
        conn.execute("SELECT pgqueue.recycle_lease_expiry()")
    return at


def test_a_pass_reads_no_more_however_many_jobs_were_leased_since_the_horizon_was_held(
        dsn: str, clock: Conn) -> None:
    """With a transaction id held, 2,000 jobs leased and acked, then 12,000 more: the due
    reclaim and the recycling read about the same after both, while reading every leased job
    (what every pass did before 0014) steps over the index entry of each job leased since."""
    with psycopg.connect(dsn) as holder:
        holder.execute("SELECT pg_current_xact_id()")
        at = churn(clock, 2_000, T0)
        few = pass_buffers(clock)
        at = churn(clock, 12_000, at)
        many = pass_buffers(clock)
        held = clock.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_xid IS NOT NULL "
                             "AND state = 'idle in transaction'").fetchone()
        assert held == (1,)
        holder.rollback()
    assert many["reclaim_due_jobs"] <= few["reclaim_due_jobs"] + 20, (few, many)
    assert many["recycle_lease_expiry"] <= few["recycle_lease_expiry"] + 20, (few, many)
    # the full read grows with the jobs leased since: what the due one is measured against
    assert many["reclaim_expired_jobs"] >= few["reclaim_expired_jobs"] + 100, (few, many)


@pytest.fixture
def at_0013(bed: Bed) -> Iterator[str]:
    db = bed.new_database(migrated=False)
    schema.upgrade(db, "0013")
    try:
        yield db
    finally:
        bed.drop(db)


def test_0014_gives_the_leased_jobs_their_rows_in_place(at_0013: str) -> None:
    """Jobs leased under 0013 (one with a checkpoint) get their rows at the upgrade and are
    reclaimed through them once expired, while the previous release's producer and worker keep
    enqueueing, leasing and acking through it (none of their jobs lost or done twice); the
    other rows and the op log are untouched. Downgraded, the ring is gone."""
    with psycopg.connect(at_0013, autocommit=True) as conn:
        for i in range(4):
            conn.execute("SELECT pgqueue.enqueue_one('a', %s::bytea)", [f"j{i}".encode()])
        leases = conn.execute("SELECT id, lease_id FROM pgqueue.lease('a', 2, 1000, 1, 1)"
                              ).fetchall()
        (j0, l0), (j1, _l1) = leases
        checkpoint = {"last_completed_step": "fetch", "cursor_step": "load",
                      "cursor": "AAH+/w==", "schema_version": 2, "step_set_hash": "h1"}
        conn.execute("SELECT * FROM pgqueue.renew(%s, %s, %s, %s)",
                     ([j0], [l0], [1000], [Jsonb(checkpoint)]))
        mine = "SELECT id, state, lease_id, lease_expires_at, cursor FROM pgqueue.job " \
               "WHERE stream = 'a' ORDER BY id"
        ops = "SELECT * FROM pgqueue.op_log WHERE stream = 'a' ORDER BY seq"
        before, ops_before = conn.execute(mine).fetchall(), conn.execute(ops).fetchall()
    with OldClients(at_0013) as clients:
        wait_for(lambda: len(clients.acked) >= 50 or clients.errors, 60, "the old worker")
        schema.upgrade(at_0013, "0014")
        upgraded_at = len(clients.enqueued)
        wait_for(lambda: len(clients.enqueued) >= upgraded_at + 200 or clients.errors, 60,
                 "the old producer, after the upgrade")
    assert not clients.errors, clients.report()
    assert sorted(clients.acked) == sorted(clients.enqueued)  # each once
    with connection.connect(at_0013) as conn:
        assert conn.execute(mine).fetchall() == before
        assert conn.execute(ops).fetchall() == ops_before
        named = {int(r[0]) for r in conn.execute(
            "SELECT i FROM pgqueue.lease_expiry, unnest(job_ids) i").fetchall()}
        assert {j0, j1} <= named
        set_now(conn, dt.datetime.now(dt.timezone.utc) + 60 * S)
        assert sorted(r[0] for r in due(conn)) == sorted([j0, j1])
    schema.downgrade(at_0013, "0013")
    with psycopg.connect(at_0013) as conn:
        assert conn.execute("SELECT to_regclass('pgqueue.lease_expiry')").fetchone() == (None,)
