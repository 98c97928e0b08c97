"""The rings of per-second partitions (pgqueue.ready, pgqueue.job_count_delta): entries kept
for every ready job, past partitions truncated whole without ever queueing for their lock."""
from __future__ import annotations

import threading
import time
from typing import Any

import psycopg

import pgqueue
from pgqueue.db import connection
from tests.dbhelp import wait_for


def scalar(conn: psycopg.Connection[Any], sql: str, *args: object) -> Any:
    row = conn.execute(sql, args).fetchone()
    assert row is not None
    return row[0]


def slot_of(conn: psycopg.Connection[Any], job_id: int) -> int:
    return int(scalar(conn, "SELECT slot FROM pgqueue.ready WHERE job_id = %s", job_id))


def past(conn: psycopg.Connection[Any], slot: int) -> bool:
    """Whether `slot`'s period is two or more periods ago (recycling may empty it)."""
    return (int(scalar(conn, "SELECT pgqueue.ring_slot()")) - slot) % 8 >= 2


def test_a_few_ready_jobs_move_on_and_their_partition_is_emptied(q: pgqueue.Queue, dsn: str) -> None:
    ids = q.enqueue_many([pgqueue.NewJob(f"{i}", priority=i % 2) for i in range(5)])
    with connection.connect(dsn) as conn:
        slot = slot_of(conn, ids[0])
        wait_for(lambda: past(conn, slot), 30, "the entries' second to pass")
        part = f"pgqueue.ready_{slot}"
        assert scalar(conn, f"SELECT pg_relation_size('{part}')") > 0
        assert scalar(conn, "SELECT pgqueue.recycle_ready()") >= 1
        assert scalar(conn, f"SELECT pg_relation_size('{part}')") == 0  # truncated
        moved = conn.execute("SELECT job_id, slot FROM pgqueue.ready ORDER BY job_id").fetchall()
    assert [m[0] for m in moved] == ids and all(m[1] != slot for m in moved)
    leased = [held.job_id for held in q.lease(limit=10)]
    assert leased == [ids[1], ids[3], ids[0], ids[2], ids[4]]  # priority first, then id


def test_a_backlog_stays_in_its_partition_and_drains_through_leases(q: pgqueue.Queue,
                                                                   dsn: str) -> None:
    ids = q.enqueue_many([pgqueue.NewJob(b"x") for _ in range(1_200)])
    with connection.connect(dsn) as conn:
        slots = {r[0] for r in conn.execute("SELECT DISTINCT slot FROM pgqueue.ready")}
        assert slots
        wait_for(lambda: all(past(conn, s) for s in slots), 30, "the entries' periods to pass")
        conn.execute("SELECT pgqueue.recycle_ready()")
        assert scalar(conn, "SELECT count(*) FROM pgqueue.ready") == 1_200
    got: list[int] = []
    while batch := q.lease(limit=100):
        got.extend(held.job_id for held in batch)
    assert got == ids


def test_a_job_that_stops_being_ready_loses_its_entry(q: pgqueue.Queue, dsn: str) -> None:
    """Cancel, a later not_before by an operator, a priority change: no stale entry stays,
    and a job that is ready again gets one."""
    kept, cancelled = q.enqueue_many([pgqueue.NewJob(b"a"), pgqueue.NewJob(b"b")])
    assert q.cancel(cancelled) == "cancelled"
    with connection.connect(dsn) as conn:
        entries = conn.execute("SELECT job_id FROM pgqueue.ready ORDER BY job_id").fetchall()
        assert entries == [(kept,)]
    (lease,) = q.lease(limit=1)
    q.nack(lease, error="again", retry_in=0)  # ready again at once
    with connection.connect(dsn) as conn:
        conn.execute("SELECT pgqueue.promote_due('default')")
        entries = conn.execute("SELECT job_id FROM pgqueue.ready").fetchall()
    assert entries == [(kept,)]
    assert [held.job_id for held in q.lease(limit=5)] == [kept]


def test_recycling_waits_for_a_partition_lock_only_briefly(q: pgqueue.Queue, dsn: str) -> None:
    """A session holding the ring's partitions (a reader of pgqueue.ready in a transaction):
    recycling tries for their lock without queueing (NOWAIT), then queues for it at most 50 ms
    (a queued request makes every lease wait behind it) and leaves them, its request gone from
    the queue; once the reader is gone they are emptied."""
    q.enqueue_many([pgqueue.NewJob(b"x") for _ in range(20)])
    with connection.connect(dsn) as conn:
        slots = {r[0] for r in conn.execute("SELECT DISTINCT slot FROM pgqueue.ready")}
    assert slots
    while batch := q.lease(limit=20):
        q.ack_many(batch)
    with psycopg.connect(dsn) as reader, connection.connect(dsn) as runner, \
            connection.connect(dsn) as watch:
        reader.execute("SELECT count(*) FROM pgqueue.ready")  # holds every partition
        wait_for(lambda: all(past(watch, s) for s in slots), 30, "the entries' periods to pass")
        pid = scalar(runner, "SELECT pg_backend_pid()")
        done = threading.Event()
        queued: list[float] = []  # when the runner was seen waiting in the lock queue

        def recycle() -> None:
            try:
                assert scalar(runner, "SELECT pgqueue.recycle_ready()") == 0
            finally:
                done.set()

        thread = threading.Thread(target=recycle)
        began = time.monotonic()
        thread.start()
        while not done.is_set():
            if watch.execute("SELECT 1 FROM pg_locks WHERE pid = %s AND NOT granted",
                             [pid]).fetchone():
                queued.append(time.monotonic())
            time.sleep(0.001)
        thread.join()
        assert time.monotonic() - began < 2.0
        # in the lock queue once, briefly (50 ms, and this loop's own sampling)
        assert queued and queued[-1] - queued[0] < 0.5
        assert watch.execute("SELECT 1 FROM pg_locks WHERE pid = %s AND NOT granted",
                             [pid]).fetchone() is None
        sizes = scalar(watch, "SELECT sum(pg_relation_size(inhrelid)) FROM pg_inherits "
                              "WHERE inhparent = 'pgqueue.ready'::regclass")
        assert sizes > 0  # the reader kept them
        reader.rollback()
        assert scalar(runner, "SELECT pgqueue.recycle_ready()") >= 1


def test_a_transition_never_waits_for_an_entry_a_lease_holds(q: pgqueue.Queue, dsn: str) -> None:
    """A lease holds its entries (then waits for their job rows); a cancel of one of those
    jobs removes the job without waiting for the entry, or the two would deadlock."""
    (job_id,) = q.enqueue_many([pgqueue.NewJob(b"x")])
    with psycopg.connect(dsn) as lease_side, connection.connect(dsn) as conn:
        lease_side.execute("SELECT 1 FROM pgqueue.ready WHERE job_id = %s FOR UPDATE", [job_id])
        conn.execute("SET statement_timeout = '5s'")
        assert scalar(conn, "SELECT pgqueue.cancel(%s)", job_id) == "cancelled"
        lease_side.rollback()
    assert q.job(job_id) is None and q.lease(limit=5) == []
