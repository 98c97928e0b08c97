"""Revision 0012 (the op log on a ring of partitions) moves a running queue's log in place: the
old log becomes one partition as it is (the same file, no op copied), every op carried over,
clients of the previous release running throughout; a log downgraded after its ring moved on
comes back as the partition its seqs name, and one that spans two is refused, unchanged."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue.client import oplog as pg_oplog
from pgqueue.db import connection, schema
from pgqueue.errors import PgQueueError
from tests.dbhelp import wait_for
from tests.integration.db.test_ready_upgrade import OldClients, fill_every_state
from tests.pgbed import Bed


@pytest.fixture
def at_0011(bed: Bed) -> Iterator[str]:
    db = bed.new_database(migrated=False)
    schema.upgrade(db, "0011")
    try:
        yield db
    finally:
        bed.drop(db)


def scalar(db: str, sql: str, *args: object) -> Any:
    with psycopg.connect(db) as conn:
        row = conn.execute(sql, args).fetchone()
    assert row is not None
    return row[0]


def all_ops(db: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(db) as conn:
        return conn.execute("SELECT * FROM pgqueue.op_log ORDER BY seq").fetchall()


def rotate_and_work(db: str) -> None:
    """Ops in the ring's current partition, the ring moved on, and ops in the next one."""
    with pgqueue.Queue(db) as q:
        q.enqueue_many([pgqueue.NewJob(b"before") for _ in range(3)])
        with connection.connect(db) as conn:
            pg_oplog.set_retention(conn, 2.4)
            wait_for(lambda: pg_oplog.recycle(conn)[1], 20, "the ring to move on")
        for lease in q.lease(limit=3):
            q.ack(lease)


def test_0012_moves_a_running_op_log_onto_the_ring_in_place(at_0011: str) -> None:
    db = at_0011
    fill_every_state(db)
    ops_before = all_ops(db)
    file_before = scalar(db, "SELECT pg_relation_filenode('pgqueue.op_log')")
    with OldClients(db) as clients:
        while len(clients.acked) < 50:  # running before the upgrade
            assert not clients.errors, clients.report()
        schema.upgrade(db)
        assert schema.current(db) == connection.SCHEMA_REVISION
        upgraded_at = len(clients.enqueued)
        while len(clients.enqueued) < upgraded_at + 200:  # and after it
            assert not clients.errors, clients.report()
    assert not clients.errors, clients.report()
    assert sorted(clients.acked) == sorted(clients.enqueued)  # each once: none lost or twice
    # the old log is partition 0 as it was: the same file, every op as it was
    assert scalar(db, "SELECT pg_relation_filenode('pgqueue.op_log_0')") == file_before
    after = all_ops(db)
    assert after[:len(ops_before)] == ops_before
    # the ops written since the upgrade are in the next partition, past 2^32
    with psycopg.connect(db) as conn:
        places = conn.execute("SELECT tableoid::regclass::text, seq FROM pgqueue.op_log "
                              "WHERE seq >= 4294967296").fetchall()
        assert places and {p[0] for p in places} == {"pgqueue.op_log_1"}
        # no constraint of the upgrade's is left behind
        assert conn.execute("SELECT count(*) FROM pg_constraint "
                            "WHERE conname = 'op_log_ring_slot'").fetchone() == (0,)


def test_a_log_downgraded_after_its_ring_moved_on_comes_back_as_its_partition(
        bed: Bed) -> None:
    db = bed.new_database(migrated=True)
    try:
        rotate_and_work(db)
        with connection.connect(db) as conn:
            wait_for(lambda: pg_oplog.recycle(conn)[0] or None, 30, "partition 0 truncated")
        kept = all_ops(db)
        assert kept and all(o[0] >> 32 == 1 for o in kept)
        schema.downgrade(db, "0011")
        assert all_ops(db) == kept
        schema.upgrade(db)
        assert all_ops(db) == kept
        assert scalar(db, "SELECT count(*) FROM pgqueue.op_log_1") == len(kept)
        with pgqueue.Queue(db) as q:
            job = q.enqueue(b"after")
        seq = scalar(db, "SELECT seq FROM pgqueue.op_log WHERE job_id = %s", job)
        # a partition past the kept ones (and past the sequence: the passes that truncated
        # partition 0 may have moved the ring on once more)
        assert seq >> 32 >= 2
        assert scalar(db, "SELECT tableoid::regclass::text FROM pgqueue.op_log WHERE seq = %s",
                      seq) == f"pgqueue.op_log_{(seq >> 32) % 32}"
    finally:
        bed.drop(db)


def test_a_log_that_spans_two_partitions_is_refused_and_left_as_it_was(bed: Bed) -> None:
    db = bed.new_database(migrated=True)
    try:
        rotate_and_work(db)
        schema.downgrade(db, "0011")
        kept = all_ops(db)
        assert {o[0] >> 32 for o in kept} == {0, 1}
        with pytest.raises(PgQueueError, match=r"across more than one partition.*prune"):
            schema.upgrade(db)
        assert schema.current(db) == "0011"
        assert all_ops(db) == kept
        assert scalar(db, "SELECT relkind FROM pg_class WHERE oid = 'pgqueue.op_log'::regclass") == "r"
    finally:
        bed.drop(db)


def test_the_before_step_proves_the_partition_outside_the_upgrades_transaction(
        at_0011: str) -> None:
    """0012's before-step validates, each statement committed on its own, the constraint that
    lets the upgrade attach the log without reading it under its lock; writers go on while it
    stands, a second run changes nothing, and the upgrade drops it."""
    db = at_0011
    fill_every_state(db)
    constraint = ("SELECT oid, convalidated FROM pg_constraint WHERE conname = 'op_log_ring_slot' "
                  "AND conrelid = 'pgqueue.op_log'::regclass")
    schema._before_steps(db, "0011", "head", None)
    with psycopg.connect(db) as conn:
        first = conn.execute(constraint).fetchall()
        assert [f[1] for f in first] == [True]
        assert conn.execute("SELECT pgqueue.enqueue_one('b', 'x'::bytea)").fetchone()
        conn.commit()
    schema._before_steps(db, "0011", "head", None)
    with psycopg.connect(db) as conn:
        assert conn.execute(constraint).fetchall() == first
    assert schema.current(db) == "0011"
    schema.upgrade(db)
    assert scalar(db, "SELECT count(*) FROM pg_constraint WHERE conname = 'op_log_ring_slot'") == 0
