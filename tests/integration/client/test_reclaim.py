"""Reclaim: expired leases of every stream go back to pending (or dead, or quarantined),
counting a failure and a crash against the step in progress; the expiry is re-checked, so a
renewal that commits first wins."""
from __future__ import annotations

import datetime as dt
import threading

import psycopg
import pytest

import pgqueue
from pgqueue.client import lease, reclaim
from tests.asyncbridge import QueueApi
from tests.dbhelp import T0, lease_long_ago, op_counts, pinned, set_now

LATER = T0 + dt.timedelta(hours=1)


def crash(dsn: str, stream: str = "default",
          checkpoint: pgqueue.Checkpoint | None = None) -> pgqueue.Lease:
    """Lease one job at T0 (writing `checkpoint`), let the lease expire, reclaim at LATER."""
    with pinned(dsn, T0) as conn:
        [held] = lease.lease(conn, stream, 1, 10.0, 4, 2)
        if checkpoint is not None:
            assert held.lease_id in lease.renew_many(conn, [(held, None, checkpoint)])
        set_now(conn, LATER)
        assert reclaim.reclaim_expired(conn) == 1
    return held


def info_of(q: pgqueue.Queue, job_id: int) -> pgqueue.JobInfo:
    info = q.job(job_id)
    assert info is not None
    return info


# -- what reclaim does --------------------------------------------------------------------------


def test_reclaim_returns_expired_leases_of_every_stream(dsn: str, queue_api: QueueApi) -> None:
    with queue_api(dsn, stream="a") as qa, queue_api(dsn, stream="b") as qb:
        a1, a2 = qa.enqueue_many([pgqueue.NewJob(b"a1"), pgqueue.NewJob(b"a2")])
        b1 = qb.enqueue(b"b1")
        keep = qb.enqueue(b"keep")
        lease_long_ago(dsn, "a", 2)
        lease_long_ago(dsn, "b", 1)
        [kept] = qb.lease(limit=1, visibility_timeout=30)
        assert qa.reclaim_expired() == 3
        for job_id in (a1, a2, b1):
            info = info_of(qa, job_id)
            assert (info.state, info.attempts, info.lease_id, info.lease_expires_at) == (
                "pending", 1, None, None)
        assert info_of(qa, keep).state == "leased"
        assert qa.reclaim_expired() == 0
        qb.ack(kept)
        assert sorted(h.job_id for h in qa.lease(limit=5)) == [a1, a2]
        assert [h.job_id for h in qb.lease(limit=5)] == [b1]


def test_reclaim_only_takes_leases_past_their_expiry(dsn: str, queue_api: QueueApi) -> None:
    with queue_api(dsn) as q:
        job_id = q.enqueue(b"x")
    with pinned(dsn, T0) as conn:
        lease.lease(conn, "default", 1, 10.0, 0, 0)
        set_now(conn, T0 + dt.timedelta(seconds=10))  # expires_at == now: not yet past
        assert reclaim.reclaim_expired(conn) == 0
        set_now(conn, T0 + dt.timedelta(seconds=10, milliseconds=1))
        assert reclaim.reclaim_expired(conn) == 1
    with queue_api(dsn) as q:
        assert info_of(q, job_id).state == "pending"


def test_reclaim_counts_a_failure_and_a_crash_of_a_plain_job(q: pgqueue.Queue, dsn: str) -> None:
    job_id = q.enqueue(b"x")
    held = crash(dsn)
    info = info_of(q, job_id)
    assert (info.state, info.attempts) == ("pending", 1)
    assert info.checkpoint.crashes_by_step == {"": 1}
    assert info.last_error is not None and str(held.lease_id) in info.last_error
    crash(dsn)
    info = info_of(q, job_id)
    assert (info.attempts, info.checkpoint.crashes_by_step) == (2, {"": 2})


def test_reclaim_counts_the_crash_against_the_step_in_progress(q: pgqueue.Queue,
                                                                dsn: str) -> None:
    q.configure_stream(quarantine_after=5)
    job_id = q.enqueue(b"x")
    crash(dsn, checkpoint=pgqueue.Checkpoint(last_completed_step="a", cursor_step="b",
                                             cursor=b"7"))
    crash(dsn, checkpoint=pgqueue.Checkpoint(last_completed_step="a", cursor_step="b",
                                             cursor=b"9"))
    crash(dsn, checkpoint=pgqueue.Checkpoint(last_completed_step="b", cursor_step="c"))
    crash(dsn)  # renewal without checkpoint: still in step c
    info = info_of(q, job_id)
    assert info.checkpoint.crashes_by_step == {"b": 2, "c": 2}
    assert (info.state, info.attempts) == ("pending", 4)
    # the checkpoint survives reclaim
    assert (info.checkpoint.last_completed_step, info.checkpoint.cursor_step) == ("b", "c")


def test_reclaim_logs_one_op_per_job_with_resulting_values(q: pgqueue.Queue, dsn: str) -> None:
    ids = q.enqueue_many([pgqueue.NewJob(f"{i}") for i in range(3)])
    leases = lease_long_ago(dsn, "default", 3)
    before = op_counts(dsn)
    assert q.reclaim_expired() == 3
    after = op_counts(dsn)
    assert after.get("Reclaim", 0) - before.get("Reclaim", 0) == 3
    assert {k: v for k, v in after.items() if k != "Reclaim"} == before
    reclaims = [op for op in q.op_log(limit=3)]
    assert {op.op for op in reclaims} == {"Reclaim"}
    assert {(op.job_id, op.lease_id) for op in reclaims} == {(h.job_id, h.lease_id)
                                                             for h in leases}
    for op in reclaims:
        assert (op.body["state"], op.body["attempts"]) == ("pending", 1)
        assert op.body["crashes_by_step"] == {"": 1}
    assert sorted(op.job_id or 0 for op in reclaims) == ids
    assert q.reclaim_expired() == 0
    assert op_counts(dsn) == after


def test_reclaim_takes_more_than_one_batch(q: pgqueue.Queue, dsn: str) -> None:
    q.enqueue_many([pgqueue.NewJob(f"{i}") for i in range(7)])
    with pinned(dsn, T0) as conn:
        lease.lease(conn, "default", 7, 1.0, 0, 0)
        set_now(conn, LATER)
        assert reclaim.reclaim_expired(conn, batch=2) == 7
    assert op_counts(dsn)["Reclaim"] == 7


# -- quarantine and dead ------------------------------------------------------------------------


def test_quarantined_at_the_default_threshold_of_three(q: pgqueue.Queue) -> None:
    job_id = q.enqueue(b"x", max_attempts=0)
    dsn = q.dsn
    crash(dsn)
    crash(dsn)
    assert info_of(q, job_id).state == "pending"
    crash(dsn)
    info = info_of(q, job_id)
    assert (info.state, info.attempts, info.checkpoint.crashes_by_step) == (
        "quarantined", 3, {"": 3})
    assert info.state_reason
    assert q.lease() == []
    assert q.dead_letters() == []
    with pinned(dsn, LATER + dt.timedelta(days=1)) as conn:
        assert reclaim.reclaim_expired(conn) == 0


def test_quarantine_threshold_counts_per_step(q: pgqueue.Queue, dsn: str) -> None:
    job_id = q.enqueue(b"x", max_attempts=0)
    crash(dsn, checkpoint=pgqueue.Checkpoint(cursor_step="a"))
    crash(dsn)
    crash(dsn, checkpoint=pgqueue.Checkpoint(cursor_step="b"))
    crash(dsn)
    info = info_of(q, job_id)
    assert (info.state, info.checkpoint.crashes_by_step) == ("pending", {"a": 2, "b": 2})
    crash(dsn)
    info = info_of(q, job_id)
    assert (info.state, info.checkpoint.crashes_by_step) == ("quarantined", {"a": 2, "b": 3})


@pytest.mark.parametrize("threshold", [1, 2, 5])
def test_quarantine_threshold_is_settable_per_stream(dsn: str, threshold: int, queue_api: QueueApi) -> None:
    with queue_api(dsn, stream="fragile") as q, queue_api(dsn) as other:
        q.configure_stream(quarantine_after=threshold)
        job_id = q.enqueue(b"x", max_attempts=0)
        other_id = other.enqueue(b"y", max_attempts=0)
        for _ in range(threshold - 1):
            crash(dsn, stream="fragile")
            assert info_of(q, job_id).state == "pending"
        crash(dsn, stream="fragile")
        assert info_of(q, job_id).state == "quarantined"
        # the default stream keeps the default threshold
        if threshold < 3:
            for _ in range(threshold):
                crash(dsn)
            assert info_of(q, other_id).state == "pending"


def test_quarantine_wins_when_both_limits_are_reached_at_once(q: pgqueue.Queue,
                                                              dsn: str) -> None:
    job_id = q.enqueue(b"x", max_attempts=3)
    for _ in range(3):
        crash(dsn)
    info = info_of(q, job_id)
    assert (info.state, info.attempts) == ("quarantined", 3)
    assert q.dead_letters() == []
    [op] = q.op_log(job_id=job_id, limit=1)
    assert (op.op, op.body["state"]) == ("Reclaim", "quarantined")


def test_reclaim_moves_a_job_to_the_dead_letters_by_the_attempts_rule(q: pgqueue.Queue,
                                                                        dsn: str) -> None:
    job_id = q.enqueue(b"x", max_attempts=2)
    crash(dsn)
    assert info_of(q, job_id).state == "pending"
    crash(dsn, checkpoint=pgqueue.Checkpoint(cursor_step="s", cursor=b"\x01"))
    info = info_of(q, job_id)
    assert (info.state, info.attempts) == ("dead", 2)
    assert info.checkpoint.crashes_by_step == {"": 1, "s": 1}
    assert info.checkpoint.cursor == b"\x01"
    assert info.last_error is not None and "expired" in info.last_error
    assert [d.job_id for d in q.dead_letters()] == [job_id]
    [op] = q.op_log(job_id=job_id, limit=1)
    assert (op.op, op.body["state"], op.body["attempts"]) == ("Reclaim", "dead", 2)


def test_max_attempts_zero_is_never_dead_by_reclaim(q: pgqueue.Queue, dsn: str) -> None:
    q.configure_stream(quarantine_after=100)
    job_id = q.enqueue(b"x", max_attempts=0)
    for _ in range(8):
        crash(dsn)
    info = info_of(q, job_id)
    assert (info.state, info.attempts) == ("pending", 8)


# -- fencing: the expiry is re-checked ----------------------------------------------------------


def test_a_renewal_before_reclaim_wins(q: pgqueue.Queue, dsn: str) -> None:
    job_id = q.enqueue(b"x")
    [held] = lease_long_ago(dsn, "default")  # expired, not reclaimed yet
    q.renew(held, visibility_timeout=30)
    ops = op_counts(dsn)
    assert q.reclaim_expired() == 0
    assert op_counts(dsn) == ops
    info = info_of(q, job_id)
    assert (info.state, info.lease_id, info.attempts) == ("leased", held.lease_id, 0)
    q.ack(held)


def test_a_renewal_in_flight_is_not_reclaimed_under_it(dsn: str, queue_api: QueueApi) -> None:
    with queue_api(dsn) as q:
        job_id = q.enqueue(b"x")
    with pinned(dsn, T0) as conn:
        [held] = lease.lease(conn, "default", 1, 10.0, 0, 0)
    reclaim_at = T0 + dt.timedelta(seconds=30)  # past the old expiry, before the renewed one
    with psycopg.connect(dsn, autocommit=False) as renewer:
        set_now(renewer, T0 + dt.timedelta(seconds=5))
        renewer.commit()
        assert held.lease_id in lease.renew_many(renewer, [(held, 60.0, None)])
        # the renewal has not committed yet
        with pinned(dsn, reclaim_at) as conn:
            assert reclaim.reclaim_expired(conn) == 0
        renewer.commit()
    with pinned(dsn, reclaim_at) as conn:
        assert reclaim.reclaim_expired(conn) == 0
    with queue_api(dsn) as q:
        info = info_of(q, job_id)
        assert (info.state, info.attempts, info.lease_expires_at) == (
            "leased", 0, T0 + dt.timedelta(seconds=65))
        q.ack(held)
        assert q.job(job_id) is None


def test_reclaimed_lease_is_fenced_and_the_job_leasable_again(q: pgqueue.Queue,
                                                              dsn: str) -> None:
    job_id = q.enqueue(b"x")
    [old] = lease_long_ago(dsn, "default")
    assert q.reclaim_expired() == 1
    with pytest.raises(pgqueue.LeaseLost):
        q.ack(old)
    [new] = q.lease()
    assert (new.job_id, new.attempts) == (job_id, 1)
    assert new.checkpoint.crashes_by_step == {"": 1}
    q.ack(new)


def test_concurrent_reclaimers_reclaim_each_lease_once(dsn: str, queue_api: QueueApi) -> None:
    with queue_api(dsn) as q:
        ids = q.enqueue_many([pgqueue.NewJob(f"{i}") for i in range(300)])
    with pinned(dsn, T0) as conn:
        assert len(lease.lease(conn, "default", 300, 1.0, 0, 0)) == 300
    counts: list[int] = []
    barrier = threading.Barrier(4)

    def run() -> None:
        with pinned(dsn, LATER) as conn:
            barrier.wait()
            counts.append(reclaim.reclaim_expired(conn, batch=20))

    workers = [threading.Thread(target=run) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(30)
    assert sum(counts) == 300
    assert op_counts(dsn)["Reclaim"] == 300
    with queue_api(dsn) as q:
        assert {(j.state, j.attempts) for j in q.jobs(limit=1000)} == {("pending", 1)}
        assert sorted(j.job_id for j in q.jobs(limit=1000)) == ids
