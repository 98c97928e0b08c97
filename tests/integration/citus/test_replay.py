"""A Citus cluster's op log replayed into one server (`pgqueue oplog replay`) reproduces every
stream's state, also for a stream that moved to another node on the way."""
from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

import pgqueue
from pgqueue.cluster import placement
from tests.acceptance.clihelp import as_json
from tests.citusbed import CitusBed, CitusDatabase, stream_group
from tests.dbhelp import state_snapshot

STREAMS = [f"rp-{i}" for i in range(6)]


@pytest.fixture
def cdb(citus_bed: CitusBed) -> Iterator[CitusDatabase]:
    db = citus_bed.new_database()
    yield db
    citus_bed.drop(db)


def _work(dsn: str, stream: str) -> None:
    """Jobs of one stream in every state: pending, scheduled, leased, acked, retried, dead,
    cancelled, returned, dead and requeued."""
    with pgqueue.Queue(dsn, stream=stream) as q:
        # settings (reference tables, written on the coordinator: their ops take its seqs)
        q.configure_stream(retry_base=2.0, quarantine_after=5)
        q.configure_kind("k", max_concurrency=50, rate_limit=(1000, 1.0))
        q.enqueue_many([pgqueue.NewJob(f"{stream}-{i}".encode(), kind="k") for i in range(8)])
        q.enqueue(b"later", delay=3600)
        doomed = q.enqueue(b"doomed", max_attempts=1)
        dead = q.enqueue(b"dead", max_attempts=1)
        held = q.lease(limit=6)
        q.ack(held[0])
        q.ack(held[1])
        q.nack(held[2], error="retry me", retry_in=0)
        q.return_lease(held[3])
        q.cancel(held[4].job_id)
        q.cancel(q.jobs(state="pending")[0].job_id)
        for h in q.lease(limit=20):  # the rest, held; the two single-attempt ones die
            if h.job_id in (doomed, dead):
                q.nack(h, error="boom")
        q.requeue_dead_letter(doomed)


def test_a_cluster_s_op_log_replayed_into_one_server_reproduces_every_stream(
        cdb: CitusDatabase, dsn: str) -> None:
    groups = {s: stream_group(cdb, s) for s in STREAMS}
    assert set(groups.values()) == {1, 2}
    for stream in STREAMS:
        _work(cdb.dsn, stream)
    moved = STREAMS[0]
    other = next(n for n in placement.nodes(cdb.dsn) if n.group != groups[moved])
    placement.place(cdb.dsn, moved, other.address)
    _work(cdb.dsn, moved)  # the same stream again, now on the other node
    result = as_json(None, "oplog", "replay", "--source", cdb.dsn, "--target", dsn)
    assert result["read"] == result["applied"] > 0
    assert state_snapshot(dsn) == state_snapshot(cdb.dsn)
    settings = ("SELECT * FROM pgqueue.stream_config ORDER BY stream",
                "SELECT * FROM pgqueue.kind_config ORDER BY stream, kind")
    with psycopg.connect(dsn) as one, psycopg.connect(cdb.dsn) as cluster:
        for sql in settings:
            assert one.execute(sql).fetchall() == cluster.execute(sql).fetchall(), sql


def test_a_replica_of_a_cluster_is_refused_saying_what_to_do_instead(
        cdb: CitusDatabase, dsn: str) -> None:
    """The follow replica trails one commit order (seq order up to the snapshot's horizon),
    which a cluster's op log does not have: attaching one is refused, naming the way out."""
    from pgqueue.replicas import replica

    with pytest.raises(pgqueue.PgQueueError, match="streaming standby"):
        replica.Follower(cdb.dsn, dsn, "r1").setup()
    with pytest.raises(pgqueue.PgQueueError, match="no single commit order"):
        replica.attach(cdb.dsn, dsn, "r2")
