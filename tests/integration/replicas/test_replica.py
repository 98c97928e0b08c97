"""Replicas on real, separate Postgres servers: logical replication (replica.attach) and the
follow reader (replica.Follower) stay identical to the leader under a concurrent random
workload, survive being stopped, ignore ops delivered twice, refuse writes naming their leader,
report their lag, hold back pruning, and take over as leader under load without losing a job
or reusing an id.

Leader databases are on the bed's server; replica databases on two extra embedded servers
(see replicas_fixtures.py). Every identity check is made twice: replica.verify() and an
independent row-by-row comparison of the state tables here.
"""
from __future__ import annotations

import datetime as dt
import re
import threading
import time
from collections import Counter
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb

import pgqueue
from pgqueue.db import connection, queries
from pgqueue.errors import ConnectionFailed, NotLeader, PgQueueError
from pgqueue.maintenance import maintain
from pgqueue.replicas import replica

# The fixtures (replica_servers, leader_host, cluster) come from this plugin module, whose
# asserts pytest rewrites like a conftest's.
pytest.register_assert_rewrite("tests.integration.replicas.replicas_fixtures")
pytest_plugins = ["tests.integration.replicas.replicas_fixtures"]

from tests.dbhelp import pinned, wait_for  # noqa: E402
from tests.integration.replicas.replicas_fixtures import (  # noqa: E402
    Cluster,
    FollowerThread,
    Server,
    Workload,
    one,
    op_count,
    rows,
    state_differences,
    state_rows,
)

FAR = dt.datetime(2100, 1, 1, tzinfo=dt.timezone.utc)
PASSWORD = "s3cr3t-Pa55word"  # noqa: S105  (trust auth accepts any password)
EXPECTED_OPS = {"Enqueue", "Lease", "Renew", "Ack", "Nack", "Reclaim", "RequeueDeadLetter",
                "Promote", "ReturnLease", "UpsertSchedule", "UpdateScheduleNextRun",
                "ConfigureStream", "Cancel", "Release", "RequestCancel", "ConfigureKind"}


def assert_identical(leader: str, replica_dsn: str, *, timeout: float = 120.0,
                     leader_state: dict[str, list[str]] | None = None) -> None:
    """replica.verify says identical, and so does a row-by-row comparison of every table
    (against `leader_state`, the leader's state_rows, when the caller read them already)."""
    result = replica.verify(leader, replica_dsn, timeout=timeout)
    assert result.identical, "\n".join(result.differences[:20] + state_differences(
        leader, replica_dsn) + job_ops_of(leader, result.differences))
    assert result.differences == []
    if leader_state is None:
        assert state_differences(leader, replica_dsn) == []
    else:
        assert state_rows(replica_dsn) == leader_state
    assert ops_of(leader) == ops_of(replica_dsn)


def job_ops_of(leader: str, differences: list[str]) -> list[str]:
    """The leader's ops of the jobs a verify found different (to read a failure by)."""
    ids = [int(m) for d in differences for m in re.findall(r"^job id (\d+)", d)][:3]
    return [f"op {r[0]} {r[1]} lease {r[2]} xid {r[3]}: {r[4]}" for r in rows(
        leader, "SELECT seq, op, lease_id, xid::text, body::text FROM pgqueue.op_log "
                "WHERE job_id = ANY(%s) ORDER BY seq", [ids])] if ids else []


def ops_of(dsn: str) -> list[tuple[Any, ...]]:
    """Every op as a hashable row (body, xid and lsn as text)."""
    return rows(dsn, "SELECT seq, stream, op, job_id, lease_id, body::text, xid::text, at, "
                     "lsn::text FROM pgqueue.op_log ORDER BY seq")


def max_seq(dsn: str) -> int:
    return int(one(dsn, "SELECT coalesce(max(seq), 0) FROM pgqueue.op_log"))


def status_by_name(leader: str, **kwargs: Any) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in replica.status(leader, **kwargs)}


def caught_up(leader: str, *names: str) -> bool:
    found = status_by_name(leader)
    return all(n in found and found[n]["lag_ops"] == 0 for n in names)


def enqueue_some(dsn: str, n: int, *, stream: str = "default", settle: bool = True) -> list[int]:
    """n jobs; with settle, lease half of them and ack, nack and renew some."""
    with pgqueue.Queue(dsn, stream=stream) as q:
        ids = q.enqueue_many([pgqueue.NewJob(f"job {i}".encode(), priority=i % 3, max_attempts=1)
                              for i in range(n)])
        if settle:
            leases = q.lease(n // 2)
            for i, lease in enumerate(leases):
                if i % 3 == 0:
                    q.ack(lease)
                elif i % 3 == 1:
                    q.nack(lease, error="failed")  # max_attempts=1: a dead letter
                else:
                    q.renew(lease, checkpoint=pgqueue.Checkpoint(cursor_step="s", cursor=b"7"))
    return ids


# -- identical under a concurrent random workload --------------------------------------------------


def test_a_random_concurrent_workload_leaves_both_replicas_identical(cluster: Cluster) -> None:
    leader = cluster.leader
    logical_db, follow_db = cluster.replica_db(0), cluster.replica_db(1)
    work = Workload(leader, threads=4, seed=1).start()
    try:
        # Both attach while the writers run: the seed and the stream overlap, and must not
        # lose or double-apply anything.
        work.run_until(leader, 500)
        cluster.follow(follow_db, "follower")
        work.run_until(leader, 1500)
        seeded = replica.attach(leader, logical_db, "logical")
        assert seeded.seeded_ops >= 1000
        total = work.run_until(leader, 20_000, timeout=180)
    finally:
        work.stop()
    assert total >= 20_000
    assert_identical(leader, logical_db)
    assert_identical(leader, follow_db)
    assert op_count(logical_db) == op_count(follow_db) == op_count(leader) >= 20_000
    kinds = {r[0] for r in rows(leader, "SELECT DISTINCT op FROM pgqueue.op_log")}
    assert EXPECTED_OPS <= kinds, f"the workload never produced {EXPECTED_OPS - kinds}"
    # The workload really left state to compare: live jobs, dead letters, schedules.
    assert one(leader, "SELECT count(*) FROM pgqueue.job") > 0
    assert one(leader, "SELECT count(*) FROM pgqueue.dead_letter") > 0
    assert one(leader, "SELECT count(*) FROM pgqueue.schedule") > 0


def test_replicas_stopped_in_the_middle_catch_up_and_are_identical(cluster: Cluster) -> None:
    leader = cluster.leader
    logical_server = cluster.servers[0]
    logical_db, follow_db = cluster.replica_db(0), cluster.replica_db(1)
    replica.attach(leader, logical_db, "logical")
    follower = cluster.follow(follow_db, "follower")
    work = Workload(leader, threads=3, seed=2).start()
    try:
        work.run_until(leader, 1500)
        # The logical replica's whole server goes away (a crash: unflushed commits and their
        # replication origin progress are lost, so ops arrive again), and the follower stops.
        logical_server.stop("immediate")
        follower.stop()
        stopped_at = max_seq(leader)
        work.run_until(leader, op_count(leader) + 3000)
        down = status_by_name(leader)
        assert down["logical"]["active"] is False
        assert down["logical"]["lag_ops"] > 0
        assert down["follower"]["applied_seq"] <= stopped_at
        assert down["follower"]["lag_ops"] > 0
        logical_server.server.start()
        cluster.follow(follow_db, "follower")
        work.run_until(leader, op_count(leader) + 1500)
    finally:
        work.stop()
    assert_identical(leader, logical_db)
    assert_identical(leader, follow_db)
    wait_for(lambda: caught_up(leader, "logical", "follower"), 30, "both replicas to report lag 0")


# -- the same op twice ---------------------------------------------------------------------------


def test_ops_delivered_twice_through_ingest_change_nothing(cluster: Cluster) -> None:
    leader = cluster.leader
    ids = enqueue_some(leader, 60)
    with pgqueue.Queue(leader) as q:
        q.reclaim_expired()
        for dead in q.dead_letters(limit=3):
            q.requeue_dead_letter(dead.job_id)
    ops = [r[0] for r in rows(leader, "SELECT to_jsonb(o) FROM pgqueue.op_log o ORDER BY seq")]
    target = cluster.replica_db(0, migrated=True)
    with connection.connect(target) as conn:
        first = conn.execute("SELECT pgqueue.ingest_ops(%s)", [Jsonb(ops)]).fetchone()
        again = conn.execute("SELECT pgqueue.ingest_ops(%s)", [Jsonb(ops)]).fetchone()
        # Out of order, one at a time: the Enqueue of an acked job must not bring it back.
        for op in reversed(ops):
            row = conn.execute(
                "SELECT pgqueue.ingest_op(o) FROM jsonb_populate_record(NULL::pgqueue.op_log, %s) o",
                [Jsonb(op)]).fetchone()
            assert row == (False,)
    assert first == (len(ops),)
    assert again == (0,)
    assert len(ids) == 60
    assert state_differences(leader, target) == []
    assert ops_of(leader) == ops_of(target)


def test_the_follow_reader_reading_everything_again_changes_nothing(cluster: Cluster) -> None:
    leader = cluster.leader
    enqueue_some(leader, 80)
    target = cluster.replica_db(0)
    follower = replica.Follower(leader, target, "again")
    follower.setup()
    while follower.poll() > 0:
        pass
    follower.poll()
    before = ops_of(target)
    assert before == ops_of(leader)
    # Forget the position: the next polls deliver every op again.
    with connection.connect(target) as conn:
        conn.execute("UPDATE pgqueue.follow_state SET low_seq = 0, mark_seq = 0, mark_xmax = NULL")
    assert follower.poll() == 0
    assert follower.poll() == 0
    assert ops_of(target) == before
    assert_identical(leader, target)


def test_an_op_the_subscription_delivers_twice_is_skipped_by_the_apply_trigger(
        cluster: Cluster) -> None:
    leader = cluster.leader
    enqueue_some(leader, 60)
    target = cluster.replica_db(0)
    replica.attach(leader, target, "twice")
    with pgqueue.Queue(leader) as q:  # ops that arrive through the subscription, not the seed
        for lease in q.lease(10):
            q.ack(lease)
    assert_identical(leader, target)
    ops = [r[0] for r in rows(leader, "SELECT to_jsonb(o) FROM pgqueue.op_log o ORDER BY seq DESC")]
    acked = {r[0] for r in rows(leader, "SELECT job_id FROM pgqueue.op_log WHERE op = 'Ack'")}
    # What the apply worker does: insert the row as it came, with session_replication_role =
    # replica (so only ENABLE ALWAYS triggers fire). Every seq is already applied.
    with connection.connect(target, autocommit=False) as conn:
        conn.execute("SET LOCAL session_replication_role = replica")
        for op in ops:
            conn.execute("INSERT INTO pgqueue.op_log "
                         "SELECT * FROM jsonb_populate_record(NULL::pgqueue.op_log, %s)", [Jsonb(op)])
        conn.commit()
    assert acked and not rows(target, "SELECT id FROM pgqueue.job WHERE id = ANY(%s)", [list(acked)])
    assert_identical(leader, target)
    # The subscription still applies what comes next.
    with pgqueue.Queue(leader) as q:
        q.enqueue(b"after the duplicates")
    assert_identical(leader, target)


# -- attach while writers hold transactions open -----------------------------------------------------


def _open_transaction(dsn: str) -> psycopg.Connection[Any]:
    """A connection in a transaction that holds a transaction id (it counts as running)."""
    conn = connection.connect(dsn, autocommit=False)
    conn.execute("SELECT pg_current_xact_id()")
    return conn


def _log_running_transactions(dsn: str) -> None:
    """Make the leader log its running transactions now (logical decoding advances on these
    records; the background writer logs one only every 15 s)."""
    if int(one(dsn, "SHOW server_version_num")) >= 160000:
        one(dsn, "SELECT pg_log_standby_snapshot()")
    else:
        one(dsn, "CHECKPOINT")


def _slot_waits_for(leader: str, holder: psycopg.Connection[Any]) -> bool:
    """Whether a walsender building a new slot's snapshot waits for the transaction open on
    `holder` to end: it does for each transaction its last running-transactions record named,
    once it has read that record (and before that record, it logged it)."""
    return bool(one(leader, """
        SELECT count(*) FROM pg_locks w JOIN pg_stat_activity a ON a.pid = w.pid
        WHERE a.backend_type = 'walsender' AND w.locktype = 'transactionid' AND NOT w.granted
          AND w.transactionid = (SELECT transactionid FROM pg_locks
                                 WHERE pid = %s AND locktype = 'transactionid' AND granted)""",
                    [holder.info.backend_pid]))


def test_attach_while_transactions_are_open_loses_no_committed_op(cluster: Cluster) -> None:
    """The subscription's slot streams only what commits after it became consistent; the seed
    must hold everything committed before, also ops of a transaction that committed while an
    older one was still open (the seed's snapshot then has xmin below its xid)."""
    leader = cluster.leader
    target = cluster.replica_db(0)
    with pgqueue.Queue(leader) as q:
        q.enqueue(b"before")
        first = _open_transaction(leader)  # the slot waits for it: building its snapshot
        attached: dict[str, Any] = {}

        def attach() -> None:
            try:
                attached["result"] = replica.attach(leader, target, "busy")
            except BaseException as exc:
                attached["error"] = exc

        attaching = threading.Thread(target=attach, daemon=True)
        attaching.start()
        wait_for(lambda: one(leader, "SELECT count(*) FROM pg_replication_slots "
                                     "WHERE slot_name = 'pgqueue_busy'"), 30, "the slot to appear")
        # the slot has seen `first` running (and not `second`, begun after)
        wait_for(lambda: _slot_waits_for(leader, first), 30, "the slot to wait for the first")
        second = _open_transaction(leader)  # running when the slot's snapshot is full
        first.commit()
        _log_running_transactions(leader)
        # its snapshot is full: it logged the transactions running then (`second`), and waits
        wait_for(lambda: _slot_waits_for(leader, second), 30, "the slot to wait for the second")
        older = connection.connect(leader, autocommit=False)  # starts after: not waited for
        open_id = q.enqueue(b"open across the seed", conn=older)
        committed_id = q.enqueue(b"committed before the slot was consistent")
        second.commit()
        _log_running_transactions(leader)
        attaching.join(60)
        older.commit()
        for conn in (first, second, older):
            conn.close()
    assert "error" not in attached, attached
    have = {r[0] for r in rows(target, "SELECT job_id FROM pgqueue.op_log WHERE op = 'Enqueue'")}
    wait_for(lambda: open_id in {r[0] for r in rows(target, "SELECT id FROM pgqueue.job")}, 30,
             "the open transaction's job to arrive")
    assert committed_id in {r[0] for r in rows(target, "SELECT id FROM pgqueue.job")}, (
        f"job {committed_id} committed on the leader during attach and never reached the replica "
        f"(replica has Enqueue ops for {sorted(have)})")
    assert_identical(leader, target, timeout=20)


# -- writes to a replica ---------------------------------------------------------------------------


WRITES: dict[str, Any] = {
    "enqueue": lambda q, ctx: q.enqueue(b"x"),
    "lease": lambda q, ctx: q.lease(1),
    "ack": lambda q, ctx: q.ack(ctx["lease"]),
    "nack": lambda q, ctx: q.nack(ctx["lease"], error="x"),
    "renew": lambda q, ctx: q.renew(ctx["lease"]),
    "reclaim": lambda q, ctx: q.reclaim_expired(),
    "requeue": lambda q, ctx: q.requeue_dead_letter(ctx["dead"]),
    "cancel": lambda q, ctx: q.cancel(ctx["pending"]),
    "configure": lambda q, ctx: q.configure_stream(retry_base=2.0),
    "schedule": lambda q, ctx: q.upsert_schedule("nightly", "0 3 * * *"),
    "tick": lambda q, ctx: q.tick_schedules(now=FAR),
}


def test_writes_to_a_replica_are_refused_naming_the_leader_without_its_password(
        cluster: Cluster) -> None:
    leader = make_conninfo(cluster.leader, password=PASSWORD)
    logical_db, follow_db = cluster.replica_db(0), cluster.replica_db(1)
    with pgqueue.Queue(leader) as q:
        q.upsert_schedule("hourly", "0 * * * *")
        q.enqueue(b"doomed", max_attempts=1, priority=9)
        q.enqueue(b"leased", priority=8)
        pending = q.enqueue(b"pending")
        first, second = q.lease(2)
        q.nack(first, error="dies")
        ctx = {"lease": second, "dead": first.job_id, "pending": pending}
    replica.attach(leader, logical_db, "logical")
    follower = replica.Follower(leader, follow_db, "follower")
    follower.setup()
    follower.poll()
    leader_parts = connection.conninfo_to_dict(cluster.leader)
    problems: list[str] = []
    for target in (logical_db, follow_db):
        assert_identical(cluster.leader, target)
        with pgqueue.Queue(target) as rq:
            for name, write in WRITES.items():
                try:
                    write(rq, ctx)
                except NotLeader as exc:
                    message = str(exc)
                    if PASSWORD in message:
                        problems.append(f"{name}: the message shows the password: {message}")
                    wanted = [f"{p}={leader_parts[p]}" for p in ("host", "port", "dbname")]
                    if "replica" not in message or not all(w in message for w in wanted):
                        problems.append(f"{name}: the message does not name the leader: {message}")
                except Exception as exc:
                    problems.append(f"{name}: raised {exc!r}, not NotLeader")
                else:
                    problems.append(f"{name}: was not refused on {replica.role(target)['name']}")
            # Reads are fine on a replica.
            info = rq.job(pending)
            assert info is not None and info.state == "pending"
            assert {s.stream for s in rq.stats()} == {"default"}
        assert PASSWORD not in str(replica.role(target))
        assert_identical(cluster.leader, target)  # the refused writes changed nothing
    assert problems == []
    # Given several DSNs, the Queue writes to the one in leader role.
    with pgqueue.Queue([logical_db, follow_db, leader]) as q:
        job_id = q.enqueue(b"to the leader")
        assert q.dsn == leader
    assert one(cluster.leader, "SELECT count(*) FROM pgqueue.job WHERE id = %s", [job_id]) == 1


# -- the follow reader and late commits ------------------------------------------------------------


@pytest.mark.parametrize("later_commits_first", [True, False])
def test_the_follow_reader_does_not_skip_a_row_whose_transaction_commits_late(
        cluster: Cluster, later_commits_first: bool) -> None:
    """A transaction holds a lower op seq and commits last. Without a later commit, it holds
    the newest xid and nothing finishes after it: the snapshot's xmax (latest finished xid +
    1) is then at or below its xid, so a mark taken from xmax was passed by xmin while it
    still ran (the soak caught a Renew skipped that way)."""
    leader = cluster.leader
    target = cluster.replica_db(0)
    follower = replica.Follower(leader, target, "late")
    follower.setup()
    follower.poll()
    with pgqueue.Queue(leader) as q:
        q.enqueue(b"committed before")
        late = connection.connect(leader, autocommit=False)
        try:
            early_id = q.enqueue(b"takes a lower seq, commits last", conn=late)
            early_seq = one(leader, "SELECT last_value FROM pgqueue.op_log_seq_seq")
            ids = [early_id]
            if later_commits_first:
                ids.append(q.enqueue(b"takes a higher seq, commits first"))
                assert max_seq(leader) > early_seq
            for _ in range(4):
                follower.poll()
                low = one(target, "SELECT low_seq FROM pgqueue.follow_state WHERE name = 'late'")
                assert low < early_seq, "the reader moved past an open transaction"
            assert not rows(target, "SELECT id FROM pgqueue.job WHERE id = %s", [early_id])
            late.commit()
        finally:
            late.close()
    for _ in range(3):
        follower.poll()
    have = {r[0] for r in rows(target, "SELECT id FROM pgqueue.job")}
    assert set(ids) <= have
    assert_identical(leader, target)


# -- status and retention ---------------------------------------------------------------------------


def test_status_lists_each_replica_with_its_lag_and_sql_says_the_same(cluster: Cluster) -> None:
    leader = cluster.leader
    logical_db, follow_db = cluster.replica_db(0), cluster.replica_db(1)
    enqueue_some(leader, 100)
    replica.attach(leader, logical_db, "logical")
    follower = cluster.follow(follow_db, "follower")
    wait_for(lambda: caught_up(leader, "logical", "follower"), 30, "both replicas to catch up")
    follower.stop()
    enqueue_some(leader, 50, settle=False)
    head = max_seq(leader)
    found = status_by_name(leader)
    assert set(found) == {"logical", "follower"}
    assert found["follower"]["method"] == "follow"
    assert found["follower"]["lag_ops"] >= 50
    assert found["follower"]["applied_seq"] <= head - 50
    assert found["follower"]["lag_seconds"] > 0
    assert found["logical"]["method"] == "logical"
    # The logical replica keeps up on its own; the follower catches up once restarted.
    wait_for(lambda: caught_up(leader, "logical"), 30, "the logical replica to catch up")
    cluster.follow(follow_db, "follower")
    wait_for(lambda: caught_up(leader, "logical", "follower"), 30, "both replicas to catch up")
    found = status_by_name(leader)
    for name in ("logical", "follower"):
        assert found[name]["applied_seq"] == head
        assert found[name]["lag_ops"] == 0
        assert found[name]["lag_seconds"] == 0
        assert found[name]["active"] is True
        assert found[name]["stale"] is False
    in_sql = {r[0]: r[1:] for r in rows(
        leader, "SELECT name, method, applied_seq, lag_ops, lag_seconds, active, stale "
                "FROM pgqueue.replica_status()")}
    assert in_sql == {name: (r["method"], r["applied_seq"], r["lag_ops"], r["lag_seconds"],
                             r["active"], r["stale"]) for name, r in found.items()}


def test_status_does_not_count_an_op_applied_when_the_slot_confirmed_a_position_inside_its_transaction(
        cluster: Cluster) -> None:
    """A slot confirms a WAL position while a transaction that started before it is still open
    (a keepalive); that transaction then commits while the replica is away. Its op's insert LSN is
    below the confirmed position, yet the replica does not have it: status must report it as lag."""
    leader, target = cluster.leader, cluster.replica_db(0)
    enqueue_some(leader, 5, settle=False)
    replica.attach(leader, target, "keepalive")
    wait_for(lambda: caught_up(leader, "keepalive"), 30, "the replica to catch up")
    sub = replica.subscription_name("keepalive")
    with psycopg.connect(leader) as open_tx:
        with pgqueue.Queue(leader) as q:
            job_id = q.enqueue(b"late", conn=open_tx)  # written, not committed
        op_lsn = open_tx.execute("SELECT lsn FROM pgqueue.op_log WHERE job_id = %s",
                                 [job_id]).fetchone()
        assert op_lsn is not None

        def confirmed_past_op() -> bool:
            with psycopg.connect(leader, autocommit=True) as other:
                other.execute("CREATE TABLE IF NOT EXISTS scratch (n int)")
                other.execute("INSERT INTO scratch VALUES (1)")  # WAL the walsender reads past
                got = other.execute("SELECT confirmed_flush_lsn > %s FROM pg_replication_slots "
                                    "WHERE slot_name = %s", [op_lsn[0], sub]).fetchone()
            return bool(got and got[0])

        wait_for(confirmed_past_op, 30, "the slot to confirm a position past the open op")
        with psycopg.connect(target, autocommit=True) as rep:
            rep.execute(f'ALTER SUBSCRIPTION "{sub}" DISABLE')
        wait_for(lambda: not one(leader, "SELECT active FROM pg_replication_slots WHERE slot_name = %s",
                                 [sub]), 30, "the slot to go inactive")
        open_tx.commit()
    seq = one(leader, "SELECT seq FROM pgqueue.op_log WHERE job_id = %s", [job_id])
    found = status_by_name(leader, wait=0.2)["keepalive"]
    assert one(target, "SELECT count(*) FROM pgqueue.job WHERE id = %s", [job_id]) == 0
    assert found["lag_ops"] >= 1, found
    assert found["applied_seq"] < seq, found
    assert found["lag_seconds"] > 0, found

    with psycopg.connect(target, autocommit=True) as rep:
        rep.execute(f'ALTER SUBSCRIPTION "{sub}" ENABLE')
    wait_for(lambda: caught_up(leader, "keepalive"), 30, "the replica to catch up again")
    assert status_by_name(leader)["keepalive"]["applied_seq"] == max_seq(leader)
    assert state_differences(leader, target) == []


def status_at(leader: str, when: dt.datetime, *, stale_after: float = 86400.0) -> dict[str, Any]:
    """The status of the leader's replicas with pgqueue.now_ms() pinned to `when` (its rows by
    name); no wait for a slot."""
    with pinned(leader, when) as conn:
        found = queries.fetch(conn, "replica_status", {"stale_after": stale_after, "wait": 0})
    return {r["name"]: r for r in found}


def backdate(leader: str, name: str, days: int = 2) -> None:
    with connection.connect(leader) as conn:
        conn.execute("UPDATE pgqueue.replica SET seen_at = seen_at - %s * interval '1 day', "
                     "attached_at = attached_at - %s * interval '1 day' WHERE name = %s",
                     [days, days, name])


def set_subscription(target: str, name: str, action: str) -> None:
    with psycopg.connect(target, autocommit=True) as rep:
        rep.execute(f'ALTER SUBSCRIPTION "{replica.subscription_name(name)}" {action}')


def slot_active(leader: str, name: str) -> bool:
    return bool(one(leader, "SELECT active FROM pg_replication_slots WHERE slot_name = %s",
                    [replica.subscription_name(name)]))


def test_a_replica_attached_long_ago_is_stale_only_once_unseen_for_the_threshold(
        cluster: Cluster) -> None:
    """seen_at follows what the leader sees of the replica, not when it was attached: a
    logical replica attached two days ago is not stale through a short disconnect, and is
    stale once it has been away longer than stale_after (the clock pinned, not waited on)."""
    leader, target = cluster.leader, cluster.replica_db(0)
    enqueue_some(leader, 20)
    replica.attach(leader, target, "old")
    wait_for(lambda: caught_up(leader, "old"), 30, "the replica to catch up")
    backdate(leader, "old")
    now = dt.datetime.now(dt.timezone.utc)

    connected = status_at(leader, now)["old"]
    assert connected["active"] is True and connected["stale"] is False, connected
    assert one(leader, "SELECT seen_at > now() - interval '1 minute' FROM pgqueue.replica "
                       "WHERE name = 'old'") is True, "status did not record what it saw"

    set_subscription(target, "old", "DISABLE")
    wait_for(lambda: not slot_active(leader, "old"), 30, "the slot to go inactive")
    away = status_at(leader, now)["old"]
    assert away["active"] is False
    assert away["stale"] is False, f"a replica away for seconds is reported stale: {away}"
    assert status_by_name(leader, wait=0)["old"]["stale"] is False  # the library says the same
    assert status_at(leader, now + dt.timedelta(hours=12))["old"]["stale"] is False
    long_away = status_at(leader, now + dt.timedelta(days=2))["old"]
    assert long_away["stale"] is True, long_away
    assert status_at(leader, now + dt.timedelta(hours=23), stale_after=3600)["old"]["stale"]


def test_a_replica_is_seen_by_status_or_a_maintenance_pass_while_connected(
        cluster: Cluster) -> None:
    """No status call needed while the replica is connected: a maintenance pass records it
    (touch), and status infers it from the position the replica's slot confirmed."""
    leader, target = cluster.leader, cluster.replica_db(0)
    enqueue_some(leader, 10)
    replica.attach(leader, target, "quiet")
    wait_for(lambda: caught_up(leader, "quiet"), 30, "the replica to catch up")
    wait_for(lambda: slot_active(leader, "quiet"), 30, "the slot to be active")
    backdate(leader, "quiet")
    with connection.connect(leader) as conn:
        maintain.run_pass(conn)
    assert one(leader, "SELECT seen_at > now() - interval '1 minute' FROM pgqueue.replica "
                       "WHERE name = 'quiet'") is True, "the maintenance pass did not touch it"

    # neither status nor a pass while connected: the confirmed position says it was there
    backdate(leader, "quiet")
    enqueue_some(leader, 5, settle=False)
    wait_for(lambda: one(leader, "SELECT confirmed_flush_lsn >= (SELECT max(lsn) FROM "
                                 "pgqueue.op_log) FROM pg_replication_slots WHERE slot_name = %s",
                         [replica.subscription_name("quiet")]), 30, "the slot to confirm")
    set_subscription(target, "quiet", "DISABLE")
    wait_for(lambda: not slot_active(leader, "quiet"), 30, "the slot to go inactive")
    now = dt.datetime.now(dt.timezone.utc)
    assert status_at(leader, now)["quiet"]["stale"] is False
    assert status_at(leader, now + dt.timedelta(days=2))["quiet"]["stale"] is True


def test_prune_keeps_every_op_a_replica_has_not_confirmed_unless_it_is_stale(
        cluster: Cluster) -> None:
    leader = cluster.leader
    logical_db, follow_db = cluster.replica_db(0), cluster.replica_db(1)
    enqueue_some(leader, 200)
    replica.attach(leader, logical_db, "logical")
    follower = cluster.follow(follow_db, "follower")
    wait_for(lambda: caught_up(leader, "logical", "follower"), 30, "both replicas to catch up")
    follower.stop()
    confirmed = status_by_name(leader)["follower"]["applied_seq"]
    enqueue_some(leader, 100)
    wait_for(lambda: caught_up(leader, "logical"), 30, "the logical replica to catch up")
    unconfirmed = [r for r in ops_of(leader) if r[0] > confirmed]
    below = op_count(leader) - len(unconfirmed)
    assert unconfirmed and below > 0

    pruned = replica.prune(leader, keep=0)
    assert pruned == below
    assert ops_of(leader) == unconfirmed  # exactly the follower's unconfirmed ops are left
    assert state_differences(leader, logical_db) == []

    # The follower comes back, catches up from where it was, and lets the rest go.
    follower = cluster.follow(follow_db, "follower")
    wait_for(lambda: caught_up(leader, "logical", "follower"), 30, "both replicas to catch up")
    assert state_differences(leader, follow_db) == []
    follower.stop()

    # A follower silent longer than stale_after is reported and no longer waited on.
    confirmed = status_by_name(leader)["follower"]["applied_seq"]
    enqueue_some(leader, 40, settle=False)
    with connection.connect(leader) as conn:
        conn.execute("UPDATE pgqueue.replica SET seen_at = now() - interval '2 days' "
                     "WHERE name = 'follower'")
    wait_for(lambda: caught_up(leader, "logical"), 30, "the logical replica to catch up")
    found = status_by_name(leader, stale_after=86400)
    assert found["follower"]["stale"] is True
    assert found["logical"]["stale"] is False
    head = max_seq(leader)
    assert head > confirmed
    assert replica.prune(leader, keep=0, stale_after=86400) > 0
    assert one(leader, "SELECT count(*) FROM pgqueue.op_log WHERE seq > %s", [confirmed]) == 0
    assert state_differences(leader, logical_db) == []
    # What the logical replica applied is still reported after its ops were pruned.
    applied = status_by_name(leader)["logical"]["applied_seq"]
    assert applied == max(r[0] for r in ops_of(logical_db)), (
        f"status reports the logical replica at seq {applied} after pruning; it applied up to "
        f"{max(r[0] for r in ops_of(logical_db))}")


def test_a_stale_follower_whose_ops_were_pruned_does_not_diverge_silently(
        cluster: Cluster) -> None:
    """Once a stale follower's unapplied ops are pruned it can no longer catch up: when it comes
    back it must say so (raise), not carry on from the next op it finds and report lag 0."""
    leader = cluster.leader
    target = cluster.replica_db(0)
    with pgqueue.Queue(leader) as q:
        q.enqueue_many([pgqueue.NewJob(b"a") for _ in range(10)])
        follower = replica.Follower(leader, target, "returning")
        follower.setup()
        follower.poll()
        follower.poll()
        for lease in q.lease(5):
            q.ack(lease)  # ops the follower never sees
        with connection.connect(leader) as conn:
            conn.execute("UPDATE pgqueue.replica SET seen_at = now() - interval '2 days'")
        assert replica.prune(leader, keep=0) > 0
        q.enqueue(b"new")
    try:
        for _ in range(3):
            follower.poll()
    except PgQueueError:
        return  # refused: the replica has to be attached afresh
    assert state_differences(leader, target) == [], (
        "the follower skipped pruned ops and went on; status says "
        f"{status_by_name(leader)['returning']}")


@pytest.mark.parametrize("method", ["logical", "follow"])
def test_a_new_replica_of_a_leader_that_pruned_its_op_log_is_seeded_from_its_state(
        cluster: Cluster, method: str) -> None:
    """A leader that pruned its op log (no replica attached, ops a week old) can no longer be
    replayed into a replica: a new, empty replica is seeded from the leader's state in one
    snapshot, follows from there, is identical, and continues ids without collision."""
    leader, target = cluster.leader, cluster.replica_db(0)
    with pgqueue.Queue(leader) as q:
        q.configure_stream(retry_base=2.0)
        q.upsert_schedule("nightly", "0 2 * * *", b"n", kind="report", timezone="Europe/Berlin")
    enqueue_some(leader, 200)  # leases, acks, dead letters, checkpoints
    assert replica.prune(leader, keep=0) > 0
    assert op_count(leader) == 0
    enqueue_some(leader, 60)  # ops the log still holds
    open_tx = psycopg.connect(leader)
    try:
        if method == "logical":
            result = replica.attach(leader, target, "seeded")
            assert result.seeded_rows > 0 and result.seeded_ops == op_count(leader)
        else:
            with pgqueue.Queue(leader) as q:  # in progress while the state is copied
                late = q.enqueue(b"late", conn=open_tx)
            ft = cluster.follow(target, "seeded")
            # its low-water mark cannot pass the open transaction's op: it polls, it waits
            wait_for(lambda: ft.follower.polls >= 3 or ft.error, 30, "the follower to poll")
            assert ft.error is None, ft.error
            assert one(target, "SELECT count(*) FROM pgqueue.job WHERE id = %s", [late]) == 0
            open_tx.commit()
            wait_for(lambda: one(target, "SELECT count(*) FROM pgqueue.job WHERE id = %s",
                                 [late]) == 1, 30, "the job committed after the seed")
    finally:
        open_tx.close()
    enqueue_some(leader, 40)
    wait_for(lambda: caught_up(leader, "seeded"), 30, "the replica to catch up")
    assert_identical(leader, target)

    biggest = max(one(leader, "SELECT coalesce(max(id), 0) FROM pgqueue.job"),
                  one(leader, "SELECT coalesce(max(id), 0) FROM pgqueue.dead_letter"))
    replica.promote(target, old_leader_dsn=leader)
    with pgqueue.Queue(target) as q:
        fresh = q.enqueue(b"after promotion")
        leases = q.lease(1000)
    assert fresh > biggest
    lease_ids = [x.lease_id for x in leases]
    assert min(lease_ids) > one(leader, "SELECT last_value FROM pgqueue.lease_id_seq") - 1


def test_an_op_the_seed_snapshot_already_holds_is_logged_but_not_applied_again(
        cluster: Cluster) -> None:
    """An op that reaches a seeded replica although its transaction committed before the seed
    snapshot (it was pruned after the logical slot sent it on its way) is already in the copied
    state: it is logged, not applied a second time. A later transaction's op is applied."""
    leader, target = cluster.leader, cluster.replica_db(0)
    with connection.connect(leader) as conn:
        before = conn.execute("SELECT pg_current_xact_id()::text").fetchone()
    assert before is not None
    ids = enqueue_some(leader, 10, settle=False)
    assert replica.prune(leader, keep=0) > 0
    replica.Follower(leader, target, "seeded").setup()
    after = one(target, "SELECT (pg_snapshot_xmax(seed_snapshot)::text::bigint + 1000)::text "
                        "FROM pgqueue.node")

    def ack(seq: int, job_id: int, xid: str) -> int:
        op = {"seq": seq, "stream": "default", "op": "Ack", "job_id": job_id, "lease_id": None,
              "body": {}, "xid": xid, "at": "2026-01-01T00:00:00+00:00", "lsn": "0/0"}
        with connection.connect(target) as conn:
            got = conn.execute("SELECT pgqueue.ingest_ops(%s)", [Jsonb([op])]).fetchone()
        assert got is not None
        return int(got[0])

    assert ack(10**9, ids[0], before[0]) == 1  # logged...
    assert one(target, "SELECT count(*) FROM pgqueue.job WHERE id = %s", [ids[0]]) == 1  # ...only
    assert ack(10**9 + 1, ids[1], after) == 1
    assert one(target, "SELECT count(*) FROM pgqueue.job WHERE id = %s", [ids[1]]) == 0


def test_seeding_from_state_refuses_a_replica_that_is_not_empty(cluster: Cluster) -> None:
    leader, target = cluster.leader, cluster.replica_db(0)
    enqueue_some(leader, 20)
    assert replica.prune(leader, keep=0) > 0
    pgqueue.migrate(target)
    with pgqueue.Queue(target) as q:  # still a leader database of its own, with a job
        q.enqueue(b"mine")
    with connection.connect(target) as conn:
        conn.execute("DELETE FROM pgqueue.op_log")  # no ops of its own: passes the role check
    with pytest.raises(PgQueueError, match="needs an empty replica"):
        replica.attach(leader, target, "busy")
    assert one(target, "SELECT count(*) FROM pgqueue.job") == 1


def test_verify_compares_queue_state_after_the_leader_pruned_its_op_log(cluster: Cluster) -> None:
    leader = cluster.leader
    target = cluster.replica_db(0)
    enqueue_some(leader, 100)
    replica.attach(leader, target, "logical")
    enqueue_some(leader, 50)
    wait_for(lambda: caught_up(leader, "logical"), 30, "the logical replica to catch up")
    assert replica.prune(leader, keep=0) > 0
    enqueue_some(leader, 20)
    wait_for(lambda: caught_up(leader, "logical"), 30, "the logical replica to catch up")
    assert state_differences(leader, target) == []
    result = replica.verify(leader, target)
    assert result.identical, result.differences
    # A real difference is still found.
    with connection.connect(target) as conn:
        conn.execute("UPDATE pgqueue.job SET priority = priority + 1 "
                     "WHERE id = (SELECT min(id) FROM pgqueue.job)")
    result = replica.verify(leader, target)
    assert not result.identical
    assert any(line.startswith("job id ") for line in result.differences), result.differences


# -- promotion ------------------------------------------------------------------------------------


def test_promotion_moves_the_sequences_past_every_id_the_tables_hold(dsn: str) -> None:
    """A replica whose state holds ids its op log no longer shows (the ops that carried them
    are gone, as after a seed from a pruned leader's state) and whose sequences are behind:
    once promoted it hands out no job id of a live job or dead letter, and no lease id a
    job holds."""
    with pgqueue.Queue(dsn) as q:
        q.enqueue_many([pgqueue.NewJob(f"job {i}".encode(), max_attempts=1) for i in range(30)])
        leases = q.lease(30)
        newest = max(leases, key=lambda x: x.job_id)
        assert q.nack(newest, error="failed") is True  # the highest job id is a dead letter
    with connection.connect(dsn) as conn:
        conn.execute("DELETE FROM pgqueue.op_log WHERE job_id IS NOT NULL")
        conn.execute("SELECT setval('pgqueue.job_id_seq', 1, false), "
                     "setval('pgqueue.lease_id_seq', 1, false)")
        conn.execute("SELECT pgqueue.set_role('replica', 'restored', 'host=old-leader')")
    biggest_job = max(one(dsn, "SELECT max(id) FROM pgqueue.job"),
                      one(dsn, "SELECT max(id) FROM pgqueue.dead_letter"))
    biggest_lease = one(dsn, "SELECT max(lease_id) FROM pgqueue.job")
    assert biggest_job == newest.job_id and biggest_lease is not None
    assert one(dsn, "SELECT coalesce(max(job_id), 0) FROM pgqueue.op_log") < biggest_job

    replica.promote(dsn)
    with pgqueue.Queue(dsn) as q:
        fresh = q.enqueue_many([pgqueue.NewJob(b"after promotion", priority=9) for _ in range(3)])
        got = q.lease(3)
    assert min(fresh) > biggest_job
    assert sorted(x.job_id for x in got) == sorted(fresh)
    assert min(x.lease_id for x in got) > biggest_lease



@pytest.mark.parametrize("method", ["logical", "follow"])
def test_promotion_under_load_loses_no_job_and_reuses_no_id(cluster: Cluster, method: str) -> None:
    leader = cluster.leader
    new_leader = cluster.replica_db(0)
    dsns = [leader, new_leader]
    if method == "logical":
        replica.attach(leader, new_leader, "standby")
    else:
        ft = cluster.follow(new_leader, "standby")
        wait_for(lambda: ft.follower.polls > 0 or ft.error, 30, "the follower's first poll")
        assert ft.error is None, ft.error

    app = pgqueue.App()
    handled: Counter[int] = Counter()
    handled_lock = threading.Lock()

    @app.job("work")
    def work(job: pgqueue.JobContext) -> None:
        with handled_lock:
            handled[job.job_id] += 1
        time.sleep(0.002)

    stop = threading.Event()
    enqueued: list[int] = []
    refused = Counter[str]()
    failures: list[BaseException] = []

    def produce(index: int) -> None:
        try:
            with pgqueue.Queue(dsns, stream="work") as q:
                n = 0
                while not stop.is_set():
                    try:
                        enqueued.append(q.enqueue(f"{index}-{n}".encode(), kind="work"))
                        n += 1
                    except (NotLeader, ConnectionFailed) as exc:  # no leader for a moment
                        refused[type(exc).__name__] += 1
                        time.sleep(0.02)
                    time.sleep(0.001)
        except BaseException as exc:
            failures.append(exc)

    workers = [pgqueue.Worker(app, dsns, streams=["work"], concurrency=3, visibility_timeout=5.0,
                              poll_interval=0.1, maintenance_interval=0.2, grace_period=5.0)
               for _ in range(2)]

    def run_worker(w: pgqueue.Worker) -> None:
        try:
            w.run()
        except BaseException as exc:
            failures.append(exc)

    producers = [threading.Thread(target=produce, args=(i,), daemon=True) for i in range(2)]
    runners = [threading.Thread(target=run_worker, args=(w,), daemon=True) for w in workers]
    for t in producers + runners:
        t.start()
    try:
        try:
            wait_for(lambda: len(enqueued) >= 600 and sum(handled.values()) >= 300, 60,
                     "jobs to flow through the old leader")
            before = replica.promote(new_leader, old_leader_dsn=leader, timeout=60)
            promoted_at = len(enqueued)
            wait_for(lambda: len(enqueued) >= promoted_at + 600, 60,
                     "producers to carry on against the new leader")
        finally:
            stop.set()
            for t in producers:
                t.join(30)
        wait_for(lambda: one(new_leader, "SELECT count(*) FROM pgqueue.job WHERE stream = 'work'") == 0,
                 60, "the workers to finish every job on the new leader")
    finally:
        for w in workers:
            w.stop()
        for t in runners:
            t.join(30)
    assert failures == []
    assert before.old_leader_reached and before.epoch == 2 and before.notes == []
    assert all(w.dsn == new_leader for w in workers)

    old_ops = ops_of(leader)
    new_ops = ops_of(new_leader)
    # Nothing the old leader committed is missing on the new one.
    missing = set(old_ops) - set(new_ops)
    assert not missing, f"{len(missing)} op(s) of the old leader never reached the new one"
    old_max_job = max(r[3] or 0 for r in old_ops)
    old_max_lease = max(r[4] or 0 for r in old_ops)
    later = [r for r in new_ops if r[0] > max(r[0] for r in old_ops)]
    assert later, "nothing was written to the new leader"
    # New job and lease ids are past every old one, and no id was handed out twice.
    assert all(r[3] > old_max_job for r in later if r[2] == "Enqueue")
    assert all(r[4] > old_max_lease for r in later if r[2] == "Lease")
    enqueues = [r[3] for r in new_ops if r[2] == "Enqueue"]
    assert len(enqueues) == len(set(enqueues))
    leases = [r[4] for r in new_ops if r[2] == "Lease"]
    assert len(leases) == len(set(leases))
    # Every job enqueued through either leader was acked exactly once, and handled.
    assert len(enqueued) == len(set(enqueued))
    assert set(enqueued) == set(enqueues)
    acks = Counter(r[3] for r in new_ops if r[2] == "Ack")
    assert {j for j in enqueued if acks[j] != 1} == set()
    assert one(new_leader, "SELECT count(*) FROM pgqueue.dead_letter") == 0
    assert set(handled) == set(enqueued)
    assert any(j > old_max_job for j in enqueued)

    # The old leader refuses writes and names the new one.
    with pgqueue.Queue(leader, stream="work") as old, pytest.raises(NotLeader) as caught:
        old.enqueue(b"late")
    assert f"dbname={connection.conninfo_to_dict(new_leader)['dbname']}" in str(caught.value)
    assert replica.role(leader)["role"] == "replica"
    assert replica.role(new_leader)["role"] == "leader"


def test_a_write_in_flight_when_the_old_leader_is_demoted_is_not_lost(cluster: Cluster) -> None:
    """A transaction that checked the role just before the demotion committed may still
    commit on the old leader: promote must wait for it (so its op reaches the new leader) or
    it must fail; either way the new leader must not hand out its job id again."""
    leader = cluster.leader
    new_leader = cluster.replica_db(0)
    with pgqueue.Queue(leader) as q:
        q.enqueue(b"before")
        replica.attach(leader, new_leader, "standby")
        blocker = connection.connect(leader, autocommit=False)
        blocker.execute("SELECT 1 FROM pgqueue.node FOR UPDATE")  # holds the demotion back
        promoted: dict[str, Any] = {}

        def promote() -> None:
            try:
                promoted["result"] = replica.promote(new_leader, old_leader_dsn=leader, timeout=60)
            except BaseException as exc:
                promoted["error"] = exc

        promoter = threading.Thread(target=promote, daemon=True)
        promoter.start()
        wait_for(lambda: one(leader, "SELECT count(*) FROM pg_stat_activity WHERE datname = "
                                     "current_database() AND wait_event_type = 'Lock' "
                                     "AND query LIKE '%set_role%'"), 10, "the demotion to wait")
        writer = connection.connect(leader, autocommit=False)
        written: dict[str, Any] = {}
        commit = threading.Event()

        def write() -> None:
            try:
                written["id"] = q.enqueue(b"in flight", conn=writer)
                commit.wait(30)
                writer.commit()
                written["committed"] = True
            except (PgQueueError, psycopg.Error) as exc:
                written["error"] = exc
                writer.rollback()

        writing = threading.Thread(target=write, daemon=True)
        writing.start()
        wait_for(lambda: written or one(
            leader, "SELECT count(*) FROM pg_stat_activity WHERE pid = %s "
                    "AND wait_event_type = 'Lock'", [writer.info.backend_pid]),
            10, "the write to be done, or to wait for a lock (behind the demotion's)")
        blocker.commit()
        promoter.join(3.0)
        commit.set()
        writing.join(30)
        promoter.join(60)
        blocker.close()
        writer.close()
    assert "error" not in promoted, promoted
    if written.get("committed"):
        jid = written["id"]
        on_new = one(new_leader, "SELECT count(*) FROM pgqueue.op_log WHERE op = 'Enqueue' "
                                 "AND job_id = %s", [jid])
        assert on_new == 1, (f"job {jid} committed on the old leader after promote() returned "
                             "and never reached the new leader")
    with pgqueue.Queue(new_leader) as nq:
        new_id = nq.enqueue(b"after")
    old_ids = {r[0] for r in rows(leader, "SELECT job_id FROM pgqueue.op_log WHERE op = 'Enqueue'")}
    assert new_id not in old_ids, f"the new leader handed out job id {new_id} again"


def test_promote_without_the_old_leader_says_what_may_be_lost(cluster: Cluster) -> None:
    leader = cluster.leader
    target = cluster.replica_db(0)
    ids = enqueue_some(leader, 30)
    follower = replica.Follower(leader, target, "orphan")
    follower.setup()
    while follower.poll() > 0:
        pass
    result = replica.promote(target, old_leader_dsn="host=127.0.0.1 port=1 dbname=gone "
                                                    f"password={PASSWORD} connect_timeout=1")
    assert result.old_leader_reached is False
    assert result.epoch == 2
    assert result.notes and "lost" in result.notes[0]
    assert all(PASSWORD not in note for note in result.notes)
    # The old leader was not demoted (it was out of reach); what it writes now must not reach
    # the promoted database through the follower, which stops instead.
    with pgqueue.Queue(leader) as old:
        stray = old.enqueue(b"split brain")
    assert follower.poll() == -1
    assert not rows(target, "SELECT 1 FROM pgqueue.op_log WHERE job_id = %s", [stray])
    with pgqueue.Queue(target) as q:
        assert q.enqueue(b"new") > max(ids)
        assert len(q.lease(5)) == 5


# -- attach needs logical decoding -------------------------------------------------------------------


def test_attach_refuses_a_leader_without_wal_level_logical_and_follow_works(
        cluster: Cluster) -> None:
    plain = Server({"wal_level": "replica"}).start()
    try:
        leader = plain.new_database(migrated=True)
        enqueue_some(leader, 20)
        target = cluster.replica_db(0)
        with pytest.raises(PgQueueError) as caught:
            replica.attach(leader, target, "nope")
        message = str(caught.value)
        assert "wal_level=replica" in message and "follow" in message
        assert one(target, "SELECT to_regclass('pgqueue.node') IS NULL") is True
        follower = replica.Follower(leader, target, "fallback")
        follower.setup()
        while follower.poll() > 0:
            pass
        assert_identical(leader, target)
    finally:
        plain.destroy()



def _xid(dsn: str) -> int:
    return int(one(dsn, "SELECT pg_current_xact_id()::text::bigint"))


def test_a_follower_of_a_promoted_replica_applies_the_ops_another_leader_wrote(
        cluster: Cluster) -> None:
    """Found by the chaos soak: a promoted replica's ops from before its promotion carry the
    old leader's xids. Its own transaction counter may be far behind them, so a follow reader
    of the new leader (which takes only ops below its snapshot's xmin) skipped them, applied
    later ops first, and then reported lag 0."""
    leader = cluster.leader
    logical_db, follow_db = cluster.replica_db(0), cluster.replica_db(1)
    replica.attach(leader, logical_db, "logical")
    # the old leader's xids run well ahead of the replica server's own counter
    gap = max(0, _xid(logical_db) - _xid(leader)) + 300
    with connection.connect(leader) as conn:
        for _ in range(gap):
            conn.execute("SELECT pg_current_xact_id()")
    assert _xid(leader) > _xid(logical_db) + 200
    first = cluster.follow(follow_db, "follower")
    with pgqueue.Queue(leader) as q:
        job_id = q.enqueue(b"a", dedup_key="k")
        wait_for(lambda: caught_up(leader, "follower", "logical"), 60, "both replicas")
        first.stop()
        (lease,) = q.lease(limit=1)
        q.ack(lease)  # the follow replica has not seen the lease or the ack
        more = q.enqueue_many([pgqueue.NewJob(b"b"), pgqueue.NewJob(b"c")])
    wait_for(lambda: caught_up(leader, "logical"), 60, "the logical replica")
    replica.promote(logical_db, old_leader_dsn=leader)
    # the follower now reads the promoted replica (a new process in real life)
    cluster.followers.append(FollowerThread(logical_db, follow_db, "follower").start())
    with pgqueue.Queue(logical_db) as q:
        again = q.enqueue(b"a again", dedup_key="k")  # the key is free: job a was acked
    assert again not in (job_id, *more)
    wait_for(lambda: caught_up(logical_db, "follower"), 60, "the follower of the new leader")
    assert_identical(logical_db, follow_db)
    assert one(follow_db, "SELECT count(*) FROM pgqueue.job WHERE id = %s", [job_id]) == 0


def test_a_follower_whose_leader_backend_is_terminated_mid_poll_carries_on(
        cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by the chaos soak: a terminated backend surfacing at the poll's commit or
    rollback (raised by the driver, not a query) ended `pgqueue replica follow`."""
    leader, follow_db = cluster.leader, cluster.replica_db(1)
    enqueue_some(leader, 10, settle=False)
    real_fetch = queries.fetch
    terminated: list[int] = []

    def fetch(conn: Any, name: str, params: Any = None) -> Any:
        found = real_fetch(conn, name, params)
        if name == "oplog_committed_batch" and not found and not terminated:
            pid = conn.info.backend_pid
            with connection.connect(leader) as other:
                other.execute("SELECT pg_terminate_backend(%s)", [pid])
            terminated.append(pid)
        return found

    monkeypatch.setattr(queries, "fetch", fetch)  # the follower's module calls it through here
    ft = cluster.follow(follow_db, "follower")
    wait_for(lambda: terminated, 30, "the follower's leader backend to be terminated mid-poll")
    enqueue_some(leader, 5, settle=False)
    wait_for(lambda: caught_up(leader, "follower") or ft.error, 60, "the follower to go on")
    assert ft.error is None and ft.thread.is_alive()
    assert_identical(leader, follow_db)


def test_metrics_report_replica_lag_and_replicas_keep_their_own_job_counts(
        cluster: Cluster) -> None:
    """The leader's scrape reports each replica's lag; a replica's job counts, kept by the
    count triggers also inside the subscription's apply (ENABLE ALWAYS) and a follower's
    ingest, equal its tables."""
    from pgqueue.telemetry.metrics import database_registry
    from tests.integration.telemetry.test_metrics import scrape, serving, true_counts, value

    leader = cluster.leader
    logical_db, follow_db = cluster.replica_db(0), cluster.replica_db(1)
    replica.attach(leader, logical_db, "logical")
    follower = cluster.follow(follow_db, "follower")
    with pgqueue.Queue(leader) as q:
        q.enqueue_many([pgqueue.NewJob(b"x") for _ in range(20)])
        for held in q.lease(limit=5):
            q.ack(held)
        q.lease(limit=3)
    traced = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    traced_id = one(leader, "SELECT pgqueue.enqueue_one('default', 'x', NULL, 0, NULL, NULL, "
                            "NULL, NULL, NULL, p_trace => %s)", (Jsonb(traced),))
    with serving(database_registry(leader)) as url:
        wait_for(lambda: value(scrape(url), "pgqueue_replica_lag_ops", replica="logical") == 0
                 and value(scrape(url), "pgqueue_replica_lag_ops", replica="follower") == 0,
                 30, "both replicas to catch up")
        follower.stop()
        with pgqueue.Queue(leader) as q:
            q.enqueue_many([pgqueue.NewJob(b"y") for _ in range(7)])
        samples = scrape(url)
        lag_seconds = value(samples, "pgqueue_replica_lag_seconds", replica="follower")
    assert (value(samples, "pgqueue_replica_lag_ops", replica="follower") or 0) >= 7
    assert lag_seconds is not None and lag_seconds >= 0
    wait_for(lambda: true_counts(logical_db) == true_counts(leader), 30,
             "the logical replica to apply the last enqueue")
    for db in (logical_db, follow_db):
        with pgqueue.Queue(db) as rq:
            kept = {k: n for k, n in rq.gauges().jobs.items() if n}
        assert kept == true_counts(db), db
        # both replica paths carry the trace context the job was enqueued with
        assert one(db, "SELECT trace_context FROM pgqueue.job WHERE id = %s",
                   (traced_id,)) == traced


def test_both_replicas_follow_the_leader_around_its_op_log_ring(cluster: Cluster) -> None:
    """The leader's ring moves on to its next partition (seqs past 2^32) and truncates the
    one it left once both replicas applied it: both replicas hold the same ops in the same
    partitions, stay identical, and keep their own copy of the truncated ops (the retention
    is each database's own; TRUNCATE is not replicated)."""
    from pgqueue.client import oplog as pg_oplog

    leader = cluster.leader
    logical_db, follow_db = cluster.replica_db(0), cluster.replica_db(1)
    enqueue_some(leader, 40)
    replica.attach(leader, logical_db, "logical")
    follower = cluster.follow(follow_db, "follower")
    try:
        wait_for(lambda: caught_up(leader, "logical", "follower"), 30, "both replicas")
        first = ops_of(leader)
        with connection.connect(leader) as conn:
            pg_oplog.set_retention(conn, 2.4)
            wait_for(lambda: pg_oplog.recycle(conn)[1], 20, "the leader's ring to move on")
        enqueue_some(leader, 40)
        wait_for(lambda: caught_up(leader, "logical", "follower"), 30, "both replicas")
        later = [op for op in ops_of(leader) if op[0] > first[-1][0]]
        assert later and all(op[0] >> 32 == (first[-1][0] >> 32) + 1 for op in later)
        for db in (logical_db, follow_db):
            where = rows(db, "SELECT tableoid::regclass::text, seq FROM pgqueue.op_log "
                             "WHERE seq > %s", [first[-1][0]])
            assert {w[0] for w in where} == {f"pgqueue.op_log_{(later[0][0] >> 32) % 32}"}
        with connection.connect(leader) as conn:
            pruned = wait_for(lambda: pg_oplog.recycle(conn)[0] or None, 30,
                              "the leader to truncate the partition both replicas applied")
        assert pruned == len(first)
        assert ops_of(leader) == later
        enqueue_some(leader, 10)
    finally:
        follower.stop()
    follower = cluster.follow(follow_db, "follower")
    try:
        wait_for(lambda: caught_up(leader, "logical", "follower"), 30, "both replicas")
    finally:
        follower.stop()
    for db in (logical_db, follow_db):
        result = replica.verify(leader, db)
        assert result.identical, result.differences[:20]
        assert state_differences(leader, db) == []
        # every op the leader still keeps, and the ones it truncated before them
        assert ops_of(db) == first + ops_of(leader)
