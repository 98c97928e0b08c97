"""`pgqueue replica`: attach, follow, watch, verify and promote replicas.

A replica is another Postgres database that holds the leader's queue state by consuming its
op log; it refuses queue writes until it is promoted.
"""
from __future__ import annotations

import logging
import signal
import sys

import click

from pgqueue.db import connection
from pgqueue.replicas import replica

from .common import EXIT_FAILED, console, fail, iso, print_json, say, table

LEADER = click.option("--leader", required=True, metavar="DSN", help="The leader database.")
REPLICA = click.option("--replica", "replica_dsn", required=True, metavar="DSN",
                       help="The replica database.")
NAME = click.option("--name", default="replica", show_default=True,
                    help="The replica's name (lowercase letters, digits, _).")


@click.group("replica")
def replica_group() -> None:
    """Attach, follow, watch, verify and promote replicas."""


@replica_group.command()
@LEADER
@REPLICA
@NAME
def attach(leader: str, replica_dsn: str, name: str) -> None:
    """Migrate the replica, set it to replica role and consume through logical replication
    (the leader needs wal_level=logical; otherwise use `replica follow`)."""
    result = replica.attach(leader, replica_dsn, name)
    seeded = (f"seeded {result.seeded_ops} op(s)" if not result.seeded_rows else
              f"seeded from the leader's state ({result.seeded_rows} row(s), "
              f"{result.seeded_ops} op(s) kept in its log)")
    say(f"replica {result.name} attached to {connection.describe(leader)} by logical "
        f"replication; {seeded}")


@replica_group.command()
@LEADER
@REPLICA
@NAME
@click.option("--poll-interval", type=click.FloatRange(min=0, min_open=True), default=0.5,
              show_default=True, help="Seconds between polls of the leader.")
@click.option("--once", is_flag=True, help="Catch up once and exit.")
def follow(leader: str, replica_dsn: str, name: str, poll_interval: float, once: bool) -> None:
    """Consume the leader's op log by polling (no logical replication needed); runs until
    SIGTERM/SIGINT or until the replica is promoted."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    follower = replica.Follower(leader, replica_dsn, name, poll_interval=poll_interval)
    if once:
        follower.setup()
        while follower.poll() > 0:
            pass
        follower.poll()  # one more: the low-water mark (what the leader is told) catches up
        say(f"replica {name}: applied {follower.applied} op(s)")
        return
    signal.signal(signal.SIGTERM, lambda *_: follower.stop())
    try:
        follower.run()
    except KeyboardInterrupt:
        follower.stop()


@replica_group.command()
@LEADER
@click.option("--stale-after", type=click.FloatRange(min=0), default=86400.0, show_default=True,
              metavar="SECONDS")
@click.option("--wait", type=click.FloatRange(min=0), default=1.0, show_default=True,
              metavar="SECONDS",
              help="How long to wait for a logical replica's slot to confirm the leader's current "
                   "WAL position; until it does, its lag is an upper bound.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def status(leader: str, stale_after: float, wait: float, as_json: bool) -> None:
    """The leader's replicas: applied position and lag in ops and seconds (also in SQL:
    SELECT * FROM pgqueue.replica_status())."""
    rows = replica.status(leader, stale_after=stale_after, wait=wait)
    if as_json:
        print_json([{**r, "seen_at": iso(r["seen_at"])} for r in rows])
        return
    if not rows:
        say("no replicas")
        return
    console().print(table("replicas", [
        "name", "method", "applied seq", "lag ops", "lag s", "active", "stale"], [
        [r["name"], r["method"], r["applied_seq"], r["lag_ops"], f"{r['lag_seconds']:.3f}",
         "yes" if r["active"] else "no", "STALE" if r["stale"] else ""] for r in rows],
        right=["applied seq", "lag ops", "lag s"]))


@replica_group.command()
@LEADER
@REPLICA
@click.option("--timeout", type=click.FloatRange(min=0), default=60.0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def verify(leader: str, replica_dsn: str, timeout: float, as_json: bool) -> None:
    """Compare leader and replica at one op-log position (leader writers pause meanwhile);
    exit 0 only when identical."""
    result = replica.verify(leader, replica_dsn, timeout=timeout)
    if as_json:
        print_json({"identical": result.identical, "op_seq": result.op_seq,
                    "differences": result.differences})
    elif result.identical:
        say(f"identical at op seq {result.op_seq}")
    else:
        for line in result.differences:
            say(line)
    if not result.identical:
        fail(f"replica differs from the leader at op seq {result.op_seq}", EXIT_FAILED)


@replica_group.command()
@REPLICA
@click.option("--old-leader", default=None, metavar="DSN",
              help="The old leader, demoted first when reachable.")
@click.option("--timeout", type=click.FloatRange(min=0), default=60.0, show_default=True)
def promote(replica_dsn: str, old_leader: str | None, timeout: float) -> None:
    """Make the replica the leader: demote the old leader (when reachable) and wait for its
    whole op log, stop consuming, move id sequences past every applied id, bump the epoch."""
    result = replica.promote(replica_dsn, old_leader_dsn=old_leader, timeout=timeout)
    say(f"{connection.describe(replica_dsn)} is the leader now (epoch {result.epoch}, "
        f"op log applied up to seq {result.applied_seq})")
    for note in result.notes:
        say(f"warning: {note}", err=True)
