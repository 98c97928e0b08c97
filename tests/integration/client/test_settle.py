"""Settle: ack (done, deleted) and nack (a failure: retry after exactly retry_in or the
stream's backoff, or dead), fenced by the lease id."""
from __future__ import annotations

import datetime as dt

import pytest

import pgqueue
from pgqueue.client import lease, reclaim, settle
from pgqueue.db import connection
from pgqueue.db.queries import Conn
from tests.asyncbridge import QueueApi
from tests.dbhelp import (
    T0,
    UTC,
    expire_leases,
    force_reclaim,
    op_counts,
    pinned,
    set_now,
    state_snapshot,
    wait_for,
)

pytestmark = [pytest.mark.layouts("single", "citus", "stock"),
              pytest.mark.flavours("sync", "async")]


def backoff_ms(conn: Conn, q: pgqueue.Queue, when: dt.datetime, job_id: int) -> int:
    """Lease the job at `when`, nack it without retry_in, and return its backoff in ms."""
    set_now(conn, when)
    [held] = lease.lease(conn, q.stream, 1, 30.0, 0, 0)
    assert held.job_id == job_id
    assert settle.nack(conn, held, "failed", None) in ("pending", "scheduled")
    info = q.job(job_id)
    assert info is not None and info.not_before is not None
    return round((info.not_before - when).total_seconds() * 1000)


# -- ack ----------------------------------------------------------------------------------------


def test_ack_deletes_the_job_and_logs_one_op(q: pgqueue.Queue, dsn: str) -> None:
    job_id = q.enqueue(b"x")
    [held] = q.lease()
    q.ack(held)
    assert q.job(job_id) is None
    assert q.lease() == []
    ops = q.op_log(job_id=job_id)
    assert [op.op for op in ops] == ["Ack", "Lease", "Enqueue"]
    assert ops[0].lease_id == held.lease_id
    assert op_counts(dsn) == {"Enqueue": 1, "Lease": 1, "Ack": 1}


def test_ack_many(q: pgqueue.Queue, dsn: str) -> None:
    ids = q.enqueue_many([pgqueue.NewJob(f"{i}") for i in range(4)])
    leases = q.lease(limit=4)
    assert q.ack_many(leases[:3]) == set(ids[:3])
    assert [q.job(i) is None for i in ids] == [True, True, True, False]
    with connection.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*), count(DISTINCT xid) FROM pgqueue.op_log WHERE op = 'Ack'"
        ).fetchone()
    assert row is not None and tuple(row) == (3, 1)
    # a stale lease in a batch is left out, the rest are acked
    assert q.ack_many([leases[0], leases[3]]) == {ids[3]}
    assert op_counts(dsn)["Ack"] == 4


def test_ack_of_an_expired_but_unreclaimed_lease_succeeds(dsn: str, queue_api: QueueApi) -> None:
    with queue_api(dsn) as q:
        job_id = q.enqueue(b"x")
    with pinned(dsn, T0) as conn:
        [held] = lease.lease(conn, "default", 1, 1.0, 0, 0)
    with pinned(dsn, T0 + dt.timedelta(hours=1)) as conn:
        assert settle.ack_many(conn, [held]) == {job_id}
        assert reclaim.reclaim_expired(conn) == 0
    with queue_api(dsn) as q:
        assert q.job(job_id) is None


def test_nack_of_an_expired_but_unreclaimed_lease_succeeds(q: pgqueue.Queue, dsn: str) -> None:
    job_id = q.enqueue(b"x")
    [held] = q.lease(visibility_timeout=0.01)
    info = q.job(job_id)
    assert info is not None and info.lease_expires_at is not None
    assert info.lease_expires_at <= held.expires_at
    expire_leases(dsn)  # expired (an hour ago), nobody reclaimed it
    assert q.nack(held, error="late", retry_in=0) is False
    after = q.job(job_id)
    assert after is not None and (after.state, after.attempts) == ("pending", 1)


# -- fencing ------------------------------------------------------------------------------------


@pytest.mark.parametrize("ended_by", ["reclaim", "ack", "nack", "nack-dead"])
@pytest.mark.parametrize("then", ["ack", "nack", "renew"])
def test_a_lease_that_ended_is_fenced(q: pgqueue.Queue, dsn: str, ended_by: str,
                                      then: str) -> None:
    job_id = q.enqueue(b"x", max_attempts=1 if ended_by == "nack-dead" else 25)
    [held] = q.lease()
    if ended_by == "reclaim":
        assert force_reclaim(dsn) == 1
    elif ended_by == "ack":
        q.ack(held)
    else:
        q.nack(held, error="first", retry_in=0)
    snapshot, ops, info = state_snapshot(dsn), op_counts(dsn), q.job(job_id)
    with pytest.raises(pgqueue.LeaseLost):
        if then == "ack":
            q.ack(held)
        elif then == "nack":
            q.nack(held, error="second", retry_in=0)
        else:
            q.renew(held, checkpoint=pgqueue.Checkpoint(cursor_step="x"))
    assert state_snapshot(dsn) == snapshot
    assert op_counts(dsn) == ops
    assert q.job(job_id) == info


@pytest.mark.parametrize("then", ["ack", "nack", "renew"])
def test_an_old_lease_cannot_touch_the_new_holders_job(q: pgqueue.Queue, dsn: str,
                                                       then: str) -> None:
    job_id = q.enqueue(b"x")
    [old] = q.lease()
    q.nack(old, retry_in=0)
    [new] = q.lease()
    assert new.job_id == job_id and new.lease_id != old.lease_id
    snapshot, ops = state_snapshot(dsn), op_counts(dsn)
    with pytest.raises(pgqueue.LeaseLost):
        if then == "ack":
            q.ack(old)
        elif then == "nack":
            q.nack(old)
        else:
            q.renew(old)
    assert state_snapshot(dsn) == snapshot
    assert op_counts(dsn) == ops
    q.ack(new)
    assert q.job(job_id) is None


def test_lease_lost_is_a_pgqueue_error() -> None:
    assert issubclass(pgqueue.LeaseLost, pgqueue.PgQueueError)


# -- nack ---------------------------------------------------------------------------------------


def test_nack_counts_a_failure_and_keeps_the_error(q: pgqueue.Queue, dsn: str) -> None:
    job_id = q.enqueue(b"x")
    [held] = q.lease()
    assert q.nack(held, error="boom: it broke", retry_in=0) is False
    info = q.job(job_id)
    assert info is not None
    assert (info.state, info.attempts, info.last_error, info.lease_id) == (
        "pending", 1, "boom: it broke", None)
    [again] = q.lease()
    assert q.nack(again, error="second", retry_in=0) is False
    info = q.job(job_id)
    assert info is not None and (info.attempts, info.last_error) == (2, "second")
    assert op_counts(dsn) == {"Enqueue": 1, "Lease": 2, "Nack": 2}


# one server only: it pins the clock (pgqueue.now), which on Citus is the coordinator's session's,
# not the streams' nodes'
@pytest.mark.layouts("single")
def test_nack_retry_in_is_exact(dsn: str, queue_api: QueueApi) -> None:
    with queue_api(dsn) as q:
        job_id = q.enqueue(b"x")
    failed_at = T0 + dt.timedelta(milliseconds=321)
    with pinned(dsn, T0) as conn:
        [held] = lease.lease(conn, "default", 1, 30.0, 0, 0)
        set_now(conn, failed_at)
        assert settle.nack(conn, held, "later", 2.5) == "scheduled"
    with queue_api(dsn) as q:
        info = q.job(job_id)
        assert info is not None
        assert (info.state, info.not_before) == ("scheduled", failed_at + dt.timedelta(seconds=2.5))
        [nack] = [op for op in q.op_log(job_id=job_id) if op.op == "Nack"]
    assert nack.body["not_before_ms"] == round(failed_at.timestamp() * 1000) + 2500
    assert nack.body["attempts"] == 1
    with pinned(dsn, failed_at + dt.timedelta(milliseconds=2499)) as conn:
        assert lease.lease(conn, "default", 1, 30.0, 0, 0) == []
        set_now(conn, failed_at + dt.timedelta(milliseconds=2500))
        assert [h.job_id for h in lease.lease(conn, "default", 1, 30.0, 0, 0)] == [job_id]


def test_queue_nack_retry_in_real_time(q: pgqueue.Queue) -> None:
    job_id = q.enqueue(b"x")
    [held] = q.lease()
    before = dt.datetime.now(UTC)
    q.nack(held, retry_in=dt.timedelta(seconds=30))
    after = dt.datetime.now(UTC)
    info = q.job(job_id)
    assert info is not None and info.not_before is not None
    assert info.state == "scheduled"
    slack = dt.timedelta(milliseconds=5)
    assert before + dt.timedelta(seconds=30) - slack <= info.not_before
    assert info.not_before <= after + dt.timedelta(seconds=30) + slack
    assert q.lease() == []


def test_nack_retry_in_zero_is_ready_at_once(q: pgqueue.Queue) -> None:
    job_id = q.enqueue(b"x")
    [held] = q.lease()
    q.nack(held, retry_in=0)
    info = q.job(job_id)
    assert info is not None and info.state == "pending"
    assert [h.job_id for h in q.lease()] == [job_id]


def test_short_retry_is_leasable_without_maintenance(q: pgqueue.Queue) -> None:
    job_id = q.enqueue(b"x")
    [held] = q.lease()
    q.nack(held, retry_in=0.1)
    assert q.lease() == []
    # leasable as soon as the database's clock passed the retry's time (on Citus the streams'
    # nodes' clock, which no test can pin)
    leased = wait_for(lambda: q.lease(), 10, "the retry to become leasable")
    assert [h.job_id for h in leased] == [job_id]


# one server only: it pins the clock (pgqueue.now), which on Citus is the coordinator's session's,
# not the streams' nodes'
@pytest.mark.layouts("single")
def test_default_backoff_is_about_two_to_the_attempts_seconds(dsn: str, queue_api: QueueApi) -> None:
    with queue_api(dsn) as q, pinned(dsn, T0) as conn:
        job_id = q.enqueue(b"x", max_attempts=0)
        for attempts in range(1, 6):
            when = T0 + dt.timedelta(days=attempts)
            got = backoff_ms(conn, q, when, job_id)
            nominal = 1000 * 2**attempts
            assert 0.75 * nominal <= got <= 1.25 * nominal, (attempts, got)


# one server only: it pins the clock (pgqueue.now), which on Citus is the coordinator's session's,
# not the streams' nodes'
@pytest.mark.layouts("single")
def test_default_backoff_has_jitter(dsn: str, queue_api: QueueApi) -> None:
    with queue_api(dsn) as q, pinned(dsn, T0) as conn:
        ids = q.enqueue_many([pgqueue.NewJob(f"{i}") for i in range(12)])
        got = {backoff_ms(conn, q, T0, job_id) for job_id in ids}
    assert all(1500 <= b <= 2500 for b in got)
    assert len(got) > 3


# one server only: it pins the clock (pgqueue.now), which on Citus is the coordinator's session's,
# not the streams' nodes'
@pytest.mark.layouts("single")
def test_retry_base_is_settable_per_stream(dsn: str, queue_api: QueueApi) -> None:
    with queue_api(dsn, stream="slow") as slow, queue_api(dsn) as q, \
            pinned(dsn, T0) as conn:
        slow.configure_stream(retry_base=10)
        slow_id = slow.enqueue(b"s")
        fast_id = q.enqueue(b"f")
        for n in range(1, 3):
            when = T0 + dt.timedelta(days=n)
            assert 0.75 * 10_000 * 2**n <= backoff_ms(conn, slow, when, slow_id) <= 1.25 * 10_000 * 2**n
            assert 0.75 * 1000 * 2**n <= backoff_ms(conn, q, when, fast_id) <= 1.25 * 1000 * 2**n


# one server only: it pins the clock (pgqueue.now), which on Citus is the coordinator's session's,
# not the streams' nodes'
@pytest.mark.layouts("single")
def test_retry_cap_is_settable_per_stream(dsn: str, queue_api: QueueApi) -> None:
    with queue_api(dsn) as q, pinned(dsn, T0) as conn:
        q.configure_stream(retry_cap=3)
        job_id = q.enqueue(b"x", max_attempts=0)
        first = backoff_ms(conn, q, T0 + dt.timedelta(days=1), job_id)  # 2 s +-25% < cap
        assert 1500 <= first <= 2500
        second = backoff_ms(conn, q, T0 + dt.timedelta(days=2), job_id)  # 4 s +-25% > cap
        assert second == 3000
        assert backoff_ms(conn, q, T0 + dt.timedelta(days=3), job_id) == 3000


# one server only: it pins the clock (pgqueue.now), which on Citus is the coordinator's session's,
# not the streams' nodes'
@pytest.mark.layouts("single")
def test_default_backoff_is_capped_at_one_hour(dsn: str, queue_api: QueueApi) -> None:
    with queue_api(dsn) as q, pinned(dsn, T0) as conn:
        job_id = q.enqueue(b"x", max_attempts=0)
        for _ in range(12):
            [held] = lease.lease(conn, "default", 1, 30.0, 0, 0)
            settle.nack(conn, held, None, 0)
        # 13th failure: 2^13 s * 0.75 > 1 h
        assert backoff_ms(conn, q, T0, job_id) == 3_600_000
        info = q.job(job_id)
        assert info is not None and info.attempts == 13


def test_nack_goes_dead_at_max_attempts(q: pgqueue.Queue, dsn: str) -> None:
    job_id = q.enqueue(b"x", max_attempts=3, dedup_key="k")
    for n in range(1, 3):
        [held] = q.lease()
        assert q.nack(held, error=f"fail {n}", retry_in=0) is False
    [held] = q.lease()
    assert held.attempts == 2
    q.renew(held, checkpoint=pgqueue.Checkpoint(last_completed_step="a", cursor=b"c"))
    assert q.nack(held, error="fail 3", retry_in=0) is True
    info = q.job(job_id)
    assert info is not None
    assert (info.state, info.attempts, info.last_error, info.max_attempts) == (
        "dead", 3, "fail 3", 3)
    assert info.died_at is not None
    assert (info.checkpoint.last_completed_step, info.checkpoint.cursor) == ("a", b"c")
    assert [d.job_id for d in q.dead_letters()] == [job_id]
    assert q.lease() == []
    with connection.connect(dsn) as conn:
        live = conn.execute("SELECT count(*) FROM pgqueue.job").fetchone()
    assert live is not None and live[0] == 0
    [nack] = [op for op in q.op_log(job_id=job_id, limit=1)]
    assert (nack.op, nack.body["state"], nack.body["attempts"]) == ("Nack", "dead", 3)


def test_max_attempts_one_dies_on_the_first_failure(q: pgqueue.Queue) -> None:
    job_id = q.enqueue(b"x", max_attempts=1)
    [held] = q.lease()
    assert q.nack(held, error="once", retry_in=60) is True
    info = q.job(job_id)
    assert info is not None and info.state == "dead"


def test_max_attempts_zero_never_dies(q: pgqueue.Queue) -> None:
    job_id = q.enqueue(b"x", max_attempts=0)
    for _ in range(30):
        [held] = q.lease()
        assert q.nack(held, retry_in=0) is False
    info = q.job(job_id)
    assert info is not None
    assert (info.state, info.attempts) == ("pending", 30)
    assert q.dead_letters() == []


def test_nack_of_a_stale_lease_logs_nothing(q: pgqueue.Queue, dsn: str) -> None:
    q.enqueue(b"x")
    [held] = q.lease()
    q.ack(held)
    ops = op_counts(dsn)
    with pytest.raises(pgqueue.LeaseLost):
        q.nack(held, error="late")
    assert op_counts(dsn) == ops


def test_nack_rejects_bad_arguments_and_changes_nothing(q: pgqueue.Queue, dsn: str) -> None:
    q.enqueue(b"x")
    [held] = q.lease()
    snapshot, ops = state_snapshot(dsn), op_counts(dsn)
    with pytest.raises(ValueError, match="retry_in"):
        q.nack(held, retry_in=-1)
    with pytest.raises(TypeError, match="error"):
        q.nack(held, error=123)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="retry_in"):
        q.nack(held, retry_in="soon")  # type: ignore[arg-type]
    assert state_snapshot(dsn) == snapshot
    assert op_counts(dsn) == ops


def test_concurrent_batched_acks_and_renewals_over_the_same_jobs_never_deadlock(
        q: pgqueue.Queue, dsn: str) -> None:
    """A worker's acker and renewer both write many of the same leased jobs in one statement
    each; the rows are locked in id order, so they wait for each other and never deadlock."""
    import random
    import threading

    q.enqueue_many([pgqueue.NewJob(b"x") for _ in range(3000)])
    held = q.lease(3000, visibility_timeout=60)
    errors: list[BaseException] = []
    stop = threading.Event()

    def renewer() -> None:
        with connection.connect(dsn) as conn:
            while not stop.is_set():
                batch = random.sample(held, 400)
                try:
                    lease.renew_many(conn, [(h, None, None) for h in batch])
                except pgqueue.PgQueueError as exc:
                    errors.append(exc)

    thread = threading.Thread(target=renewer)
    thread.start()
    try:
        pending = list(held)
        random.shuffle(pending)
        with connection.connect(dsn) as conn:
            while pending:
                batch, pending = pending[:150], pending[150:]
                random.shuffle(batch)
                try:
                    settle.ack_many(conn, batch)
                except pgqueue.PgQueueError as exc:
                    errors.append(exc)
    finally:
        stop.set()
        thread.join()
    assert errors == []
    assert q.job(held[0].job_id) is None and q.job(held[-1].job_id) is None
