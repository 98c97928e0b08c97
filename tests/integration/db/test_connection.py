"""A call whose reply is lost runs at most once: re-sent only when that cannot apply it twice.

A proxy (tests/proxy.py) forwards the statement to the server, which runs and commits it, and
drops the connection before the reply reaches the client.
"""
from __future__ import annotations

from collections.abc import Iterator

import pytest

import pgqueue
from pgqueue.db import connection
from tests.dbhelp import op_counts, wait_for
from tests.pgbed import Bed
from tests.proxy import LossyProxy, lossy_proxy


@pytest.fixture
def proxy(bed: Bed) -> Iterator[LossyProxy]:
    with lossy_proxy(bed.server_dsn) as p:
        yield p


@pytest.fixture
def pq(dsn: str, proxy: LossyProxy) -> Iterator[pgqueue.Queue]:
    """A Queue whose connections go through the proxy."""
    with pgqueue.Queue(proxy.dsn(dsn)) as q:
        yield q


def job_rows(dsn: str) -> list[tuple[int, str, int | None]]:
    with connection.connect(dsn) as conn:
        return [(int(r[0]), str(r[1]), r[2]) for r in conn.execute(
            "SELECT id, state, lease_id FROM pgqueue.job ORDER BY id")]


def test_an_enqueue_whose_reply_was_lost_makes_one_job(dsn: str, proxy: LossyProxy,
                                                       pq: pgqueue.Queue) -> None:
    proxy.arm(b"pgqueue.enqueue_one(")
    job_id = pq.enqueue("once")
    assert proxy.dropped.is_set()  # the first attempt's reply really was lost
    assert [r[0] for r in job_rows(dsn)] == [job_id]
    assert op_counts(dsn) == {"Enqueue": 1}


def test_a_batch_whose_reply_was_lost_returns_its_first_ids(dsn: str, proxy: LossyProxy,
                                                            pq: pgqueue.Queue) -> None:
    holder = pq.enqueue("held", dedup_key="k1")
    proxy.arm(b"pgqueue.enqueue(")
    ids = pq.enqueue_many([pgqueue.NewJob("a"), pgqueue.NewJob("b", dedup_key="k1"),
                           pgqueue.NewJob("c", dedup_key="k2"), pgqueue.NewJob("d"),
                           pgqueue.NewJob("e", dedup_key="k2")])
    assert proxy.dropped.is_set()
    rows = [r[0] for r in job_rows(dsn)]
    assert len(rows) == 4  # holder + a, c, d: nothing inserted twice
    assert ids[1] == holder and ids[2] == ids[4] and ids[0] < ids[2] < ids[3]
    assert sorted({holder, *ids}) == rows
    assert op_counts(dsn) == {"Enqueue": 4}


def test_a_lease_whose_reply_was_lost_returns_the_same_leases(dsn: str, proxy: LossyProxy,
                                                              pq: pgqueue.Queue) -> None:
    ids = pq.enqueue_many([pgqueue.NewJob(str(i)) for i in range(5)])
    proxy.arm(b"pgqueue.lease(")
    leases = pq.lease(limit=2)
    assert proxy.dropped.is_set()
    assert [ls.job_id for ls in leases] == ids[:2]
    rows = job_rows(dsn)
    leased = [(r[0], r[2]) for r in rows if r[1] == "leased"]
    assert leased == [(ls.job_id, ls.lease_id) for ls in leases]  # no orphaned second set
    assert op_counts(dsn)["Lease"] == 2
    for ls in leases:
        pq.ack(ls)


def test_an_ack_and_a_nack_whose_replies_were_lost_report_what_they_did(
        dsn: str, proxy: LossyProxy, pq: pgqueue.Queue) -> None:
    pq.enqueue("a")
    pq.enqueue("b", max_attempts=1)
    first, second = pq.lease(limit=2)
    proxy.arm(b"pgqueue.ack(")
    pq.ack(first)  # committed; its reply lost: no LeaseLost for an ack that happened
    assert proxy.dropped.is_set()
    proxy.arm(b"pgqueue.nack(")
    assert pq.nack(second, error="boom") is True  # dead: its one attempt is used up
    assert proxy.dropped.is_set()
    assert op_counts(dsn) == {"Enqueue": 2, "Lease": 2, "Ack": 1, "Nack": 1}
    assert [j.job_id for j in pq.dead_letters()] == [second.job_id]


def test_a_call_that_is_not_safe_to_repeat_says_it_may_have_committed(
        dsn: str, proxy: LossyProxy, pq: pgqueue.Queue) -> None:
    job_id = pq.enqueue("x")
    proxy.arm(b"pgqueue.cancel(")
    with pytest.raises(pgqueue.ConnectionFailed, match="may have committed") as lost:
        pq.cancel(job_id)
    assert lost.value.may_have_committed
    assert op_counts(dsn).get("Cancel") == 1  # it did commit, once
    assert pq.job(job_id) is None


def test_a_worker_whose_lease_reply_was_lost_runs_those_jobs_without_a_reclaim(
        dsn: str, proxy: LossyProxy) -> None:
    import threading

    from tests.dbhelp import wait_for

    ran: list[int] = []
    app = pgqueue.App()

    @app.job("work")
    def work(job: pgqueue.JobContext) -> None:
        ran.append(job.job_id)

    with pgqueue.Queue(dsn) as q:
        ids = q.enqueue_many([pgqueue.NewJob(str(i), kind="work") for i in range(5)])
    proxy.arm(b"pgqueue.lease(")
    worker = pgqueue.Worker(app, proxy.dsn(dsn), concurrency=8, visibility_timeout=1.0,
                            maintenance_interval=0.2, poll_interval=0.1)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        wait_for(lambda: op_counts(dsn).get("Ack", 0) == 5, 30, "every job acked")
    finally:
        worker.stop()
        thread.join(timeout=30)
    assert proxy.dropped.is_set()
    assert sorted(ran) == ids  # each once
    counts = op_counts(dsn)
    assert counts["Lease"] == 5 and "Reclaim" not in counts  # the lost reply's leases were used


@pytest.mark.parametrize("first_commits", [True, False])
def test_a_resent_enqueue_waits_for_a_first_attempt_still_running(
        dsn: str, first_commits: bool) -> None:
    """The first attempt's backend can outlive its client; the re-sent call (same token) waits
    for it on the token's lock (pgqueue.request_begin), then returns its id, or enqueues if it
    rolled back: one job either way."""
    import threading
    import uuid

    from pgqueue.client import enqueue

    token = uuid.uuid4()
    with connection.connect(dsn, autocommit=False) as first, connection.connect(dsn) as second:
        first_id = enqueue.enqueue_one(first, "default", pgqueue.NewJob("x"), request=token)
        got: list[int] = []
        thread = threading.Thread(target=lambda: got.append(enqueue.enqueue_one(
            second, "default", pgqueue.NewJob("x"), request=token, resent=True)))
        thread.start()
        with connection.connect(dsn) as watcher:
            wait_for(lambda: watcher.execute(
                "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s",
                (second.info.backend_pid,)).fetchone() == (True,), 10, "the re-send to wait")
        if first_commits:
            first.commit()
        else:
            first.rollback()
        thread.join(timeout=10)
    assert len(got) == 1
    assert [r[0] for r in job_rows(dsn)] == got
    assert (got[0] == first_id) is first_commits
    assert op_counts(dsn) == {"Enqueue": 1}


def test_a_first_attempt_arriving_after_its_resend_committed_is_refused(dsn: str) -> None:
    """The other order: the re-send ran first (its first attempt was still on the wire). The
    late first attempt fails on the token's unique index instead of enqueueing again."""
    import uuid

    from pgqueue.client import enqueue

    token = uuid.uuid4()
    with connection.connect(dsn) as conn:
        job_id = enqueue.enqueue_one(conn, "default", pgqueue.NewJob("x"), request=token,
                                     resent=True)
        with pytest.raises(pgqueue.PgQueueError, match=r"op_log_\d+_request_idx"):
            enqueue.enqueue_one(conn, "default", pgqueue.NewJob("x"), request=token)
    assert [r[0] for r in job_rows(dsn)] == [job_id]
    assert op_counts(dsn) == {"Enqueue": 1}
