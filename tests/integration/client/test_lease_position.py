"""A lease that starts where its caller's last lease ended (LeasePosition): the order it
leases in, what it leaves for the next look from the start, what it reads under a held vacuum
horizon, and revision 0015 under the previous release's clients."""
from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

import pgqueue
from pgqueue.client import enqueue, lease, settle
from pgqueue.client.position import LeasePosition
from pgqueue.db import connection, schema
from tests.dbhelp import wait_for
from tests.integration.db.test_ready_upgrade import OldClients
from tests.pgbed import Bed

STREAM = "positioned"


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def take(conn: connection.Conn, limit: int, position: LeasePosition | None) -> list[int]:
    return [held.job_id for held in lease.lease(conn, STREAM, limit, 60, 0, 0,
                                                position=position)]


def add(conn: connection.Conn, n: int, priority: int = 0) -> list[int]:
    return enqueue.enqueue_many(conn, STREAM, [pgqueue.NewJob(b"x", priority=priority)
                                               for _ in range(n)])


def test_leases_go_on_in_order_from_the_position(dsn: str) -> None:
    """Each lease starts after the last job of the one before; a higher priority enqueued
    meanwhile comes first, a lower one after the position's priority runs out."""
    clock = Clock()
    position = LeasePosition(clock=clock)
    with connection.connect(dsn) as conn:
        jobs = add(conn, 6, priority=5)
        assert position.after() is None
        assert take(conn, 2, position) == jobs[:2]
        assert position.after() == (5, jobs[1])
        assert take(conn, 2, position) == jobs[2:4]
        (urgent,) = add(conn, 1, priority=9)
        (later,) = add(conn, 1, priority=1)
        assert take(conn, 2, position) == [urgent, jobs[4]]
        assert position.after() == (5, jobs[4])
        assert take(conn, 5, position) == [jobs[5], later]
        assert position.after() == (1, later)
        assert take(conn, 5, position) == []
        assert position.after() == (1, later)  # an empty lease keeps it


def test_a_job_ready_again_behind_the_position_waits_for_the_next_look_from_the_start(
        dsn: str) -> None:
    """A job nacked back to ready keeps its id, so it is behind the position: leases after the
    position pass it over while the position is trusted; the first lease RESCAN_SECONDS after
    the last look from the start takes it, first, as its id says."""
    clock = Clock()
    position = LeasePosition(rescan_seconds=1.0, clock=clock)
    with connection.connect(dsn) as conn:
        jobs = add(conn, 5)
        (first,) = lease.lease(conn, STREAM, 1, 60, 0, 0, position=position)
        assert first.job_id == jobs[0]
        assert settle.nack(conn, first, error="again", retry_in=0) is not None
        conn.execute("SELECT pgqueue.promote_due(%s)", [STREAM])
        assert take(conn, 2, position) == jobs[1:3]  # after the position: not the nacked one
        clock.now += 1.0
        assert position.after() is None
        assert take(conn, 2, position) == [jobs[0], jobs[3]]
        assert take(conn, 5, position) == [jobs[4]]


def test_the_entries_of_a_lease_that_rolled_back_wait_for_the_next_look_from_the_start(
        dsn: str) -> None:
    """A lease after the position passes over every entry another lease has touched without
    trying its lock (the entry's xmax is set); one whose lease rolled back keeps that mark, so
    it waits, as a job behind the position does, for the next lease from the start, which
    takes it in its order."""
    clock = Clock()
    position = LeasePosition(rescan_seconds=1.0, clock=clock)
    call = ("SELECT id FROM pgqueue.lease(%s, 2, 60000, 0, 0, NULL, false, NULL, "
            "0::smallint, %s)")
    with connection.connect(dsn) as conn:
        jobs = add(conn, 6)
        assert take(conn, 1, position) == jobs[:1]
        with psycopg.connect(dsn) as other:  # a positioned lease that fails and rolls back
            assert [r[0] for r in other.execute(call, [STREAM, jobs[0]])] == jobs[1:3]
            other.rollback()
        assert take(conn, 2, position) == jobs[3:5]
        clock.now += 1.0
        assert position.after() is None
        assert take(conn, 5, position) == [jobs[1], jobs[2], jobs[5]]


def test_a_lease_in_flight_is_passed_over_and_nothing_is_taken_twice(dsn: str) -> None:
    """While another lease holds its entries (not committed yet), a lease after the same
    position takes the next ones; once that lease commits, its jobs are leased once."""
    call = ("SELECT id FROM pgqueue.lease(%s, 3, 60000, 0, 0, NULL, false, NULL, "
            "0::smallint, %s)")
    with connection.connect(dsn) as conn:
        jobs = add(conn, 7)
        with psycopg.connect(dsn) as first, psycopg.connect(dsn) as second:
            held = [r[0] for r in first.execute(call, [STREAM, jobs[0] - 1])]
            assert held == jobs[:3]
            assert [r[0] for r in second.execute(call, [STREAM, jobs[0] - 1])] == jobs[3:6]
            first.commit()
            second.commit()
        assert take(conn, 10, None) == jobs[6:]


def test_a_stream_with_limited_kinds_leases_from_the_start(dsn: str) -> None:
    """The limits count each kind from its first ready job: the position is not used there,
    so a job behind it is leased at once."""
    with pgqueue.Queue(dsn, stream=STREAM) as q:
        q.configure_kind("capped", max_concurrency=10)
    with connection.connect(dsn) as conn:
        ids = enqueue.enqueue_many(conn, STREAM, [pgqueue.NewJob(b"x", kind="capped")
                                                  for _ in range(3)])
        position = LeasePosition(clock=Clock())
        (first,) = lease.lease(conn, STREAM, 1, 60, 0, 0, position=position)
        assert settle.nack(conn, first, error="again", retry_in=0) is not None
        conn.execute("SELECT pgqueue.promote_due(%s)", [STREAM])
        assert take(conn, 3, position) == ids


def test_a_position_of_another_type_is_refused(dsn: str) -> None:
    with connection.connect(dsn) as conn:
        with pytest.raises(TypeError, match="position must be a"):
            lease.lease(conn, STREAM, 1, 60, 0, 0, position=(0, 1))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rescan_seconds must be >= 0"):
        LeasePosition(rescan_seconds=-1)


@pytest.fixture
def held_xid(dsn: str) -> Iterator[None]:
    """A session holding a transaction id, idle in transaction: nothing written meanwhile can
    be removed from the ready entries' index."""
    with psycopg.connect(dsn) as conn:
        conn.execute("SELECT pg_current_xact_id()")
        yield
        conn.rollback()


def entries_read(dsn: str, after: tuple[int, int] | None) -> int:
    """Index entries of pgqueue.ready a lease of 10 reads (its scans' own count, dead entries
    included), from the start or after `after`, in a transaction rolled back (so both find
    the same entries)."""
    call = "SELECT * FROM pgqueue.lease(%s, 10, 60000, 0, 0, NULL, false, NULL, %s, %s)"
    args = [STREAM, None if after is None else after[0], None if after is None else after[1]]
    with psycopg.connect(dsn) as conn:
        assert len(conn.execute(call, args).fetchall()) == 10
        row = conn.execute(
            "SELECT sum(pg_stat_get_xact_tuples_returned(i.indexrelid)) FROM pg_index i "
            "JOIN pg_inherits p ON p.inhrelid = i.indrelid "
            "WHERE p.inhparent = 'pgqueue.ready'::regclass").fetchone()
        conn.rollback()
    assert row is not None
    return int(row[0])


def test_under_a_held_horizon_a_lease_after_the_position_skips_the_jobs_leased_before(
        dsn: str, held_xid: None) -> None:
    """6,000 jobs leased and acked with a transaction id held leave their entries in the
    index (nothing can remove them, and no maintenance truncates their partitions here): a
    lease from the start steps over all of them, one after the position where the last lease
    ended reads the 10 it takes and little more."""
    position = LeasePosition(rescan_seconds=3600)
    with connection.connect(dsn) as conn:
        for _ in range(30):
            add(conn, 200)
            while held := lease.lease(conn, STREAM, 50, 60, 0, 0, position=position):
                settle.ack_many(conn, held)
        add(conn, 20)
    after = position.after()
    assert after is not None
    from_start, positioned = entries_read(dsn, None), entries_read(dsn, after)
    assert from_start >= 6_000, (positioned, from_start)
    assert positioned <= 20, (positioned, from_start)


@pytest.fixture
def at_0014(bed: Bed) -> Iterator[str]:
    db = bed.new_database(migrated=False)
    schema.upgrade(db, "0014")
    try:
        yield db
    finally:
        bed.drop(db)


def test_0015_keeps_the_previous_releases_lease_call_working(at_0014: str) -> None:
    """The previous release's producer and worker (its SQL calls, prepared by then) run
    through the upgrade and the downgrade: none of their jobs is lost or leased twice; the
    new arguments exist only on 0015."""
    new_call = "SELECT * FROM pgqueue.lease('c', 1, 1000, 0, 0, NULL, false, NULL, 0::smallint, 0)"
    with OldClients(at_0014) as clients:
        wait_for(lambda: len(clients.acked) >= 50 or bool(clients.errors), 60, "the old worker")
        schema.upgrade(at_0014, "0015")
        upgraded_at = len(clients.acked)
        wait_for(lambda: len(clients.acked) >= upgraded_at + 100 or bool(clients.errors), 60,
                 "the old worker, after the upgrade")
        with psycopg.connect(at_0014, autocommit=True) as conn:
            assert conn.execute(new_call).fetchall() == []
        schema.downgrade(at_0014, "0014")
        downgraded_at = len(clients.acked)
        wait_for(lambda: len(clients.acked) >= downgraded_at + 100 or bool(clients.errors), 60,
                 "the old worker, after the downgrade")
    assert not clients.errors, clients.report()
    assert sorted(clients.acked) == sorted(clients.enqueued)  # each once
    with psycopg.connect(at_0014, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.UndefinedFunction):
            conn.execute(new_call)
