"""`pgqueue streams`: where streams live on a Citus cluster, and moving them.

On a Citus cluster each stream lives on one node (its shard of every table). These commands
show the nodes and placements, and move streams: `move` moves a stream's shard with the other
streams in it, `place` gives the stream a shard of its own first, `rebalance` evens the shard
groups out. Each raises the target node's id sequences first, so that a moved stream's ids
and op seqs keep increasing; writes to a moving shard wait while it is copied.
"""
from __future__ import annotations

import click

from pgqueue.cluster import placement

from .common import dsn, print_json, say, table

TO = click.option("--to", "to", required=True, metavar="NODE",
                  help="The target node: host:port, or its group id (see `pgqueue streams nodes`).")
JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


@click.group()
def streams() -> None:
    """Where streams live on a Citus cluster, and moving them between nodes."""


@streams.command()
@JSON
def nodes(as_json: bool) -> None:
    """The nodes that hold streams, with how many shard groups each holds."""
    found = placement.nodes(dsn())
    if as_json:
        print_json([{"group": n.group, "node": n.address, "shards": n.shards} for n in found])
        return
    table("nodes", ["group", "node", "shard groups"],
          [(n.group, n.address, n.shards) for n in found])


@streams.command("where")
@click.argument("names", nargs=-1, required=True, metavar="STREAM...")
@JSON
def where_cmd(names: tuple[str, ...], as_json: bool) -> None:
    """The node and shard each STREAM lives in (alone in it, or with others)."""
    found = placement.where(dsn(), list(names))
    if as_json:
        print_json([{"stream": p.stream, "shard": p.shard, "group": p.group,
                     "node": p.address, "isolated": p.isolated} for p in found])
        return
    table("streams", ["stream", "node", "group", "shard", "alone in it"],
          [(p.stream, p.address, p.group, p.shard, "yes" if p.isolated else "no")
           for p in found])


def _said(stream: str, move: placement.Move, alone: bool) -> str:
    if not move.moved:
        return f"stream {stream} is already on {move.target} (shard {move.shard})"
    what = "alone" if alone else "with the other streams of its shard"
    return f"moved stream {stream} {what} (shard {move.shard}) from {move.source} to {move.target}"


@streams.command()
@click.argument("stream")
@TO
def move(stream: str, to: str) -> None:
    """Move STREAM's shard, with the other streams it holds, to another node."""
    say(_said(stream, placement.move(dsn(), stream, to), alone=False))


@streams.command()
@click.argument("stream")
@TO
def place(stream: str, to: str) -> None:
    """Give STREAM a shard of its own, then move it to another node (a hot stream isolated)."""
    say(_said(stream, placement.place(dsn(), stream, to), alone=True))


@streams.command()
def rebalance() -> None:
    """Even out the shard groups over the nodes (the moves Citus's rebalancer plans)."""
    moves = placement.rebalance(dsn())
    for m in moves:
        say(f"moved shard {m.shard} from {m.source} to {m.target}")
    say(f"{len(moves)} shard group(s) moved" if moves else "already balanced: nothing moved")
