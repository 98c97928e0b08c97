"""Where streams live on a Citus cluster, and moving them (`pgqueue streams`).

The stream is the unit of placement: a stream's rows (jobs, ready entries, ops, dead letters,
counts, schedules) sit in one shard of each table, colocated, on one node. Citus moves shards,
not streams: a shard holds every stream hashed to it, and moves with all of them. `move` moves
a stream's shard (its neighbours go along); `place` first gives the stream a shard of its own
(Citus's tenant isolation), so that only it moves; `rebalance` carries out the moves Citus's
rebalancer plans.

Every node hands out its own ids (k * 1024 + its group id). Before a shard moves onto a node,
that node's id sequences are raised past the highest id any node has handed out plus a margin
(`MARGIN`, far more than the writes a node makes while a shard is copied), so that a moved
stream's job ids and op seqs keep increasing: FIFO by id and replay by seq hold across the
move. A move copies with writes to the shard waiting (block_writes): producers and workers
wait for it, and nothing is lost or done twice.
"""
from __future__ import annotations

from dataclasses import dataclass

from pgqueue import validate
from pgqueue.db import connection, queries
from pgqueue.errors import PgQueueError

#: How far past the highest id handed out anywhere a node's sequences are raised before
#: streams move onto it: 2^30 (about a million op seqs of another node's, at 1024 apart),
#: far more than a node writes while a shard is copied.
MARGIN = 1 << 30


class NotOnCitus(PgQueueError):
    """The database is not a Citus cluster's: streams are not placed."""


@dataclass(frozen=True)
class Node:
    """A node that may hold streams: its group id, address, and shard groups held."""

    group: int
    host: str
    port: int
    shards: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class Placement:
    """Where a stream lives: its shard (of job and every table colocated with it), the node
    holding it, and whether the shard holds this stream alone."""

    stream: str
    shard: int
    group: int
    host: str
    port: int
    isolated: bool

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class Move:
    """A shard moved (or not: already there) from one node to another."""

    shard: int
    source: str
    target: str
    moved: bool


def _on_citus(conn: queries.Conn) -> None:
    if not queries.scalar(conn, "schema_on_citus"):
        raise NotOnCitus("this database is not on a Citus cluster: its streams all live on "
                         "its one server")


def nodes(dsn: str) -> list[Node]:
    """The nodes that hold or may hold streams, with how many shard groups each holds."""
    with connection.connect(dsn) as conn:
        _on_citus(conn)
        return [Node(int(r["node_group"]), str(r["host"]), int(r["port"]), int(r["shards"]))
                for r in queries.fetch(conn, "citus_nodes")]


def where(dsn: str, streams: list[str]) -> list[Placement]:
    """Where each of `streams` lives (a stream with no jobs yet lives where it would)."""
    for s in streams:
        validate.stream(s)
    with connection.connect(dsn) as conn:
        _on_citus(conn)
        return [_placement(conn, s) for s in streams]


def _placement(conn: queries.Conn, stream: str) -> Placement:
    row = queries.fetch_one(conn, "citus_stream_placement", {"stream": stream})
    assert row is not None  # every hash value has a shard
    return Placement(stream, int(row["shard"]), int(row["node_group"]), str(row["host"]),
                     int(row["port"]), bool(row["isolated"]))


def _target(conn: queries.Conn, to: str) -> Node:
    found = [Node(int(r["node_group"]), str(r["host"]), int(r["port"]), int(r["shards"]))
             for r in queries.fetch(conn, "citus_nodes")]
    for node in found:
        if to in (node.address, str(node.group)):
            return node
    raise ValueError(f"no node {to!r} in the cluster: use host:port or a group id of "
                     f"{', '.join(f'{n.address} (group {n.group})' for n in found)}")


def raise_ids(conn: queries.Conn, node: Node) -> None:
    """Raise `node`'s id sequences past the highest id handed out on any node, plus MARGIN."""
    floors = queries.fetch_one(conn, "citus_id_floors")
    if floors is None or floors["job_id"] is None:
        raise PgQueueError("could not read the nodes' id sequences (run_command_on_all_nodes)")
    failed = [str(r["result"]) for r in queries.fetch(conn, "citus_raise_ids", {
        "node_group": node.group, "job_id": int(floors["job_id"]) + MARGIN,
        "lease_id": int(floors["lease_id"]) + MARGIN, "op_seq": int(floors["op_seq"]) + MARGIN})
        if not r["success"]]
    if failed:
        raise PgQueueError(f"raising the id sequences of {node.address} failed: "
                           + "; ".join(failed))


def _move_shard(conn: queries.Conn, shard: int, source: str, target: Node) -> Move:
    host, _, port = source.rpartition(":")
    raise_ids(conn, target)
    queries.fetch(conn, "citus_move_shard", {"shard": shard, "from_host": host,
                                             "from_port": int(port), "to_host": target.host,
                                             "to_port": target.port})
    return Move(shard, source, target.address, True)


def move(dsn: str, stream: str, to: str) -> Move:
    """Move `stream`'s shard, with the other streams it holds, to the node `to` (host:port
    or group id). Writes to the shard wait while it is copied."""
    validate.stream(stream)
    with connection.connect(dsn) as conn:
        _on_citus(conn)
        target = _target(conn, to)
        now = _placement(conn, stream)
        if now.group == target.group:
            return Move(now.shard, now.address, target.address, False)
        return _move_shard(conn, now.shard, now.address, target)


def place(dsn: str, stream: str, to: str) -> Move:
    """Put `stream` alone on the node `to`: give it a shard of its own first (unless it has
    one), then move that shard. Its old shard's other streams stay where they were."""
    validate.stream(stream)
    with connection.connect(dsn) as conn:
        _on_citus(conn)
        target = _target(conn, to)
        if not _placement(conn, stream).isolated:
            queries.fetch(conn, "citus_isolate_stream", {"stream": stream})
        now = _placement(conn, stream)
        if now.group == target.group:
            return Move(now.shard, now.address, target.address, False)
        return _move_shard(conn, now.shard, now.address, target)


def rebalance(dsn: str) -> list[Move]:
    """Carry out the moves Citus's rebalancer plans for the job table's shard groups, each
    after raising its target's id sequences."""
    with connection.connect(dsn) as conn:
        _on_citus(conn)
        done = []
        for r in queries.fetch(conn, "citus_rebalance_plan"):
            target = _target(conn, f"{r['to_host']}:{r['to_port']}")
            done.append(_move_shard(conn, int(r["shard"]), f"{r['from_host']}:{r['from_port']}",
                                    target))
        return done
