"""Payload limits: 16 MiB per job unless the stream sets another, at most 64 MiB, refused up
front with the size and the limit; and a job at the maximum goes through every path: replay,
a logical and a follow replica, seeding a replica from state, verify."""
from __future__ import annotations

import psycopg
import pytest

import pgqueue
from pgqueue.client import oplog
from pgqueue.client.enqueue import DEFAULT_MAX_PAYLOAD_BYTES, MAX_PAYLOAD_BYTES
from pgqueue.db import connection
from pgqueue.replicas import replica
from tests.dbhelp import op_counts, wait_for

pytest_plugins = ["tests.integration.replicas.replicas_fixtures"]  # cluster, as test_replica.py has

from tests.integration.replicas.replicas_fixtures import Cluster, one, state_rows  # noqa: E402
from tests.integration.replicas.test_replica import assert_identical  # noqa: E402

MiB = 1024 * 1024


def counts(dsn: str) -> tuple[int, int]:
    with connection.connect(dsn) as conn:
        row = conn.execute("SELECT (SELECT count(*) FROM pgqueue.job), "
                           "(SELECT count(*) FROM pgqueue.op_log)").fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def test_a_payload_over_the_default_limit_is_refused_naming_size_and_limit(
        q: pgqueue.Queue, dsn: str) -> None:
    assert DEFAULT_MAX_PAYLOAD_BYTES == 16 * MiB
    big = b"x" * (16 * MiB + 1)
    with pytest.raises(ValueError, match=rf"payload is {16 * MiB + 1} bytes, over the limit of "
                                         rf"{16 * MiB} bytes of stream default"):
        q.enqueue(big)
    with pytest.raises(ValueError, match=r"jobs\[1\]\.payload is \d+ bytes"):
        q.enqueue_many([pgqueue.NewJob(b"small"), pgqueue.NewJob(big)])
    assert counts(dsn) == (0, 0)  # nothing written, not even the small job of the batch
    assert q.job(q.enqueue(b"y" * (16 * MiB))) is not None  # exactly the limit is fine


def test_a_stream_sets_its_limit_up_to_the_maximum(q: pgqueue.Queue, dsn: str) -> None:
    q.configure_stream(max_payload_bytes=1000)
    with pytest.raises(ValueError, match="over the limit of 1000 bytes"):
        q.enqueue(b"z" * 1001)
    with pytest.raises(ValueError, match="max_payload_bytes"):
        q.configure_stream(max_payload_bytes=MAX_PAYLOAD_BYTES + 1)
    with pytest.raises(ValueError, match="64 MiB"):
        q.enqueue(b"z" * (MAX_PAYLOAD_BYTES + 1))  # refused before it is even sent
    with connection.connect(dsn) as conn, pytest.raises(psycopg.Error, match="1 to 67108864"):
        conn.execute("SELECT pgqueue.configure_stream('default', "
                     "p_max_payload_bytes => 67108865)")
    with connection.connect(dsn) as conn, pytest.raises(psycopg.Error, match="over the limit"):
        conn.execute("SELECT pgqueue.enqueue_one('default', %s, NULL, 0, NULL, NULL, NULL, 1, "
                     "NULL)", [b"z" * 1001])
    assert op_counts(dsn) == {"ConfigureStream": 1}


@pytest.mark.slow
def test_a_job_at_the_maximum_goes_through_every_path(cluster: Cluster) -> None:
    leader = cluster.leader
    logical_db, follow_db = cluster.replica_db(0), cluster.replica_db(1)
    replica.attach(leader, logical_db, "logical")
    cluster.follow(follow_db, "follower")
    biggest = bytes(range(256)) * (MAX_PAYLOAD_BYTES // 256)
    assert len(biggest) == MAX_PAYLOAD_BYTES
    with pgqueue.Queue(leader, stream="big") as q:
        q.configure_stream(max_payload_bytes=MAX_PAYLOAD_BYTES)
        big_id = q.enqueue(biggest, kind="blob")
        q.enqueue_many([pgqueue.NewJob(biggest[:MiB]), pgqueue.NewJob(biggest[: 2 * MiB])])
        (lease,) = q.lease(limit=1)
        assert lease.job_id == big_id and lease.payload == biggest
        q.nack(lease, error="again", retry_in=0)
    state = state_rows(leader)  # the leader's state stays as it is from here on
    for target in (logical_db, follow_db):
        wait_for(lambda t=target: one(t, "SELECT count(*) FROM pgqueue.op_log")  # type: ignore[misc]
                 == one(leader, "SELECT count(*) FROM pgqueue.op_log"), 120, "the replica")
        assert_identical(leader, target, leader_state=state)
    fresh = cluster.replica_db(0, migrated=True)
    result = oplog.replay(leader, fresh)
    assert result.read == one(leader, "SELECT count(*) FROM pgqueue.op_log")
    assert_identical(leader, fresh, leader_state=state)
    # a new replica of a leader that pruned its log is seeded from state, the big job too
    assert replica.prune(leader, keep=0) > 0
    seeded = cluster.replica_db(1)
    replica.attach(leader, seeded, "seeded")
    wait_for(lambda: one(seeded, "SELECT count(*) FROM pgqueue.job WHERE id = %s", [big_id]) == 1,
             120, "the seeded replica")
    assert_identical(leader, seeded, leader_state=state)
