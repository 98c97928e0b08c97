"""Streams placed and moved on a Citus cluster (`pgqueue streams`): a stream moves to another
node while a producer and a worker run, with nothing lost, done twice or reordered, and its
ids and op seqs go on increasing from the node it moved to."""
from __future__ import annotations

import threading
from collections.abc import Iterator

import psycopg
import pytest

import pgqueue
from pgqueue.cluster import placement
from tests.acceptance.clihelp import as_json, ok
from tests.citusbed import CitusBed, CitusDatabase, stream_group
from tests.dbhelp import wait_for


@pytest.fixture
def cdb(citus_bed: CitusBed) -> Iterator[CitusDatabase]:
    db = citus_bed.new_database()
    yield db
    citus_bed.drop(db)


def test_the_nodes_and_where_each_stream_lives(cdb: CitusDatabase) -> None:
    nodes = placement.nodes(cdb.dsn)
    assert sorted(n.group for n in nodes) == [1, 2] and sum(n.shards for n in nodes) == 4
    streams = [f"w-{i}" for i in range(6)]
    found = placement.where(cdb.dsn, streams)
    assert [p.group for p in found] == [stream_group(cdb, s) for s in streams]
    assert not any(p.isolated for p in found)
    assert {n.address for n in nodes} >= {p.address for p in found}
    shown = as_json(cdb.dsn, "streams", "where", *streams)
    assert [(s["stream"], s["group"], s["shard"]) for s in shown] == [
        (p.stream, p.group, p.shard) for p in found]
    with pytest.raises(ValueError, match="no node 'nowhere:1'"):
        placement.move(cdb.dsn, "w-0", "nowhere:1")


def test_a_stream_placed_on_another_node_under_load_loses_nothing_and_keeps_its_order(
        cdb: CitusDatabase) -> None:
    """A producer enqueues numbered jobs into "hot" and a worker leases and acks them while
    `place` gives "hot" a shard of its own and moves it to the other node (both retry a call
    refused as Contention, which the split raises once, as the Worker does): every job is acked
    once, leased in enqueue order; job ids and Enqueue op seqs increase with the numbers
    across the move, the later ones drawn on the new node; a neighbour stream of the old shard
    stays where it was."""
    source = stream_group(cdb, "hot")
    neighbour = next(s for s in (f"n-{i}" for i in range(100))
                     if placement.where(cdb.dsn, [s])[0].shard
                     == placement.where(cdb.dsn, ["hot"])[0].shard)
    with pgqueue.Queue(cdb.dsn, stream=neighbour) as q:
        q.enqueue(b"stays")
    target = next(n for n in placement.nodes(cdb.dsn) if n.group != source)
    stop = threading.Event()
    numbered: list[tuple[int, int]] = []  # (number, job id), in enqueue order
    leased: list[int] = []
    acked: list[int] = []
    failures: list[BaseException] = []

    def produce() -> None:
        try:
            with pgqueue.Queue(cdb.dsn, stream="hot") as q:
                n = 0
                while not stop.is_set():
                    try:
                        numbered.append((n, q.enqueue(str(n).encode())))
                    except pgqueue.Contention:  # the shard split under it: try again
                        continue
                    n += 1
        except BaseException as exc:  # reported by the test
            failures.append(exc)

    def work() -> None:
        try:
            with pgqueue.Queue(cdb.dsn, stream="hot") as q:
                while not (stop.is_set() and len(acked) == len(numbered)):
                    try:
                        held = q.lease(limit=10)
                    except pgqueue.Contention:  # (as the Worker does: try again)
                        continue
                    for lease in held:
                        leased.append(lease.job_id)
                        while True:
                            try:
                                q.ack(lease)
                                break
                            except pgqueue.Contention:
                                continue
                        acked.append(int(lease.payload))
        except BaseException as exc:  # reported by the test
            failures.append(exc)

    threads = [threading.Thread(target=produce), threading.Thread(target=work)]
    for t in threads:
        t.start()
    try:
        wait_for(lambda: len(acked) >= 20, 30, "jobs flowing before the move")
        ok(cdb.dsn, "streams", "place", "hot", "--to", target.address)
        after = len(numbered)
        wait_for(lambda: len(numbered) >= after + 20, 60, "jobs flowing after the move")
    finally:
        stop.set()
        for t in threads:
            t.join(120)
    assert not failures, failures
    assert sorted(acked) == list(range(len(numbered)))  # each job acked once, none lost
    ids = [job_id for _, job_id in numbered]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)  # ids increase with the numbers
    assert leased == ids  # leased in enqueue order (FIFO) across the move
    assert ids[0] % 1024 == source and ids[-1] % 1024 == target.group
    with psycopg.connect(cdb.dsn) as conn:
        seqs = [int(r[0]) for r in conn.execute(
            "SELECT seq FROM pgqueue.op_log WHERE stream = 'hot' AND op = 'Enqueue' "
            "ORDER BY job_id").fetchall()]
        assert seqs == sorted(seqs) and len(seqs) == len(ids)
        # every op of the stream ran on the node holding it then, none on the coordinator
        residues = {int(r[0]) for r in conn.execute(
            "SELECT DISTINCT seq % 1024 FROM pgqueue.op_log WHERE stream = 'hot'").fetchall()}
        assert residues == {source, target.group}
        acks = conn.execute("SELECT count(*), count(DISTINCT job_id) FROM pgqueue.op_log "
                            "WHERE stream = 'hot' AND op = 'Ack'").fetchone()
        assert acks == (len(ids), len(ids))
    now = placement.where(cdb.dsn, ["hot", neighbour])
    assert (now[0].group, now[0].isolated) == (target.group, True)
    assert now[1].group == source
    assert "already on" in ok(cdb.dsn, "streams", "place", "hot", "--to",
                              str(target.group)).stdout


def test_streams_refuse_a_database_on_one_server(dsn: str) -> None:
    with pytest.raises(placement.NotOnCitus, match="not on a Citus cluster"):
        placement.nodes(dsn)
