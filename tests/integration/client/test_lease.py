"""Lease and renew: limits, the Lease record, order, attempts, renewal with checkpoints
(which ride the renewal UPDATE), and fencing of renewals."""
from __future__ import annotations

import datetime as dt
import threading

import psycopg
import pytest

import pgqueue
from pgqueue.client import enqueue, lease, observe, reclaim
from pgqueue.db import connection
from tests.asyncbridge import QueueApi
from tests.dbhelp import T0, UTC, force_reclaim, op_counts, pinned

pytestmark = [pytest.mark.layouts("single", "citus", "stock"),
              pytest.mark.flavours("sync", "async")]


def job_row(dsn: str, job_id: int) -> tuple[object, ...]:
    """Every column of a live job row, for "nothing changed" checks."""
    with connection.connect(dsn) as conn:
        row = conn.execute("SELECT * FROM pgqueue.job WHERE id = %s", (job_id,)).fetchone()
    assert row is not None
    return tuple(row)


def ms(when: dt.datetime) -> int:
    return round(when.timestamp() * 1000)


FULL = pgqueue.Checkpoint(last_completed_step="fetch", cursor_step="transform",
                          cursor=b"\x00\x01\xfe\xff", schema_version=3, step_set_hash="abc123")


# -- lease --------------------------------------------------------------------------------------


def test_lease_respects_limit(q: pgqueue.Queue) -> None:
    ids = q.enqueue_many([pgqueue.NewJob(f"{i}") for i in range(5)])
    first = q.lease(limit=3)
    assert [held.job_id for held in first] == ids[:3]
    second = q.lease(limit=10)
    assert [held.job_id for held in second] == ids[3:]
    assert q.lease(limit=10) == []


def test_lease_returns_every_field(q: pgqueue.Queue) -> None:
    job_id = q.enqueue(b"\x00payload", kind="k", priority=7, max_attempts=4)
    before = dt.datetime.now(UTC)
    [held] = q.lease(visibility_timeout=12.5, worker_node=3, worker_instance=9)
    after = dt.datetime.now(UTC)
    assert (held.job_id, held.stream, held.kind, held.payload, held.priority, held.attempts,
            held.max_attempts) == (job_id, "default", "k", b"\x00payload", 7, 0, 4)
    info = q.job(job_id)
    assert info is not None
    assert held.enqueued_at == info.enqueued_at
    assert before - dt.timedelta(seconds=1) + dt.timedelta(seconds=12.5) <= held.expires_at
    assert held.expires_at <= after + dt.timedelta(seconds=12.5)
    assert held.checkpoint == pgqueue.Checkpoint()
    assert held.visibility_timeout == pytest.approx(12.5)
    assert (info.state, info.lease_id, info.worker_node, info.worker_instance,
            info.lease_expires_at) == ("leased", held.lease_id, 3, 9, held.expires_at)


# one server only: it pins the clock (pgqueue.now), which on Citus is the coordinator's session's,
# not the streams' nodes'
@pytest.mark.layouts("single")
def test_lease_expiry_is_exactly_now_plus_visibility_timeout(dsn: str, queue_api: QueueApi) -> None:
    with queue_api(dsn) as q:
        q.enqueue(b"x")
    with pinned(dsn, T0) as conn:
        [held] = lease.lease(conn, "default", 1, 12.5, 0, 0)
    assert held.expires_at == T0 + dt.timedelta(seconds=12.5)


def test_every_lease_gets_a_new_lease_id(q: pgqueue.Queue, dsn: str) -> None:
    q.enqueue_many([pgqueue.NewJob(f"{i}", max_attempts=0) for i in range(3)])
    seen: list[int] = []
    for _ in range(3):
        leases = q.lease(limit=3)
        assert len(leases) == 3
        seen += [held.lease_id for held in leases]
        for held in leases:
            q.nack(held, retry_in=0)
    assert len(set(seen)) == len(seen) == 9


def test_lease_of_n_jobs_logs_n_lease_ops(q: pgqueue.Queue, dsn: str) -> None:
    q.enqueue_many([pgqueue.NewJob(f"{i}") for i in range(4)])
    leases = q.lease(limit=10, worker_node=1, worker_instance=2)
    assert op_counts(dsn) == {"Enqueue": 4, "Lease": 4}
    ops = [op for op in q.op_log(limit=100) if op.op == "Lease"]
    assert {(op.job_id, op.lease_id) for op in ops} == {(h.job_id, h.lease_id) for h in leases}
    for op in ops:
        held = next(h for h in leases if h.job_id == op.job_id)
        assert op.body["expires_at_ms"] == ms(held.expires_at)
        assert (op.body["worker_node"], op.body["worker_instance"]) == (1, 2)
    assert len({op.xid for op in ops}) == 1


def test_empty_lease_logs_nothing(q: pgqueue.Queue, dsn: str) -> None:
    assert q.lease(limit=5) == []
    assert op_counts(dsn) == {}


def test_a_leased_job_is_not_leased_again(q: pgqueue.Queue) -> None:
    q.enqueue(b"x")
    assert len(q.lease()) == 1
    assert q.lease() == []


def test_concurrent_leasers_never_share_a_job(dsn: str, queue_api: QueueApi) -> None:
    with queue_api(dsn) as q:
        ids = q.enqueue_many([pgqueue.NewJob(f"{i}") for i in range(300)])
    got: list[list[int]] = [[] for _ in range(6)]
    barrier = threading.Barrier(6)

    def run(n: int) -> None:
        with queue_api(dsn, pool_size=1) as mine:
            barrier.wait()
            while leases := mine.lease(limit=7):
                got[n] += [held.job_id for held in leases]

    workers = [threading.Thread(target=run, args=(n,)) for n in range(6)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(30)
    every = [job_id for part in got for job_id in part]
    assert sorted(every) == ids


def test_attempts_count_failures_not_leases(q: pgqueue.Queue, dsn: str) -> None:
    job_id = q.enqueue(b"x")
    [held] = q.lease()
    assert held.attempts == 0
    q.renew(held)
    info = q.job(job_id)
    assert info is not None and info.attempts == 0
    q.nack(held, retry_in=0)
    [again] = q.lease()
    assert again.attempts == 1
    info = q.job(job_id)
    assert info is not None and info.attempts == 1
    assert force_reclaim(dsn) == 1
    [third] = q.lease()
    assert third.attempts == 2


# one server only: it pins the clock (pgqueue.now), which on Citus is the coordinator's session's,
# not the streams' nodes'
@pytest.mark.layouts("single")
def test_due_scheduled_jobs_are_leased_by_priority(dsn: str) -> None:
    """Once their time has come, delayed jobs compete by priority like any ready job."""
    with pinned(dsn, T0) as conn:
        low, high = enqueue.enqueue_many(conn, "default", [
            pgqueue.NewJob(b"low", priority=0, delay=1),
            pgqueue.NewJob(b"high", priority=9, delay=2),
        ])
    with pinned(dsn, T0 + dt.timedelta(seconds=5)) as conn:
        assert [h.job_id for h in lease.lease(conn, "default", 1, 30.0, 0, 0)] == [high]
        assert [h.job_id for h in lease.lease(conn, "default", 1, 30.0, 0, 0)] == [low]


# one server only: it pins the clock (pgqueue.now), which on Citus is the coordinator's session's,
# not the streams' nodes'
@pytest.mark.layouts("single")
def test_due_scheduled_jobs_are_leased_fifo_by_id_within_a_priority(dsn: str) -> None:
    """Lease order is priority, then job id, whether the job waited for a not_before or not:
    lease(limit=1) takes the same job as the head of lease(limit=2)."""
    with pinned(dsn, T0) as conn:
        first, second = enqueue.enqueue_many(conn, "default", [
            pgqueue.NewJob(b"first", delay=2),
            pgqueue.NewJob(b"second", delay=1),
        ])
    with pinned(dsn, T0 + dt.timedelta(seconds=5)) as conn:
        assert [h.job_id for h in lease.lease(conn, "default", 1, 30.0, 0, 0)] == [first]
        assert [h.job_id for h in lease.lease(conn, "default", 1, 30.0, 0, 0)] == [second]


# one server only: it pins the clock (pgqueue.now), which on Citus is the coordinator's session's,
# not the streams' nodes'
@pytest.mark.layouts("single")
def test_due_scheduled_and_pending_jobs_mix_by_priority(dsn: str) -> None:
    with pinned(dsn, T0) as conn:
        ids = enqueue.enqueue_many(conn, "default", [
            pgqueue.NewJob(b"a", priority=1),
            pgqueue.NewJob(b"b", priority=5, delay=1),
            pgqueue.NewJob(b"c", priority=3),
            pgqueue.NewJob(b"d", priority=5, delay=100),
        ])
    with pinned(dsn, T0 + dt.timedelta(seconds=2)) as conn:
        got = [h.job_id for h in lease.lease(conn, "default", 10, 30.0, 0, 0)]
    assert got == [ids[1], ids[2], ids[0]]


# -- renew --------------------------------------------------------------------------------------


# one server only: it pins the clock (pgqueue.now), which on Citus is the coordinator's session's,
# not the streams' nodes'
@pytest.mark.layouts("single")
def test_renew_extends_the_lease(dsn: str, queue_api: QueueApi) -> None:
    with queue_api(dsn) as q:
        job_id = q.enqueue(b"x")
    with pinned(dsn, T0) as conn:
        [held] = lease.lease(conn, "default", 1, 10.0, 0, 0)
    with pinned(dsn, T0 + dt.timedelta(seconds=8)) as conn:
        # default: the lease's own visibility timeout
        assert lease.renew_many(conn, [(held, None, None)]) == {
            held.lease_id: T0 + dt.timedelta(seconds=18)}
        assert lease.renew_many(conn, [(held, 60.0, None)]) == {
            held.lease_id: T0 + dt.timedelta(seconds=68)}
    with queue_api(dsn) as q:
        info = q.job(job_id)
    assert info is not None
    assert info.lease_expires_at == T0 + dt.timedelta(seconds=68)
    assert info.state == "leased"


def test_queue_renew_returns_the_new_expiry(q: pgqueue.Queue) -> None:
    q.enqueue(b"x")
    [held] = q.lease(visibility_timeout=5)
    new = q.renew(held, visibility_timeout=100)
    assert new > held.expires_at + dt.timedelta(seconds=90)
    info = q.job(held.job_id)
    assert info is not None and info.lease_expires_at == new


# one server only: it pins the clock (pgqueue.now), which on Citus is the coordinator's session's,
# not the streams' nodes'
@pytest.mark.layouts("single")
def test_renew_writes_the_checkpoint_and_stamps_it(dsn: str, queue_api: QueueApi) -> None:
    with queue_api(dsn) as q:
        job_id = q.enqueue(b"x")
        [held] = q.lease()
    stamp = T0 + dt.timedelta(seconds=1.234)
    bogus = pgqueue.Checkpoint(last_completed_step="fetch", cursor_step="transform",
                               cursor=b"\x00\x01\xfe\xff", schema_version=3,
                               step_set_hash="abc123", updated_at_ms=42)
    with pinned(dsn, stamp) as conn:
        assert held.lease_id in lease.renew_many(conn, [(held, None, bogus)])
    with queue_api(dsn) as q:
        info = q.job(job_id)
    assert info is not None
    cp = info.checkpoint
    assert (cp.last_completed_step, cp.cursor_step, cp.cursor, cp.schema_version,
            cp.step_set_hash) == ("fetch", "transform", b"\x00\x01\xfe\xff", 3, "abc123")
    assert cp.updated_at_ms == ms(stamp)
    assert cp.crashes_by_step == {}


def test_renew_with_a_checkpoint_writes_every_worker_field(q: pgqueue.Queue) -> None:
    job_id = q.enqueue(b"x")
    [held] = q.lease()
    q.renew(held, checkpoint=FULL)
    q.renew(held, checkpoint=pgqueue.Checkpoint(cursor_step="load"))
    info = q.job(job_id)
    assert info is not None
    cp = info.checkpoint
    assert (cp.last_completed_step, cp.cursor_step, cp.cursor, cp.schema_version,
            cp.step_set_hash) == (None, "load", None, None, None)


# one server only: it pins the clock (pgqueue.now), which on Citus is the coordinator's session's,
# not the streams' nodes'
@pytest.mark.layouts("single")
def test_renew_without_checkpoint_keeps_the_stored_one(dsn: str, queue_api: QueueApi) -> None:
    with queue_api(dsn) as q:
        job_id = q.enqueue(b"x")
        [held] = q.lease()
    with pinned(dsn, T0) as conn:
        lease.renew_many(conn, [(held, None, FULL)])
    with pinned(dsn, T0 + dt.timedelta(seconds=5)) as conn:
        assert held.lease_id in lease.renew_many(conn, [(held, None, None)])
    with queue_api(dsn) as q:
        info = q.job(job_id)
    assert info is not None
    assert info.checkpoint == pgqueue.Checkpoint(
        last_completed_step="fetch", cursor_step="transform", cursor=b"\x00\x01\xfe\xff",
        schema_version=3, step_set_hash="abc123", updated_at_ms=ms(T0))
    assert info.lease_expires_at == T0 + dt.timedelta(seconds=35)


def test_renew_never_overwrites_crashes_by_step(q: pgqueue.Queue, dsn: str) -> None:
    job_id = q.enqueue(b"x")
    [held] = q.lease()
    q.renew(held, checkpoint=pgqueue.Checkpoint(cursor_step="s1"))
    assert force_reclaim(dsn) == 1
    [again] = q.lease()
    assert again.checkpoint.crashes_by_step == {"s1": 1}
    q.renew(again, checkpoint=pgqueue.Checkpoint(cursor_step="s2", crashes_by_step={"s1": 0,
                                                                                   "s2": 99}))
    q.renew(again, checkpoint=pgqueue.Checkpoint(cursor_step="s2", crashes_by_step={}))
    info = q.job(job_id)
    assert info is not None
    assert info.checkpoint.crashes_by_step == {"s1": 1}
    assert info.checkpoint.cursor_step == "s2"


@pytest.mark.parametrize("cursor", [b"", b"\x00", bytes(range(256)), b"\n" * 100, None])
def test_cursor_bytes_round_trip_exactly(q: pgqueue.Queue, cursor: bytes | None) -> None:
    job_id = q.enqueue(b"x")
    [held] = q.lease()
    q.renew(held, checkpoint=pgqueue.Checkpoint(cursor_step="s", cursor=cursor))
    info = q.job(job_id)
    assert info is not None
    assert info.checkpoint.cursor == cursor
    assert type(info.checkpoint.cursor) is type(cursor)
    q.nack(held, retry_in=0)
    [again] = q.lease()
    assert again.checkpoint.cursor == cursor


def test_a_later_lease_after_nack_returns_the_stored_checkpoint(q: pgqueue.Queue) -> None:
    q.enqueue(b"x")
    [held] = q.lease()
    q.renew(held, checkpoint=FULL)
    stored = q.job(held.job_id)
    assert stored is not None
    q.nack(held, error="boom", retry_in=0)
    [again] = q.lease()
    assert again.checkpoint == stored.checkpoint
    assert again.checkpoint.cursor == FULL.cursor


def test_a_later_lease_after_reclaim_returns_the_stored_checkpoint(
    q: pgqueue.Queue, dsn: str,
) -> None:
    q.enqueue(b"x")
    [held] = q.lease()
    q.renew(held, checkpoint=FULL)
    stored = q.job(held.job_id)
    assert stored is not None
    assert force_reclaim(dsn) == 1
    [again] = q.lease()
    assert again.checkpoint.cursor_step == "transform"
    assert again.checkpoint == pgqueue.Checkpoint(
        last_completed_step="fetch", cursor_step="transform", cursor=b"\x00\x01\xfe\xff",
        schema_version=3, step_set_hash="abc123",
        updated_at_ms=stored.checkpoint.updated_at_ms, crashes_by_step={"transform": 1})


# one server only: it pins the clock (pgqueue.now), which on Citus is the coordinator's session's,
# not the streams' nodes'
@pytest.mark.layouts("single")
def test_renew_logs_one_renew_op_with_the_whole_checkpoint(dsn: str, queue_api: QueueApi) -> None:
    with queue_api(dsn) as q:
        q.enqueue(b"x")
        [held] = q.lease()
    with pinned(dsn, T0) as conn:
        lease.renew_many(conn, [(held, 20.0, FULL)])
    with queue_api(dsn) as q:
        ops = q.op_log(job_id=held.job_id)
    assert [op.op for op in ops] == ["Renew", "Lease", "Enqueue"]
    renew = ops[0]
    assert renew.lease_id == held.lease_id
    assert renew.body["expires_at_ms"] == ms(T0) + 20_000
    cp = renew.body["checkpoint"]
    assert cp["cursor_step"] == "transform"
    assert cp["updated_at_ms"] == ms(T0)
    assert cp["cursor"] == "AAH+/w=="  # base64 of the cursor bytes


def test_renew_many_renews_many_in_one_call(q: pgqueue.Queue, dsn: str) -> None:
    q.enqueue_many([pgqueue.NewJob(f"{i}") for i in range(5)])
    leases = q.lease(limit=5, visibility_timeout=5)
    items = [(held, 100.0, pgqueue.Checkpoint(cursor=bytes([i])))
             for i, held in enumerate(leases)]
    renewed = q.renew_many(items)
    assert set(renewed) == {held.lease_id for held in leases}
    for i, held in enumerate(leases):
        assert renewed[held.lease_id] > held.expires_at + dt.timedelta(seconds=90)
        info = q.job(held.job_id)
        assert info is not None and info.checkpoint.cursor == bytes([i])
    with connection.connect(dsn) as conn:
        row = conn.execute("SELECT count(*), count(DISTINCT xid) FROM pgqueue.op_log "
                           "WHERE op = 'Renew'").fetchone()
    assert row is not None and tuple(row) == (5, 1)


def test_renew_many_skips_stale_leases_and_changes_nothing_for_them(
    q: pgqueue.Queue, dsn: str,
) -> None:
    q.enqueue_many([pgqueue.NewJob(b"a"), pgqueue.NewJob(b"b")])
    live, stale = q.lease(limit=2)
    q.nack(stale, retry_in=60)
    stale_row = job_row(dsn, stale.job_id)
    renewed = q.renew_many([(live, None, FULL), (stale, None, FULL)])
    assert set(renewed) == {live.lease_id}
    assert job_row(dsn, stale.job_id) == stale_row
    assert op_counts(dsn)["Renew"] == 1


# -- fencing of renewals ------------------------------------------------------------------------


def test_renew_with_a_stale_lease_raises_and_changes_nothing(q: pgqueue.Queue, dsn: str) -> None:
    q.enqueue(b"x")
    [old] = q.lease()
    assert force_reclaim(dsn) == 1
    [new] = q.lease()
    assert new.lease_id != old.lease_id
    row, ops = job_row(dsn, new.job_id), op_counts(dsn)
    with pytest.raises(pgqueue.LeaseLost):
        q.renew(old, visibility_timeout=999, checkpoint=FULL)
    assert job_row(dsn, new.job_id) == row
    assert op_counts(dsn) == ops
    # the current holder is unaffected
    q.renew(new)


@pytest.mark.parametrize("how", ["ack", "nack", "reclaim"])
def test_renew_after_the_lease_ended_raises(q: pgqueue.Queue, dsn: str, how: str) -> None:
    job_id = q.enqueue(b"x")
    [held] = q.lease()
    if how == "ack":
        q.ack(held)
    elif how == "nack":
        q.nack(held, retry_in=0)
    else:
        assert force_reclaim(dsn) == 1
    before = q.job(job_id)
    ops = op_counts(dsn)
    with pytest.raises(pgqueue.LeaseLost):
        q.renew(held, checkpoint=FULL)
    assert q.job(job_id) == before
    assert op_counts(dsn) == ops


# one server only: it pins the clock (pgqueue.now), which on Citus is the coordinator's session's,
# not the streams' nodes'
@pytest.mark.layouts("single")
def test_a_late_renewal_before_reclaim_still_counts(dsn: str, queue_api: QueueApi) -> None:
    with queue_api(dsn) as q:
        job_id = q.enqueue(b"x")
    with pinned(dsn, T0) as conn:
        [held] = lease.lease(conn, "default", 1, 10.0, 0, 0)
    # expired a minute ago, but nobody reclaimed it: the worker was only late
    with pinned(dsn, T0 + dt.timedelta(seconds=70)) as conn:
        assert lease.renew_many(conn, [(held, None, FULL)]) == {
            held.lease_id: T0 + dt.timedelta(seconds=80)}
        assert reclaim.reclaim_expired(conn) == 0
    with queue_api(dsn) as q:
        info = q.job(job_id)
    assert info is not None
    assert (info.state, info.lease_id, info.attempts) == ("leased", held.lease_id, 0)


def _index_scans(dsn: str, index: str) -> int:
    """Scans of an index, or of a partitioned index's partitions (`ready_%`: a LIKE pattern)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT sum(idx_scan), count(*) FROM pg_stat_user_indexes "
                           "WHERE indexrelname LIKE %s", [index]).fetchone()
        assert row is not None and row[1] > 0, index
        return int(row[0])


# one server only: it reads the plan of one server's lease
@pytest.mark.layouts("single")
def test_no_lease_plan_takes_the_oldest_ready_index_while_the_table_has_no_statistics(
        q: pgqueue.Queue, dsn: str, queue_api: QueueApi) -> None:
    """Before the job table was first analyzed (a new queue's first burst), with 20,000 jobs
    leased in another stream, the planner chose the oldest-ready index for the lease's
    ordered scan and sorted every ready job (4 ms instead of 0.4 for 100 of 10,000). Now only
    a query that names `not_before > '-infinity'` can use it: the gauges do, no lease does,
    on the plain path or the limited one."""
    with psycopg.connect(dsn, autocommit=True) as conn:  # no autoanalyze midway (a slow run)
        conn.execute("ALTER TABLE pgqueue.job SET (autovacuum_enabled = false)")
    with queue_api(dsn, stream="elsewhere") as other:
        for _ in range(20):
            other.enqueue_many([pgqueue.NewJob(b"h") for _ in range(1000)])
        while other.lease(limit=1000, visibility_timeout=3600):
            pass
    for _ in range(40):
        q.enqueue_many([pgqueue.NewJob(b"x", kind=f"k{i % 20}") for i in range(500)])
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT last_analyze IS NULL AND last_autoanalyze IS NULL "
                            "FROM pg_stat_user_tables WHERE relid = 'pgqueue.job'::regclass"
                            ).fetchone() == (True,)
        for limited in (False, True):
            if limited:
                q.configure_kind("k0", max_concurrency=100_000)
            for _ in range(8):  # past plpgsql's fifth call: its generic plans too
                leased = conn.execute("SELECT id FROM pgqueue.lease('default', 50, 30000, 0, 0)"
                                      ).fetchall()
                assert len(leased) == 50
        conn.execute("SELECT pg_stat_force_next_flush()")
        conn.execute("SELECT 1")  # the flush happens at the end of a statement
    assert _index_scans(dsn, "ready_%") > 0  # (the counts are flushed)
    assert _index_scans(dsn, "job_pending_since_idx") == 0
    with connection.connect(dsn) as conn:
        gauges = observe.gauges(conn)
        assert gauges.oldest_pending_age_seconds["default"] is not None
        conn.execute("SELECT pg_stat_force_next_flush()")
        conn.execute("SELECT 1")
    assert _index_scans(dsn, "job_pending_since_idx") > 0  # the gauges' probe
