"""The job table's file shrinks back once a held vacuum horizon is released (issue 26: "within
5 minutes after the pressure ends the tables are back to their clean size"): while the horizon
is held nothing is rewritten; once a vacuum removed what piled up, a heap many times what its
live rows need is rewritten (VACUUM FULL) with every live row, checkpoint and op as it was; a
busy lock makes the shrink give up within its lock timeout and try again later."""
from __future__ import annotations

import time
from collections.abc import Iterator

import psycopg
import pytest

import pgqueue
from pgqueue.client import enqueue, lease, settle
from pgqueue.db import connection, queries
from pgqueue.maintenance import maintain, vacuum
from tests.acceptance.clihelp import ok
from tests.dbhelp import job_rows_deleted, wait_for

PAYLOAD = b"p" * 200


def churn(conn: queries.Conn, n: int) -> None:
    """n jobs of another stream through enqueue, lease and ack, in batches of 500; then 20
    jobs that stay, written last: under a held horizon they land at the end of the file, as a
    busy queue's backlog does, so a plain vacuum cannot cut the file short behind them. Then
    the statistics the passes go by show the dead rows."""
    before = job_rows_deleted(conn)
    for _ in range(n // 500):
        enqueue.enqueue_many(conn, "churn", [pgqueue.NewJob(PAYLOAD) for _ in range(500)])
        while leases := lease.lease(conn, "churn", 500, 30.0, 0, 0):
            settle.ack_many(conn, leases)
    enqueue.enqueue_many(conn, "tail", [pgqueue.NewJob(PAYLOAD) for _ in range(20)])
    wait_for(lambda: job_rows_deleted(conn) >= before + n // 500 * 500, 10,
             "the table statistics to show the churn")


def one(conn: queries.Conn, sql: str) -> int:
    row = conn.execute(sql).fetchone()
    assert row is not None
    return int(row[0])


def heap_bytes(conn: queries.Conn) -> int:
    return one(conn, "SELECT pg_relation_size('pgqueue.job')")


def rows(conn: queries.Conn) -> tuple[list[tuple[object, ...]], int]:
    """Every live job row, whole, and the op log's length."""
    jobs = conn.execute("SELECT * FROM pgqueue.job ORDER BY id").fetchall()
    return jobs, one(conn, "SELECT count(*) FROM pgqueue.op_log")


@pytest.fixture
def conn(dsn: str) -> Iterator[queries.Conn]:
    with connection.connect(dsn) as c:
        # autovacuum would race the passes for the same dead rows: the passes vacuum here
        c.execute("ALTER TABLE pgqueue.job SET (autovacuum_enabled = false)")
        yield c


@pytest.fixture
def live(dsn: str) -> pgqueue.Lease:
    """Jobs that stay through it all: pending ones, and one leased with a checkpoint."""
    with pgqueue.Queue(dsn, stream="kept") as q:
        q.enqueue_many([pgqueue.NewJob(f"kept {i}", priority=i % 3) for i in range(40)])
        [held] = q.lease(limit=1, visibility_timeout=600)
        q.renew(held, checkpoint=pgqueue.Checkpoint(last_completed_step="a", cursor_step="b",
                                                    cursor=b"\x00\xff", schema_version=2,
                                                    step_set_hash="h"))
    return held


def test_a_file_grown_under_a_held_horizon_shrinks_once_it_is_released(
        dsn: str, conn: queries.Conn, live: pgqueue.Lease,
        monkeypatch: pytest.MonkeyPatch) -> None:
    clean = heap_bytes(conn)
    with psycopg.connect(dsn) as holder:
        holder.execute("SELECT pg_current_xact_id()")  # idle in transaction from here
        churn(conn, 30_000)
        grown = heap_bytes(conn)
        assert grown >= 4 * vacuum.SHRINK_MIN_BYTES // 2, (clean, grown)
        before = rows(conn)
        # a vacuum removes nothing while the horizon is held: nothing is rewritten either
        with monkeypatch.context() as m:
            # held however briefly: the holder is not left to age past SHRINK_HELD_SECONDS
            m.setattr(vacuum, "SHRINK_HELD_SECONDS", 0.0)
            first = maintain.run_pass(conn)
        assert first.vacuumed and first.shrunk_bytes == 0
        assert heap_bytes(conn) == grown
        holder.rollback()  # the horizon moves on
    # the next vacuum (once its back-off is over) removes the dead rows, then the file shrinks
    shrunk = wait_for(lambda: maintain.run_pass(conn).shrunk_bytes, 30, "the shrink")
    after = heap_bytes(conn)
    assert after < grown // 8 and shrunk == grown - after
    assert rows(conn) == before  # every live row, checkpoint and op as it was
    with pgqueue.Queue(dsn, stream="kept") as q:
        q.ack(live)  # its lease still fences: the rewrite kept lease id and state
        assert len(q.lease(limit=100)) == 39
    # nothing left to give back: the next passes leave the table alone
    assert maintain.run_pass(conn).shrunk_bytes == 0


def test_a_steady_queue_table_is_never_rewritten(conn: queries.Conn) -> None:
    churn(conn, 6_000)  # one vacuum interval's churn: dead rows, nothing held
    result = maintain.run_pass(conn)
    assert result.vacuumed and result.shrunk_bytes == 0


def test_a_busy_lock_makes_the_shrink_give_up_and_try_again_later(
        dsn: str, conn: queries.Conn, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vacuum, "SHRINK_RETRY_SECONDS", 0.5)
    with psycopg.connect(dsn) as holder:
        holder.execute("SELECT pg_current_xact_id()")
        churn(conn, 30_000)
        holder.rollback()
    with psycopg.connect(dsn) as writer:
        # a transaction that wrote a job and stays open holds the table's ROW EXCLUSIVE lock
        writer.execute("LOCK TABLE pgqueue.job IN ROW EXCLUSIVE MODE")
        def vacuumed() -> maintain.PassResult | None:
            result = maintain.run_pass(conn)
            return result if result.vacuumed else None

        result = wait_for(vacuumed, 30, "a vacuum after the horizon moved on")
        assert result.shrunk_bytes == 0  # it gave up on the lock (100 ms), the pass went on
        waiting = one(conn, """
            SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
            WHERE c.relname = 'job' AND NOT l.granted""")
        assert waiting == 0  # and left no lock request queued in front of the transitions
        writer.commit()
    with psycopg.connect(dsn) as holder:
        # a horizon held again before the retry: a rewrite now would copy every row version
        # the holder keeps, under the lock, for nothing; the retry waits for it to end
        holder.execute("SELECT pg_current_xact_id()")
        churn(conn, 6_000)
        # the retry is due (its time is the process's monotonic clock: moved, not waited for)
        memory = vacuum._memory(conn)
        assert memory.shrink_at is not None
        memory.shrink_at = time.monotonic()
        grown = heap_bytes(conn)
        with monkeypatch.context() as m:
            # held however briefly: the holder is not left to age past SHRINK_HELD_SECONDS
            m.setattr(vacuum, "SHRINK_HELD_SECONDS", 0.0)
            assert [maintain.run_pass(conn).shrunk_bytes for _ in range(3)] == [0, 0, 0]
        assert heap_bytes(conn) == grown
        holder.rollback()
    grown = heap_bytes(conn)
    shrunk = wait_for(lambda: maintain.run_pass(conn).shrunk_bytes, 30, "the shrink, retried")
    assert shrunk > 0 and heap_bytes(conn) < grown // 8
    out = ok(dsn, "maintain", "--once").stdout
    assert "shrank" not in out  # said only when it did


def test_the_cli_pass_says_what_it_gave_back(dsn: str, conn: queries.Conn) -> None:
    with psycopg.connect(dsn) as holder:
        holder.execute("SELECT pg_current_xact_id()")
        churn(conn, 30_000)
        holder.rollback()
    out = ok(dsn, "maintain", "--once").stdout
    assert "shrank pgqueue.job by " in out and " MB" in out, out
