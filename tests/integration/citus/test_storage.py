"""pgqueue's rings on a Citus cluster: a maintenance pass folds the counts' deltas and empties
the ready entries' and the lease expiries' past partitions on every node, shard group by shard
group, each a transaction of one node (revision 0019)."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

import pgqueue
from pgqueue.db import connection, queries
from pgqueue.maintenance import maintain
from tests.citusbed import CitusBed, CitusDatabase, function_calls, stream_group, two_phase_commits
from tests.dbhelp import ring_bytes, wait_for

STREAMS = [f"ring-{i}" for i in range(8)]


@pytest.fixture
def cdb(citus_bed: CitusBed) -> Iterator[CitusDatabase]:
    db = citus_bed.new_database()
    yield db
    citus_bed.drop(db)


def _scalar(conn: queries.Conn, sql: str) -> int:
    row = conn.execute(sql).fetchone()
    assert row is not None
    return int(row[0])


def test_a_maintenance_pass_keeps_every_node_s_rings_small(cdb: CitusDatabase) -> None:
    """Jobs leased, acked and left to expire in streams on both workers: passes reclaim the
    expired leases, and then (once the rings' periods are past) leave no count delta, no lease
    expiry and no ready entry but those of ready jobs, by truncation on each node; the counts
    stay exact throughout; the upkeep ran on both workers, with no two-phase commit."""
    groups = {s: stream_group(cdb, s) for s in STREAMS}
    assert set(groups.values()) == {1, 2}
    for stream in STREAMS:
        with pgqueue.Queue(cdb.dsn, stream=stream) as q:
            q.enqueue_many([pgqueue.NewJob(b"x") for _ in range(20)])
            held = q.lease(limit=20, visibility_timeout=0.5)
            assert len(held) == 20
            for lease in held[:10]:
                q.ack(lease)
    before = {g: function_calls(cdb.worker_dsns[g - 1]).get("recycle_rings", 0) for g in (1, 2)}
    prepared = two_phase_commits(cdb)
    with connection.connect(cdb.dsn) as conn, pgqueue.Queue(cdb.dsn) as q:
        true = "SELECT stream, state, count(*) FROM pgqueue.job GROUP BY stream, state"

        def kept_small() -> bool:
            maintain.run_pass(conn, vacuum=False)
            kept = {k: v for k, v in q.gauges().jobs.items() if v}
            assert kept == {(s, st): n for s, st, n in conn.execute(true).fetchall()}
            return (_scalar(conn, "SELECT count(*) FROM pgqueue.job_count_delta") == 0
                    and ring_bytes(conn, "pgqueue.job_count_delta") == 0
                    and _scalar(conn, "SELECT count(*) FROM pgqueue.lease_expiry") == 0
                    and ring_bytes(conn, "pgqueue.lease_expiry") == 0
                    and _scalar(conn, "SELECT count(*) FROM pgqueue.ready")
                    == _scalar(conn, "SELECT count(*) FROM pgqueue.job WHERE state = 'pending'"))

        wait_for(kept_small, 60, "the rings emptied on both nodes", interval=0.5)
        assert _scalar(conn, "SELECT count(*) FROM pgqueue.job WHERE state = 'pending'") == 80
    after = {g: function_calls(cdb.worker_dsns[g - 1]).get("recycle_rings", 0) for g in (1, 2)}
    assert all(after[g] > before[g] for g in (1, 2)), (before, after)
    assert two_phase_commits(cdb) == prepared


def test_a_ring_call_that_names_no_shard_group_is_refused(cdb: CitusDatabase) -> None:
    """On Citus the rings' upkeep must name a stream of the shard group it keeps (the
    maintenance pass does); a bare call is refused, saying so, rather than reading the
    coordinator's empty tables."""
    with connection.connect(cdb.dsn) as conn:
        for fn in ("fold_job_counts", "recycle_ready", "recycle_lease_expiry", "recycle_rings"):
            with pytest.raises(Exception, match="names their stream: pass it as p_stream"):
                conn.execute(f"SELECT pgqueue.{fn}()")


def test_every_shard_group_has_a_key_on_its_own_shard(cdb: CitusDatabase) -> None:
    """citus_shard_keys gives one stream name per shard of the job table, hashed into it."""
    with connection.connect(cdb.dsn) as conn:
        rows = queries.fetch(conn, "citus_shard_keys")
        shards = [int(r[0]) for r in conn.execute(
            "SELECT shardid FROM pg_dist_shard WHERE logicalrelid = 'pgqueue.job'::regclass "
            "ORDER BY shardid").fetchall()]
        assert [int(r["shardid"]) for r in rows] == shards
        for r in rows:
            found = conn.execute("SELECT get_shard_id_for_distribution_column('pgqueue.job', %s::text)",
                                 (r["key"],)).fetchone()
            assert found == (r["shardid"],)


def test_each_node_s_op_log_moves_on_and_is_emptied_past_its_retention(
        cdb: CitusDatabase) -> None:
    """With a retention of one second, passes move each node's op log sequence on to its next
    partition and truncate the partitions left, in every shard group: the log empties, each
    node's seqs keep their group id (k * 1024 + group: unique in the cluster) and go on
    increasing, and no two-phase commit happens."""
    groups = {s: stream_group(cdb, s) for s in STREAMS}
    first: dict[str, int] = {}
    for stream in STREAMS:
        with pgqueue.Queue(cdb.dsn, stream=stream) as q:
            first[stream] = q.enqueue(b"x")
            for lease in q.lease(limit=1):
                q.ack(lease)
    with connection.connect(cdb.dsn) as conn:
        # (a setting: a write of a reference table, committed on every node by 2PC)
        conn.execute("SELECT pgqueue.set_op_log_retention(interval '1 second')")
        prepared = two_phase_commits(cdb)
        last = {s: _scalar(conn, f"SELECT max(seq) FROM pgqueue.op_log WHERE stream = '{s}'")
                for s in STREAMS}
        pruned = 0

        def emptied() -> bool:
            nonlocal pruned
            pruned += maintain.run_pass(conn, vacuum=False).ops_pruned
            return (_scalar(conn, "SELECT count(*) FROM pgqueue.op_log") == 0
                    and ring_bytes(conn, "pgqueue.op_log") == 0)

        wait_for(emptied, 60, "every node's op log emptied past its retention", interval=0.3)
        assert pruned == 3 * len(STREAMS)  # each stream's Enqueue, Lease and Ack
        rings = {str(r[0]) for r in conn.execute(
            "SELECT DISTINCT stream FROM pgqueue.op_log_ring").fetchall()}
        assert rings == {str(r["key"]) for r in queries.fetch(conn, "citus_shard_keys")}
    for stream in STREAMS:
        with pgqueue.Queue(cdb.dsn, stream=stream) as q:
            job_id = q.enqueue(b"after")
        assert job_id > first[stream] and job_id % 1024 == groups[stream]
        with connection.connect(cdb.dsn) as conn:
            seq = _scalar(conn, f"SELECT max(seq) FROM pgqueue.op_log WHERE stream = '{stream}'")
        assert seq > last[stream] and seq % 1024 == groups[stream], (stream, seq, last[stream])
        assert seq >> 32 > last[stream] >> 32  # in a later window of 2^32 seqs: it moved on
    assert two_phase_commits(cdb) == prepared
