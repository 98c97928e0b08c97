"""Leasing while something holds the vacuum horizon back (a session idle in transaction, a
long report): what a lease reads must not grow with the jobs handled since."""
from __future__ import annotations

import json
import time
from collections.abc import Iterator

import psycopg
import pytest

import pgqueue
from pgqueue.db import connection
from tests.dbhelp import op_counts

STREAM = "held"


@pytest.fixture
def held_xid(dsn: str) -> Iterator[int]:
    """A session holding a transaction id, idle in transaction, for the whole test: vacuum
    and index hints can remove nothing written meanwhile."""
    with psycopg.connect(dsn) as conn:
        xid = conn.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()
        assert xid is not None
        yield int(xid[0])
        conn.rollback()


def churn(q: pgqueue.Queue, jobs: int) -> None:
    """Enqueue, lease and ack `jobs` jobs, 200 at a time."""
    for _ in range(jobs // 200):
        q.enqueue_many([pgqueue.NewJob(b"x") for _ in range(200)])
        while leased := q.lease(limit=50, visibility_timeout=60):
            q.ack_many(leased)


def recycle_past(dsn: str) -> None:
    """Run the maintenance step that truncates the ready entries' past partitions until the
    clock has moved three partitions on from now (entries of the last second are left alone)
    and a pass after that found nothing left to truncate: what a maintenance pass does every
    second."""
    deadline = time.monotonic() + 60
    with connection.connect(dsn) as conn:
        start = int(conn.execute("SELECT pgqueue.ring_slot()").fetchone()[0])  # type: ignore[index]
        while time.monotonic() < deadline:
            now = int(conn.execute("SELECT pgqueue.ring_slot()").fetchone()[0])  # type: ignore[index]
            conn.execute("SELECT pgqueue.recycle_ready()")
            if (now - start) % 8 >= 3:
                sizes = conn.execute(
                    "SELECT count(*) FILTER (WHERE pg_relation_size(c.oid) > 0) FROM pg_inherits i "
                    "JOIN pg_class c ON c.oid = i.inhrelid "
                    "WHERE i.inhparent = 'pgqueue.ready'::regclass").fetchone()
                assert sizes is not None
                if sizes[0] <= 3:  # the last second's, this one's and the next's at most
                    return
            time.sleep(0.05)  # polling the clock, with a deadline
    raise AssertionError("the ready partitions were never recycled")


def lease_buffers(dsn: str) -> int:
    """Shared buffers one lease of 10 jobs reads (hits and reads, the function's own
    statements included), with 10 jobs ready, in a session that leased before (its plans
    made: a session's first lease reads the catalog)."""
    with pgqueue.Queue(dsn, stream=STREAM) as q:
        q.enqueue_many([pgqueue.NewJob(b"y") for _ in range(20)])
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT * FROM pgqueue.lease(%s, 10, 60000, 0, 0)", [STREAM])
        row = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "
            "SELECT * FROM pgqueue.lease(%s, 10, 60000, 0, 0)", [STREAM]).fetchone()
        assert row is not None
        plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
        top = plan[0]["Plan"]
        assert top["Actual Rows"] == 10
        return int(top["Shared Hit Blocks"]) + int(top["Shared Read Blocks"])


def test_a_lease_reads_no_more_however_many_jobs_passed_since_the_horizon_was_held(
        dsn: str, held_xid: int) -> None:
    """With a transaction id held, 2,000 jobs handled, then 12,000 more: a lease reads about
    the same number of buffers after both (before the ready entries, the lease's ordered scan
    of a partial index of job stepped over the entry of every job leased since: 2,000 buffers
    after a minute at 400 jobs/s, and growing)."""
    with pgqueue.Queue(dsn, stream=STREAM) as q:
        churn(q, 2_000)
        recycle_past(dsn)
        after_few = lease_buffers(dsn)
        leased = q.lease(limit=100, visibility_timeout=60)
        q.ack_many(leased)
        churn(q, 12_000)
        recycle_past(dsn)
        after_many = lease_buffers(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        # the horizon really was held all along: the session still holds its transaction id
        held = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_xid::text = %s "
                            "AND state = 'idle in transaction'", [str(held_xid)]).fetchone()
        assert held == (1,)
    # (about 300 either way, as many as with nothing held: writing the rows and the ops; the
    # partial index's scan read 1,900 after the 14,000)
    assert after_many <= after_few + 60, (after_few, after_many)
    assert after_many < 600, (after_few, after_many)
    assert op_counts(dsn).get("Ack", 0) >= 14_000
