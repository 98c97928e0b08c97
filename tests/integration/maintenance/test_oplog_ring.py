"""The op log's ring of 32 partitions: the retention truncates whole partitions (never a
DELETE), only once all their ops are older than it, committed, and applied by every replica;
the sequence moves on to the next partition; history says what was pruned."""
from __future__ import annotations

from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue.client import oplog as pg_oplog
from pgqueue.db import connection, queries
from tests.acceptance.clihelp import as_json, ok, run
from tests.dbhelp import wait_for

RETENTION = 2.4  # seconds: the ring moves on once its partition is a 24th of this old (0.1 s)


def scalar(conn: psycopg.Connection[Any], sql: str, *args: object) -> Any:
    row = conn.execute(sql, args).fetchone()
    assert row is not None
    return row[0]


def slot_of(seq: int) -> int:
    return (seq >> 32) % 32


def filenode(conn: psycopg.Connection[Any], slot: int) -> int:
    return int(scalar(conn, "SELECT pg_relation_filenode(%s::regclass)", f"pgqueue.op_log_{slot}"))


def some_history(q: pgqueue.Queue, n: int = 5) -> list[int]:
    ids = q.enqueue_many([pgqueue.NewJob(f"{i}") for i in range(n)])
    for lease in q.lease(limit=n):
        q.ack(lease)
    return ids


def rotate(conn: psycopg.Connection[Any]) -> None:
    """Run the retention pass until the ring moves on (its partition a 24th of RETENTION old)."""
    wait_for(lambda: pg_oplog.recycle(conn)[1], 20, "the ring to move on to its next partition")


def recycle_until_pruned(conn: psycopg.Connection[Any]) -> int:
    """Run the retention pass until it truncates something; what it removed. A pass that
    truncated never also moves the ring on: its transaction id, drawn by the truncation, is
    older than the move, and the partition left must record one drawn after it."""
    pruned, rotated = wait_for(lambda: (lambda r: r if r[0] else None)(pg_oplog.recycle(conn)),
                               30, "the retention to truncate the old partition")
    assert rotated is False
    return pruned


def test_the_retention_truncates_a_whole_partition_once_its_ops_are_old(
        q: pgqueue.Queue, dsn: str) -> None:
    with connection.connect(dsn) as conn:
        assert pg_oplog.retention(conn).seconds == 86400.0  # the default: a day
        assert pg_oplog.set_retention(conn, RETENTION) == RETENTION
        acked = some_history(q)
        old = [r[0] for r in conn.execute("SELECT seq FROM pgqueue.op_log ORDER BY seq")]
        slot = slot_of(old[0])
        assert {slot_of(s) for s in old} == {slot}
        before = filenode(conn, slot)
        rotate(conn)
        assert pg_oplog.recycle(conn) == (0, False)  # too young yet, and the new one is empty
        kept = some_history(q, 3)
        new = [r[0] for r in conn.execute("SELECT seq FROM pgqueue.op_log WHERE seq > %s "
                                          "ORDER BY seq", (old[-1],))]
        assert {slot_of(s) for s in new} == {(slot + 1) % 32}
        assert new[0] >= (old[-1] >> 32) + 1 << 32  # the next multiple of 2^32
        # the metric counts ops, not the 2^32 seqs between the two partitions
        assert queries.scalar(conn, "gauge_op_log") == len(old) + len(new)

        assert recycle_until_pruned(conn) == len(old)
        # truncated, not deleted: a new, empty file, and exactly the newer ops are left
        assert filenode(conn, slot) != before
        assert scalar(conn, "SELECT pg_relation_size(%s::regclass)", f"pgqueue.op_log_{slot}") == 0
        assert [r[0] for r in conn.execute("SELECT seq FROM pgqueue.op_log ORDER BY seq")] == new
        assert scalar(conn, "SELECT pruned_through FROM pgqueue.node") == old[-1]
        found = pg_oplog.retention(conn)
        assert found.seconds == RETENTION and found.partitions == 1
    # history: the pruned job says so, the kept one has every op
    gone = q.history(acked[0])
    assert gone is None or gone.ops_pruned
    history = q.history(kept[0])
    assert history is not None and not history.ops_pruned
    assert [o.op for o in history.ops] == ["Enqueue", "Lease", "Ack"]


def test_an_open_transaction_that_wrote_to_a_partition_keeps_it(q: pgqueue.Queue, dsn: str) -> None:
    """A transaction still open when the ring moved on may still commit ops into the partition
    it left: the partition waits for it, past its retention, and goes once it has ended."""
    with connection.connect(dsn) as conn, psycopg.connect(dsn) as open_tx:
        pg_oplog.set_retention(conn, RETENTION)
        some_history(q)
        late = q.enqueue(b"committed after the ring moved on", conn=open_tx)
        late_seq = int(scalar(open_tx, "SELECT seq FROM pgqueue.op_log WHERE job_id = %s", late))
        slot = slot_of(late_seq)
        rotate(conn)
        wait_for(lambda: scalar(conn, "SELECT closed_at <= now() - %s * interval '1 second' "
                                      "FROM pgqueue.op_log_ring WHERE slot = %s",
                                RETENTION, slot), 30, "the partition to pass its retention")
        assert pg_oplog.recycle(conn)[0] == 0  # held back by the open transaction
        open_tx.commit()
        assert scalar(conn, "SELECT count(*) FROM pgqueue.op_log WHERE job_id = %s", late) == 1
        assert recycle_until_pruned(conn) > 0
        assert scalar(conn, "SELECT count(*) FROM pgqueue.op_log WHERE job_id = %s", late) == 0
        # every op up to pruned_through is gone, the late one included
        assert scalar(conn, "SELECT pruned_through FROM pgqueue.node") >= late_seq


def test_a_replica_that_has_not_applied_a_partition_keeps_it(q: pgqueue.Queue, dsn: str) -> None:
    with connection.connect(dsn) as conn:
        pg_oplog.set_retention(conn, RETENTION)
        some_history(q)
        last = int(scalar(conn, "SELECT max(seq) FROM pgqueue.op_log"))
        conn.execute("INSERT INTO pgqueue.replica (name, method, confirmed_seq) "
                     "VALUES ('behind', 'follow', %s)", (last - 1,))
        rotate(conn)
        slot = slot_of(last)
        wait_for(lambda: scalar(conn, "SELECT closed_at <= now() - %s * interval '1 second' "
                                      "FROM pgqueue.op_log_ring WHERE slot = %s",
                                RETENTION, slot), 30, "the partition to pass its retention")
        assert pg_oplog.recycle(conn)[0] == 0  # the replica lacks the partition's last op
        conn.execute("UPDATE pgqueue.replica SET confirmed_seq = %s, seen_at = now()", (last,))
        assert recycle_until_pruned(conn) > 0


def test_the_ring_does_not_move_on_into_a_partition_that_holds_ops(q: pgqueue.Queue,
                                                                   dsn: str) -> None:
    """The next partition still holds ops (a wrapped ring kept for a replica): the current
    one goes on growing rather than mixing two periods' ops, and moves on once it is empty."""
    with connection.connect(dsn) as conn:
        pg_oplog.set_retention(conn, RETENTION)
        some_history(q, 1)
        window = int(scalar(conn, "SELECT max(seq) FROM pgqueue.op_log")) >> 32
        nxt = (window + 1) % 32
        conn.execute("INSERT INTO pgqueue.op_log (seq, stream, op, body) "
                     "VALUES (%s, 'default', 'ConfigureStream', '{}')", (((window + 1) << 32) + 5,))
        pg_oplog.recycle(conn)  # notes when the current partition was first written to
        wait_for(lambda: scalar(conn, "SELECT opened_at < clock_timestamp() - interval '0.2 s' "
                                      "FROM pgqueue.op_log_ring WHERE slot = %s", window % 32),
                 10, "the current partition to be old enough to leave")
        assert pg_oplog.recycle(conn)[1] is False
        conn.execute(f"TRUNCATE pgqueue.op_log_{nxt}")
        assert pg_oplog.recycle(conn)[1] is True


def test_a_retention_under_a_second_is_refused_on_every_path(dsn: str) -> None:
    with connection.connect(dsn) as conn:
        with pytest.raises(ValueError, match="at least 1 second"):
            pg_oplog.set_retention(conn, 0.5)
        with pytest.raises(psycopg.Error, match="at least 1 second"):
            conn.execute("SELECT pgqueue.set_op_log_retention(interval '10 ms')")
        assert pg_oplog.retention(conn).seconds == 86400.0
    refused = run(dsn, "oplog", "retention", "0.5")
    assert refused.exit_code == 2 and "0.5 is not in the range x>=1" in refused.stderr
    assert "op log retention: 7200 s (2 h)" in ok(dsn, "oplog", "retention", "7200").stdout
    assert as_json(dsn, "oplog", "retention")["seconds"] == 7200.0
