"""pgqueue on a Citus cluster beyond the worker's transitions: the operator's verbs, reclaim
and cron ticks each run on the node holding their stream, and a stream's ops stay in one
order; a call that does not name its stream is refused with the way to name it."""
from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterator

import psycopg
import pytest

import pgqueue
from pgqueue.client import reclaim, schedule
from pgqueue.db import connection
from tests.citusbed import CitusDatabase, Cluster, function_calls, stream_group
from tests.dbhelp import wait_for

STREAMS = [f"ops-{i}" for i in range(8)]


@pytest.fixture(scope="module")
def cdb(citus_cluster: Cluster) -> Iterator[CitusDatabase]:
    """A migrated Citus database for the module (each test uses streams of its own)."""
    db = citus_cluster.new_database()
    pgqueue.migrate(db.dsn)
    yield db
    citus_cluster.drop(db)


def seqs_of(dsn: str, job_id: int) -> list[tuple[int, str]]:
    """The job's ops as (seq, op), in seq order."""
    with psycopg.connect(dsn) as conn:
        return [(int(s), str(o)) for s, o in conn.execute(
            "SELECT seq, op FROM pgqueue.op_log WHERE job_id = %s ORDER BY seq", (job_id,))]


def calls_on(db: CitusDatabase, group: int, name: str) -> int:
    return function_calls(db.worker_dsns[group - 1]).get(name, 0)


def test_operator_verbs_run_on_the_stream_s_node_and_log_after_its_other_ops(
        cdb: CitusDatabase) -> None:
    """cancel, requeue and the bulk verbs name the job's stream: each runs on the node holding
    it, so its op's seq comes from that node's sequence, after the job's earlier ops (which
    is the order a replay follows)."""
    groups = {s: stream_group(cdb, s) for s in STREAMS[:4]}
    assert set(groups.values()) == {1, 2}
    for stream, group in groups.items():
        before = {name: calls_on(cdb, group, name)
                  for name in ("cancel", "requeue_dead_letter", "apply_verb_to_jobs")}
        with pgqueue.Queue(cdb.dsn, stream=stream) as q:
            leased_id = q.enqueue(b"leased")
            dead_id = q.enqueue(b"dead", max_attempts=1)
            bulk = q.enqueue_many([pgqueue.NewJob(b"bulk") for _ in range(3)])
            held = {h.job_id: h for h in q.lease(limit=2)}
            assert q.nack(held[dead_id], error="boom") is True
            with connection.connect(cdb.dsn) as listener:
                listener.execute("LISTEN pgqueue_cancel")
                assert q.cancel(leased_id) == "requested"
                # the worker holding the lease is told on the coordinator, where it listens
                notes = list(listener.notifies(timeout=5.0, stop_after=1))
                assert [n.payload for n in notes] == [str(held[leased_id].lease_id)]
            q.requeue_dead_letter(dead_id)
            result = q.act_on_jobs("cancel", stream=stream, state="pending")
            assert (result.done, result.refused) == (4, 0)  # the requeued one and the bulk
        for job_id in (leased_id, dead_id, *bulk):
            ops = seqs_of(cdb.dsn, job_id)
            assert {seq % 1024 for seq, _ in ops} == {group}, (stream, ops)
        assert [op for _, op in seqs_of(cdb.dsn, leased_id)] == ["Enqueue", "Lease",
                                                                 "RequestCancel"]
        assert [op for _, op in seqs_of(cdb.dsn, dead_id)] == [
            "Enqueue", "Lease", "Nack", "RequeueDeadLetter", "Cancel"]

        def counted(group: int = group, before: dict[str, int] = before) -> bool:
            return all(calls_on(cdb, group, name) > before[name] for name in before)

        wait_for(counted, timeout=20, what=f"the verbs counted on the node of {stream}")


def test_a_call_that_does_not_name_its_stream_is_refused_saying_how(cdb: CitusDatabase) -> None:
    """On one server `SELECT * FROM pgqueue.release(42)` finds the job's stream itself; on
    Citus that call would run on the coordinator and log its op out of the stream's order,
    so it is refused, naming the argument (and nothing changed)."""
    with pgqueue.Queue(cdb.dsn, stream="ops-psql") as q:
        job_id = q.enqueue(b"x")
    with psycopg.connect(cdb.dsn) as conn:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="p_stream"):
            conn.execute("SELECT pgqueue.cancel(%s)", (job_id,))
        conn.rollback()
        # the wrong stream finds nothing there, and the error says where it looked
        with pytest.raises(psycopg.Error, match=f"no job {job_id} in stream ops-other"):
            conn.execute("SELECT pgqueue.cancel(%s, p_stream => 'ops-other')", (job_id,))
        conn.rollback()
        with pytest.raises(psycopg.Error, match=f"no live job {job_id} in stream ops-other"):
            conn.execute("SELECT pgqueue.release(%s, p_stream => 'ops-other')", (job_id,))
        conn.rollback()
        assert conn.execute("SELECT pgqueue.cancel(%s, p_stream => 'ops-psql')",
                            (job_id,)).fetchone() == ("cancelled",)


def test_expired_leases_are_reclaimed_on_their_streams_nodes_each_once(
        cdb: CitusDatabase) -> None:
    """Reclaim on Citus goes stream by stream (a lock is taken on one node only): every
    expired lease of streams on both nodes comes back once, with the reclaims racing, and the
    Reclaim op follows the Lease op in the stream's order."""
    streams = STREAMS[4:]
    groups = {s: stream_group(cdb, s) for s in streams}
    assert set(groups.values()) == {1, 2}
    leased: dict[int, str] = {}
    for stream in streams:
        with pgqueue.Queue(cdb.dsn, stream=stream) as q:
            q.enqueue_many([pgqueue.NewJob(b"r") for _ in range(5)])
            for h in q.lease(limit=5, visibility_timeout=0.2):
                leased[h.job_id] = stream
    found: list[reclaim.Reclaimed] = []
    lock = threading.Lock()

    def reclaimer() -> None:
        deadline = dt.datetime.now() + dt.timedelta(seconds=20)
        with connection.connect(cdb.dsn) as conn:
            while dt.datetime.now() < deadline:
                got = reclaim.reclaim_expired_jobs(conn)
                with lock:
                    found.extend(got)
                    if len(found) >= len(leased):
                        return

    threads = [threading.Thread(target=reclaimer) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(r.job_id for r in found) == sorted(leased)  # each once
    assert {r.state for r in found} == {"pending"}
    for job_id, stream in leased.items():
        ops = seqs_of(cdb.dsn, job_id)
        assert [op for _, op in ops] == ["Enqueue", "Lease", "Reclaim"]
        assert {seq % 1024 for seq, _ in ops} == {groups[stream]}


def test_three_schedulers_fire_each_tick_of_streams_on_both_nodes_once(
        cdb: CitusDatabase) -> None:
    """Cron on Citus: the due streams first, then each stream's schedules claimed, fired and
    advanced in one transaction of its node. Three schedulers ticking at once for a few
    seconds enqueue every second's tick of every stream exactly once."""
    streams = [f"cron-{i}" for i in range(6)]
    groups = {s: stream_group(cdb, s) for s in streams}
    assert set(groups.values()) == {1, 2}
    with connection.connect(cdb.dsn) as conn:
        for stream in streams:
            schedule.upsert(conn, stream, "every-second", "* * * * * *", b"tick")
    stop = threading.Event()
    errors: list[BaseException] = []

    def scheduler() -> None:
        try:
            with connection.connect(cdb.dsn) as conn:
                while not stop.is_set():
                    schedule.tick(conn)
        except BaseException as exc:  # examined below
            errors.append(exc)

    threads = [threading.Thread(target=scheduler) for _ in range(3)]
    for t in threads:
        t.start()

    def fired() -> bool:
        with psycopg.connect(cdb.dsn) as conn:
            rows = conn.execute("SELECT stream, count(*) FROM pgqueue.job "
                                "WHERE stream LIKE 'cron-%%' GROUP BY stream").fetchall()
        return len(rows) == len(streams) and all(n >= 3 for _, n in rows)

    try:
        wait_for(fired, timeout=30, what="three ticks of every stream")
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert errors == []
    with psycopg.connect(cdb.dsn) as conn:
        enqueues = conn.execute(
            "SELECT stream, pgqueue.op_body(o) ->> 'dedup_key', seq FROM pgqueue.op_log o "
            "WHERE stream LIKE 'cron-%%' AND op = 'Enqueue'").fetchall()
    keys = [(stream, key) for stream, key, _ in enqueues]
    assert len(keys) == len(set(keys))  # no tick fired twice
    assert all(int(seq) % 1024 == groups[stream] for stream, _, seq in enqueues)
    # the schedules' own ops (their upserts, and each tick's advance) too: every op of a
    # stream takes its node's seq, in the stream's one order
    with psycopg.connect(cdb.dsn) as conn:
        schedule_ops = conn.execute(
            "SELECT stream, op, seq FROM pgqueue.op_log "
            "WHERE stream LIKE 'cron-%%' AND op <> 'Enqueue'").fetchall()
    assert {op for _, op, _ in schedule_ops} == {"UpsertSchedule", "UpdateScheduleNextRun"}
    assert all(int(seq) % 1024 == groups[stream] for stream, _, seq in schedule_ops)


def test_a_bulk_cancel_tells_the_workers_holding_its_jobs(cdb: CitusDatabase) -> None:
    """The leased jobs a bulk cancel only asked to stop: their workers are told on the
    coordinator (the streams' nodes do not notify), by the leases they hold now."""
    stream = "ops-bulk"
    with pgqueue.Queue(cdb.dsn, stream=stream) as q:
        q.enqueue_many([pgqueue.NewJob(b"b") for _ in range(3)])
        held = q.lease(limit=3)
        with connection.connect(cdb.dsn) as listener:
            listener.execute("LISTEN pgqueue_cancel")
            result = q.act_on_jobs("cancel", stream=stream, state="leased")
            assert (result.done, result.requested, result.refused) == (0, 3, 0)
            notes = list(listener.notifies(timeout=5.0, stop_after=3))
    assert sorted(int(n.payload) for n in notes) == sorted(h.lease_id for h in held)
