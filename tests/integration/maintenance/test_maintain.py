"""Maintenance passes: reclaim, vacuum of the hot table, op-log pruning, election, idempotence."""
from __future__ import annotations

import threading
import time

import psycopg
import pytest

import pgqueue
from pgqueue.client import enqueue, lease, settle
from pgqueue.db import connection, queries
from pgqueue.maintenance import maintain, vacuum
from pgqueue.replicas import replica
from tests.dbhelp import job_rows_deleted, lease_long_ago, wait_for


def _churn(conn: queries.Conn, n: int) -> None:
    """n jobs through enqueue, lease and ack, in batches of 500; then the statistics the
    passes go by show their dead rows."""
    before = job_rows_deleted(conn)
    for _ in range(n // 500):
        enqueue.enqueue_many(conn, "default", [pgqueue.NewJob(b"x") for _ in range(500)])
        while leases := lease.lease(conn, "default", 500, 30.0, 0, 0):
            settle.ack_many(conn, leases)
    wait_for(lambda: job_rows_deleted(conn) >= before + n // 500 * 500, 10,
             "the table statistics to show the churn")


def test_pass_vacuums_the_job_table_once_dead_rows_pile_up(dsn: str) -> None:
    with connection.connect(dsn) as conn:
        # Autovacuum would race the pass for the same dead rows (CI once saw it vacuum the table
        # half a second before the check); this database is the test's own copy.
        conn.execute("ALTER TABLE pgqueue.job SET (autovacuum_enabled = false)")
        _churn(conn, 6000)
        before = queries.fetch_one(conn, "job_dead_tuples")
        assert before is not None and before["dead"] >= maintain.VACUUM_DEAD_ROWS
        result = maintain.run_pass(conn)
        assert result.vacuumed

        def cleaned() -> bool:  # a VACUUM writes its counts to the statistics as it ends
            after = queries.fetch_one(conn, "job_dead_tuples")
            return after is not None and after["dead"] < before["dead"]

        wait_for(cleaned, 10, "the statistics to show the vacuum's work")
        # with nothing to clean up, the next pass does not vacuum again
        assert not maintain.run_pass(conn).vacuumed


def test_a_held_vacuum_horizon_makes_the_pass_wait_for_it_instead_of_vacuuming_every_time(
        dsn: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a session idle in transaction (its xid holds the horizon) a vacuum can remove
    nothing that died since: after one vacuum the passes wait for the horizon to move, naming
    the session that holds it once (not the sessions whose snapshots merely saw it running),
    instead of vacuuming on every pass (182 vacuums in 180 s, issue 26); once the session
    ends, the next pass vacuums and cleans up."""
    monkeypatch.setattr(vacuum, "VACUUM_HELD_SECONDS", 0.2)  # held that long: not a moment's
    with connection.connect(dsn) as conn, psycopg.connect(dsn) as holder:
        conn.execute("ALTER TABLE pgqueue.job SET (autovacuum_enabled = false)")
        holder.execute("SET application_name = 'forgotten-begin'")
        xid = holder.execute("SELECT pg_current_xact_id()::text").fetchone()  # idle in
        assert xid is not None  # transaction from here
        pid = holder.info.backend_pid
        _churn(conn, 6000)
        stats = queries.fetch_one(conn, "job_dead_tuples")
        assert stats is not None and stats["dead"] >= maintain.VACUUM_DEAD_ROWS
        assert maintain.run_pass(conn).vacuumed  # the first: what died before may go
        # two reports whose snapshots saw the holder's transaction running: their horizon is
        # its xid too, but they are not what holds it
        readers = [psycopg.connect(dsn) for _ in range(2)]
        for reader in readers:
            reader.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            reader.execute("SELECT count(*) FROM pgqueue.job")
        with caplog.at_level("WARNING", logger="pgqueue.maintain"):
            vacuums = [maintain.run_pass(conn).vacuumed for _ in range(5)]
        for reader in readers:
            reader.close()
        assert vacuums == [False] * 5  # not again while the horizon stays
        warned = [r.getMessage() for r in caplog.records if "holds back" in r.getMessage()]
        assert len(warned) == 1, warned  # said once
        assert f"session {pid} (forgotten-begin, idle in transaction" in warned[0]
        holder.rollback()  # the horizon moves on
        assert maintain.run_pass(conn).vacuumed  # at once
        # with a horizon past the holder's xid: what died under it may go now
        vacuumed_at = vacuum._memory(conn).horizon
        assert vacuumed_at is not None and vacuum._moved(int(xid[0]) % 2**32, vacuumed_at)

        def cleaned() -> bool:
            # and it went: at once, unless another test's walsender on the shared server held
            # every database's horizon for that moment (CI once saw it); then the next passes
            # vacuum again, the horizon having moved, until the rows are gone
            after = queries.fetch_one(conn, "job_dead_tuples")
            if after is not None and 2 * after["dead"] < stats["dead"]:
                return True
            maintain.run_pass(conn)
            return False

        wait_for(cleaned, 30, "a vacuum to remove what died under the held horizon")


def test_a_horizon_that_moves_lets_every_vacuum_run(dsn: str) -> None:
    """Short transactions only: the horizon moves between passes, so a pass vacuums whenever
    dead rows piled up again (no wait); a transaction begun since the last vacuum, still open,
    holds no vacuum back (what died before it began may go)."""
    with connection.connect(dsn) as conn, psycopg.connect(dsn) as young:
        conn.execute("ALTER TABLE pgqueue.job SET (autovacuum_enabled = false)")
        for _ in range(2):
            _churn(conn, 6000)
            assert maintain.run_pass(conn).vacuumed
        young.execute("SELECT pg_current_xact_id()")  # begun a moment ago
        _churn(conn, 6000)
        assert maintain.run_pass(conn).vacuumed
        young.rollback()


def test_a_vacuum_that_takes_long_never_holds_up_reclaim(dsn: str, q: pgqueue.Queue) -> None:
    """A Maintainer vacuums on a connection of its own: while its vacuum waits (here on a
    lock another session holds; after a long held horizon, on 50,000 dead rows, it took 4 s),
    its passes go on reclaiming expired leases."""
    with connection.connect(dsn) as conn, psycopg.connect(dsn) as blocker:
        conn.execute("ALTER TABLE pgqueue.job SET (autovacuum_enabled = false)")
        _churn(conn, 6000)
        blocker.execute("LOCK TABLE pgqueue.job IN SHARE UPDATE EXCLUSIVE MODE")  # as VACUUM
        runner = maintain.Maintainer(dsn, interval=0.1)
        thread = threading.Thread(target=runner.run, daemon=True)
        thread.start()
        try:
            deadline = time.monotonic() + 30
            while not conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND query LIKE 'VACUUM%%'").fetchone() == (1,):
                assert time.monotonic() < deadline, "the vacuum never started"
                time.sleep(0.05)
            job_id = q.enqueue(b"x")
            (held,) = lease_long_ago(dsn, "default")  # expired: the next pass reclaims it
            assert held.job_id == job_id
            while (info := q.job(job_id)) is None or info.state != "pending":
                assert time.monotonic() < deadline, "no reclaim while the vacuum waited"
                time.sleep(0.05)
            assert runner.vacuums == 0  # still waiting
            blocker.rollback()
            while runner.vacuums == 0:
                assert time.monotonic() < deadline, "the vacuum never finished"
                time.sleep(0.05)
        finally:
            runner.stop()
            thread.join(timeout=30)
        assert not thread.is_alive()


def test_pass_is_idempotent_and_reclaims_expired_leases(q: pgqueue.Queue, dsn: str) -> None:
    q.enqueue_many([pgqueue.NewJob(b"x") for _ in range(3)])
    leases = lease_long_ago(dsn, "default", 3)
    with connection.connect(dsn) as a, connection.connect(dsn) as b:
        first = maintain.run_pass(a)
        second = maintain.run_pass(b)
    assert first.reclaimed == 3 and second.reclaimed == 0
    assert {q.job(x.job_id).state for x in leases} == {"pending"}  # type: ignore[union-attr]


def test_only_one_maintainer_is_elected(dsn: str) -> None:
    one = maintain.Maintainer(dsn)
    two = maintain.Maintainer(dsn)
    try:
        assert one.tick() is not None and one.elected
        assert two.tick() is None and not two.elected
        one._drop_connection()  # the holder's session ends: the lock is free again
        deadline = time.monotonic() + 10  # once the server has ended that backend
        while two.tick() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert two.elected
    finally:
        one._drop_connection()
        two._drop_connection()


def op_log_reads(conn: queries.Conn) -> tuple[int, int]:
    """(rows read by sequential scans, rows fetched through indexes) of pgqueue.op_log so far,
    this connection's own included."""
    conn.execute("SELECT pg_stat_force_next_flush()")  # flushed as that statement commits
    row = conn.execute("SELECT coalesce(seq_tup_read, 0), coalesce(idx_tup_fetch, 0)"
                       " FROM pg_stat_user_tables"
                       " WHERE schemaname = 'pgqueue' AND relname = 'op_log'").fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def prune(conn: queries.Conn, keep: float) -> int:
    return replica.prune_batches(conn, keep=keep, stale_after=86400.0, batch=10_000, wait=0)


def test_a_pass_with_nothing_old_to_prune_reads_one_op_not_the_log(dsn: str) -> None:
    with connection.connect(dsn) as conn:
        enqueue.enqueue_many(conn, "s", [pgqueue.NewJob(b"x") for _ in range(2000)])
        settle.ack_many(conn, lease.lease(conn, "s", 1000, 60.0, 0, 0))
        seq_before, idx_before = op_log_reads(conn)
        assert maintain.run_pass(conn).ops_pruned == 0  # a week is kept
        seq_after, idx_after = op_log_reads(conn)
        assert seq_after == seq_before, "a sequential scan read the op log"
        assert idx_after - idx_before <= 1, f"{idx_after - idx_before} ops read through an index"
        assert prune(conn, keep=0) == 4000  # and the same call does prune when ops are old
        assert conn.execute("SELECT count(*) FROM pgqueue.op_log").fetchone() == (0,)


def test_prune_removes_only_the_old_prefix_of_the_log(dsn: str) -> None:
    """An old op behind a younger one (a long transaction's) waits until that one is old too,
    so pruned_through is exact: every op up to it is gone, none after it."""
    with connection.connect(dsn) as conn:
        enqueue.enqueue_many(conn, "s", [pgqueue.NewJob(b"x") for _ in range(100)])
        first = conn.execute("SELECT min(seq) FROM pgqueue.op_log").fetchone()
        assert first is not None
        young = first[0] + 50
        conn.execute("UPDATE pgqueue.op_log SET at = at - interval '8 days' WHERE seq <> %s",
                     [young])
        assert prune(conn, keep=7 * 86400.0) == 50
        left = conn.execute("SELECT min(seq), count(*) FROM pgqueue.op_log").fetchone()
        assert left == (young, 50)
        node = conn.execute("SELECT pruned_through FROM pgqueue.node").fetchone()
        assert node == (young - 1,)
        conn.execute("UPDATE pgqueue.op_log SET at = at - interval '8 days' WHERE seq = %s",
                     [young])
        assert prune(conn, keep=7 * 86400.0) == 50
        assert conn.execute("SELECT pruned_through FROM pgqueue.node").fetchone() == (young + 49,)


def test_prune_refuses_a_limit_below_one(dsn: str) -> None:
    with connection.connect(dsn) as conn:
        enqueue.enqueue_many(conn, "s", [pgqueue.NewJob(b"x") for _ in range(3)])
        for limit in (0, -1):
            with pytest.raises(ValueError, match="batch must be"):
                replica.prune_batches(conn, keep=0, stale_after=86400.0, batch=limit, wait=0)
            with pytest.raises(psycopg.errors.InvalidParameterValue, match="limit must be >= 1"):
                conn.execute("SELECT pgqueue.prune_op_log(interval '0', interval '1 day', %s, "
                             "interval '0')", [limit])
        assert conn.execute("SELECT count(*) FROM pgqueue.op_log").fetchone() == (3,)


# -- on a replica ---------------------------------------------------------------------------------

LEADER = "host=leader.example dbname=queue"


def _as_replica_with_old_ops(conn: queries.Conn) -> int:
    """Ops a week and more old, then this database becomes a replica of LEADER; the op count."""
    enqueue.enqueue_many(conn, "s", [pgqueue.NewJob(b"x") for _ in range(20)])
    conn.execute("UPDATE pgqueue.op_log SET at = at - interval '8 days'")
    conn.execute("SELECT pgqueue.set_role('replica', 'r1', %s)", [LEADER])
    row = conn.execute("SELECT count(*) FROM pgqueue.op_log").fetchone()
    assert row is not None
    return int(row[0])


def test_prune_on_a_replica_is_refused_naming_its_leader(dsn: str) -> None:
    with connection.connect(dsn) as conn:
        ops = _as_replica_with_old_ops(conn)
        with pytest.raises(pgqueue.NotLeader, match=r"leader\.example"):
            prune(conn, keep=0)
        with pytest.raises(psycopg.Error) as caught:
            conn.execute("SELECT pgqueue.prune_op_log(interval '0')")
        assert caught.value.sqlstate == "PQ401"
        assert conn.execute("SELECT count(*) FROM pgqueue.op_log").fetchone() == (ops,)
    with pytest.raises(pgqueue.NotLeader, match=r"leader\.example"):
        replica.prune(dsn, keep=0)


def test_a_maintenance_pass_on_a_replica_skips_the_leader_s_work_instead_of_failing(
        dsn: str) -> None:
    with connection.connect(dsn) as conn:
        ops = _as_replica_with_old_ops(conn)
        result = maintain.run_pass(conn)
        assert (result.reclaimed, result.schedules_fired, result.ops_pruned) == (0, 0, 0)
        assert conn.execute("SELECT count(*) FROM pgqueue.op_log").fetchone() == (ops,)
    runner = maintain.Maintainer(dsn)
    try:
        for _ in range(3):
            assert runner.tick() is not None  # every pass runs, none fails
        assert runner.passes == 3
    finally:
        runner._drop_connection()
