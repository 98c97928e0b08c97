"""pgqueue on a Citus cluster (a coordinator and two workers): the distributed layout, and the
worker's transitions, each about one stream, running on the node that holds the stream and
committing there alone."""
from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import psycopg
import pytest

import pgqueue
from pgqueue.client import lease, settle
from pgqueue.client.position import LeasePosition
from pgqueue.db import connection
from tests.citusbed import (
    CitusBed,
    CitusDatabase,
    Cluster,
    function_calls,
    stream_group,
    two_phase_commits,
)
from tests.dbhelp import wait_for

DISTRIBUTED = {"job", "ready", "op_log", "dead_letter", "lease_expiry", "job_count",
               "job_count_delta", "kind_lease", "schedule",
               # reference tables before 0019
               "op_log_ring", "stream_config", "kind_config"}
REFERENCE = {"step_set", "node", "op_log_policy", "schema_history", "layout"}
TRANSITIONS = {"enqueue", "enqueue_one", "lease", "renew", "ack", "nack", "return_leases",
               "mark_undecodable", "end_cancelled", "upcast", "start_rated",
               # the operator's verbs on jobs, and reclaim (0018)
               "release", "rewind", "restart", "skip_step", "accept_step_set", "cancel",
               "requeue_dead_letter", "apply_verb_to_jobs", "reclaim_expired_jobs",
               "reclaim_due_jobs",
               # the rings' upkeep, each call naming a shard group's stream (0019)
               "fold_job_counts", "recycle_ready", "recycle_lease_expiry", "recycle_op_log",
               "recycle_rings",
               # a stream's schedules (0019)
               "upsert_schedule", "advance_schedule", "remove_schedule", "lock_schedule",
               # a stream's settings (0019)
               "configure_stream", "configure_kind_settings", "configure_kind"}
STREAMS = [f"tenant-{i}" for i in range(8)]


@pytest.fixture(scope="module")
def cdb(citus_cluster: Cluster) -> Iterator[CitusDatabase]:
    """A Citus database with the pgqueue schema installed, for the module (each test uses
    streams of its own; installing takes about ten seconds)."""
    db = citus_cluster.new_database()
    pgqueue.migrate(db.dsn)
    yield db
    citus_cluster.drop(db)


@pytest.fixture
def cdsn(cdb: CitusDatabase) -> str:
    """The coordinator's DSN of `cdb`."""
    return cdb.dsn


def test_upgrade_lays_the_schema_out_by_stream(cdb: CitusDatabase, cdsn: str) -> None:
    with psycopg.connect(cdsn) as conn:
        tables = {str(name).removeprefix("pgqueue."): (method, column, colocation)
                  for name, method, column, colocation in conn.execute(
                      "SELECT logicalrelid::regclass::text, partmethod,"
                      " column_to_column_name(logicalrelid, partkey), colocationid"
                      " FROM pg_dist_partition"
                      " WHERE logicalrelid::regclass::text LIKE 'pgqueue.%'"
                      "   AND NOT (SELECT relispartition FROM pg_class WHERE oid = logicalrelid)")}
        functions = {str(name): int(arg) for name, arg in conn.execute(
            "SELECT p.proname, o.distribution_argument_index FROM pg_dist_object o"
            " JOIN pg_proc p ON o.classid = 'pg_proc'::regclass AND p.oid = o.objid"
            " WHERE p.pronamespace = 'pgqueue'::regnamespace"
            "   AND o.distribution_argument_index IS NOT NULL")}
        stream_args = {str(name): [str(a) for a in args].index("p_stream") for name, args in
                       conn.execute("SELECT proname, proargnames FROM pg_proc"
                                    " WHERE pronamespace = 'pgqueue'::regnamespace"
                                    "   AND proname = ANY(%s)", (list(TRANSITIONS),))}
    assert {t for t, (method, _, _) in tables.items() if method == "h"} == DISTRIBUTED
    assert {tables[t][1] for t in DISTRIBUTED} == {"stream"}
    assert len({tables[t][2] for t in DISTRIBUTED}) == 1  # all colocated with job
    assert {t for t, (method, _, _) in tables.items() if method == "n"} == REFERENCE
    assert functions == stream_args  # every transition, on its p_stream argument
    assert set(functions) == TRANSITIONS
    # idempotent: a second upgrade changes nothing
    pgqueue.migrate(cdsn)


def test_an_upgrade_of_a_laid_out_cluster_reloads_its_code_there(citus_db: CitusDatabase) -> None:
    """A database laid out at the previous revision (0018) upgrades to head on Citus: the
    revision's code, count triggers included, loads on the distributed tables, the new
    transitions are distributed on their stream, and the queue works across the upgrade."""
    from pgqueue.db import schema

    schema.upgrade(citus_db.dsn, "0018")
    with psycopg.connect(citus_db.dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pgqueue.enqueue_one('tenant-up', 'before')").fetchone()
        assert row is not None
        before = int(row[0])
    pgqueue.migrate(citus_db.dsn)
    with psycopg.connect(citus_db.dsn) as conn:
        assert conn.execute("SELECT max(revision) FROM pgqueue.schema_history").fetchone() == (
            schema.head(),)
        distributed = {str(r[0]) for r in conn.execute(
            "SELECT p.proname FROM pg_dist_object o"
            " JOIN pg_proc p ON o.classid = 'pg_proc'::regclass AND p.oid = o.objid"
            " WHERE p.pronamespace = 'pgqueue'::regnamespace"
            "   AND o.distribution_argument_index IS NOT NULL")}
        assert distributed == TRANSITIONS
    with pgqueue.Queue(citus_db.dsn, stream="tenant-up") as q:
        after = q.enqueue(b"after")
        held = q.lease(limit=2)
        assert [h.job_id for h in held] == [before, after]
        for h in held:
            q.ack(h)
        assert q.stats() == []


def _catalog(dsn: str) -> dict[str, str]:
    """The schema's catalog (as the one-server catalog test reads it) and the distributed
    layout's."""
    from pgqueue.db import queries, schema

    with psycopg.connect(dsn) as conn:
        layout = {str(r["object"]): str(r["definition"] or "")
                  for r in queries.fetch(conn, "citus_catalog")}
    return {**schema.catalog(dsn), **layout}


def test_the_revisions_and_a_fresh_install_build_the_same_cluster(
        citus_bed: CitusBed, citus_db: CitusDatabase) -> None:
    """On Citus as on one server: a database laid out at 0017 (the first revision with the
    distributed layout) and upgraded to head holds the same schema, on the coordinator and on
    each worker, and the same distribution of tables and functions as one installed at head."""
    from pgqueue.db import schema

    schema.upgrade(citus_db.dsn, "0017")
    schema.upgrade(citus_db.dsn)
    installed = citus_bed.new_database()
    try:
        fresh, upgraded = _catalog(installed.dsn), _catalog(citus_db.dsn)
        # every function on every node, the transitions distributed by their stream
        assert {k.removeprefix("distributed ") for k in fresh
                if k.startswith("distributed function ")} == {
            k for k in fresh if k.startswith("function ")}
        assert {k.split("(")[0].removeprefix("distributed function pgqueue.")
                for k, v in fresh.items()
                if k.startswith("distributed function ") and v.endswith("forced t")} == TRANSITIONS
        diff = schema.catalog_diff(upgraded, fresh, names=("revisions", "install"))
        assert not diff, "catalogs differ:\n" + "\n".join(diff)
        for worker_fresh, worker_upgraded in zip(installed.worker_dsns, citus_db.worker_dsns,
                                                 strict=True):
            diff = schema.catalog_diff(schema.catalog(worker_upgraded),
                                       schema.catalog(worker_fresh),
                                       names=("revisions", "install"))
            assert not diff, "a worker's catalogs differ:\n" + "\n".join(diff)
    finally:
        citus_bed.drop(installed)


def test_a_stream_s_calls_run_on_its_node_and_commit_there_alone(
        cdb: CitusDatabase, cdsn: str) -> None:
    groups = {s: stream_group(cdb, s) for s in STREAMS}
    assert set(groups.values()) == {1, 2}  # the streams are spread over both workers
    before = [function_calls(d) for d in cdb.worker_dsns]
    coordinator_before = function_calls(cdsn)
    twopc = two_phase_commits(cdb)
    done: dict[str, set[int]] = {}
    for stream in STREAMS:
        with pgqueue.Queue(cdsn, stream=stream) as q:
            ids = [q.enqueue(b"one"), *q.enqueue_many([pgqueue.NewJob(b"a"), pgqueue.NewJob(b"b"),
                                                        pgqueue.NewJob(b"c")])]
            # ids and lease ids were drawn on the node holding the stream
            assert {i % 1024 for i in ids} == {groups[stream]}
            held = q.lease(limit=4)
            assert sorted(h.job_id for h in held) == sorted(ids)
            assert {h.lease_id % 1024 for h in held} == {groups[stream]}
            assert set(q.renew_many([(h, None, None) for h in held])) == {h.lease_id for h in held}
            done[stream] = q.ack_many(held[:2])
            assert q.nack(held[2], error="boom", retry_in=60) is False  # not dead: scheduled
            q.return_lease(held[3])
            assert {s.state: s.count for s in q.stats()} == {"pending": 1, "scheduled": 1}
    assert all(len(acked) == 2 for acked in done.values())
    assert two_phase_commits(cdb) == twopc
    calls = ["enqueue", "enqueue_one", "lease", "renew", "ack", "nack", "return_leases"]

    def ran_on_workers() -> bool:
        """Each call ran once per stream, on the worker holding the stream (group 1 is the
        first worker, group 2 the second)."""
        after = [function_calls(d) for d in cdb.worker_dsns]
        return all(after[i].get(name, 0) - before[i].get(name, 0)
                   == sum(1 for g in groups.values() if g == i + 1)
                   for name in calls for i in range(2))

    wait_for(ran_on_workers, timeout=20, what="the calls counted on the workers")
    coordinator = function_calls(cdsn)
    for name in calls:  # none of them ran on the coordinator
        assert coordinator.get(name, 0) == coordinator_before.get(name, 0), name


def test_a_transaction_about_streams_on_two_nodes_is_a_two_phase_commit(
        cdb: CitusDatabase, cdsn: str) -> None:
    """What the README says differs on Citus: one transaction enqueueing into streams held by
    two nodes commits on both, by two-phase commit (and the counter the test above reads sees
    it). Inside the caller's transaction each enqueue still runs on its stream's node: its id
    comes from that node, as the stream's other ids do."""
    streams = [f"orders-{i}" for i in range(8)]
    groups = {s: stream_group(cdb, s) for s in streams}
    a = next(s for s in streams if groups[s] == 1)
    b = next(s for s in streams if groups[s] == 2)
    twopc = two_phase_commits(cdb)
    with psycopg.connect(cdsn) as conn, conn.transaction():  # one stream: one node
        with pgqueue.Queue(cdsn, stream=a) as qa:
            first = [qa.enqueue(b"1", conn=conn), qa.enqueue(b"2", conn=conn)]
    assert [i % 1024 for i in first] == [1, 1] and first[0] < first[1]
    assert two_phase_commits(cdb) == twopc
    with pgqueue.Queue(cdsn, stream=a) as qa:
        assert [j.job_id for j in qa.lease(limit=5)] == first
    with psycopg.connect(cdsn) as conn, conn.transaction():
        with pgqueue.Queue(cdsn, stream=a) as qa, pgqueue.Queue(cdsn, stream=b) as qb:
            ids = [qa.enqueue(b"x", conn=conn), qb.enqueue(b"y", conn=conn)]
    assert [i % 1024 for i in ids] == [1, 2]
    assert two_phase_commits(cdb) > twopc
    with pgqueue.Queue(cdsn, stream=a) as qa, pgqueue.Queue(cdsn, stream=b) as qb:
        assert [j.job_id for j in qa.lease(limit=5)] + [j.job_id for j in qb.lease(limit=5)] == ids


def test_a_worker_s_leases_after_its_position_and_with_a_request_token(cdsn: str) -> None:
    """The lease's other paths on Citus: after where the caller's last lease ended (what a
    Worker does), and re-sent with its request token after a lost reply (the same leases come
    back, not new ones); in priority order, then id."""
    stream = "positioned"
    with pgqueue.Queue(cdsn, stream=stream) as q:
        low = q.enqueue_many([pgqueue.NewJob(b"l", priority=1) for _ in range(3)])
        high = q.enqueue_many([pgqueue.NewJob(b"h", priority=5) for _ in range(3)])
    position = LeasePosition(rescan_seconds=3600)
    taken: list[int] = []
    with connection.connect(cdsn) as conn:
        while held := lease.lease(conn, stream, 2, 60, 0, 0, position=position):
            taken += [h.job_id for h in held]
            assert settle.ack_many(conn, held) == {h.job_id for h in held}
        assert taken == high + low
        token = uuid.uuid4()
        with pgqueue.Queue(cdsn, stream=stream) as q:
            more = q.enqueue_many([pgqueue.NewJob(b"m") for _ in range(2)])
        first = lease.lease(conn, stream, 5, 60, 0, 0, request=token)
        again = lease.lease(conn, stream, 5, 60, 0, 0, request=token, resent=True)
        assert [h.job_id for h in first] == more
        assert [(h.job_id, h.lease_id) for h in again] == [(h.job_id, h.lease_id) for h in first]


def test_async_queue_on_the_cluster(cdb: CitusDatabase, cdsn: str) -> None:
    """AsyncQueue sends the same statements: its calls run on the stream's node too."""
    stream = "async-orders"
    group = stream_group(cdb, stream)

    async def main() -> tuple[list[int], list[int], set[int]]:
        async with pgqueue.AsyncQueue(cdsn, stream=stream) as q:
            ids = await q.enqueue_many([pgqueue.NewJob(b"a"), pgqueue.NewJob(b"b")])
            held = await q.lease(limit=5)
            acked = await q.ack_many(held)
            return ids, [h.lease_id for h in held], acked

    ids, lease_ids, acked = asyncio.run(main())
    assert {i % 1024 for i in ids + lease_ids} == {group}
    assert acked == set(ids)
