"""Replicas: databases that hold the leader's queue state by consuming its op log.

Two ways to consume, one apply path (pgqueue.apply_op, as `pgqueue oplog replay` uses):

- attach (logical replication): a publication of op_log on the leader, a subscription on the
  replica, and an ENABLE ALWAYS trigger there that applies each op as it arrives, in commit
  order, skipping a seq already applied. The subscription's slot is created first; the replica
  is then seeded from a leader snapshot in seq order (ops committed after the slot was made
  arrive again through it and are skipped), and only then is the subscription enabled.
- follow (a long-running reader, where logical replication is not available): polls the
  leader and applies ops whose writing transaction is below its snapshot's xmin. Its low-water
  mark only moves past a seq once every transaction that could still hold a lower seq has
  finished (it remembers the op-log sequence and the next xid at the previous poll), so a late
  commit is never skipped; its position is stored in the replica in the same transaction as
  the ops it applied, and reported to the leader.

A leader that pruned its op log cannot be replayed any more: a new, empty replica is then
seeded from the leader's state (queue tables and the remaining ops, one snapshot), and ops that
snapshot already holds are logged on the replica without being applied again.

promote() turns a replica into the leader: demote the old leader when reachable and wait for
everything it committed, stop consuming, move sequences past every applied id, flip the role
and bump the epoch. The sequences move past every id the database holds, not only those its
op log shows (a replica seeded from state holds jobs, dead letters and leases whose ops it
never had).

Modules: this one (attach, status, verify, prune, promote), follow.py (the follow reader) and
seed.py (preparing and seeding a replica database).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pgqueue import validate
from pgqueue.client import oplog
from pgqueue.db import connection, queries, run
from pgqueue.errors import ConnectionFailed, PgQueueError
from pgqueue.replicas.follow import Follower as Follower  # re-exported: replica.Follower
from pgqueue.replicas.seed import _NAME, check_name, prepare_replica, seed_from_state

log = logging.getLogger("pgqueue.replica")

PUBLICATION = "pgqueue_oplog"


def subscription_name(name: str) -> str:
    return f"pgqueue_{check_name(name)}"


def role(dsn: str) -> dict[str, Any]:
    """The database's role row (role, epoch, name, leader)."""
    with connection.connect(dsn) as conn:
        row = queries.fetch_one(conn, "node_get")
    assert row is not None
    return row


def is_leader(conn: queries.Conn) -> bool:
    """True when the connection's database is in leader role (it takes queue writes)."""
    row = queries.fetch_one(conn, "node_get")
    return row is not None and row["role"] == "leader"


# -- attach (logical replication) --------------------------------------------------------------


@dataclass(frozen=True)
class AttachResult:
    name: str
    method: str
    seeded_ops: int
    #: Rows of queue state copied from the leader (only when its op log had been pruned).
    seeded_rows: int = 0


def attach(leader_dsn: str, replica_dsn: str, name: str) -> AttachResult:
    """Attach a replica through Postgres logical replication (the leader needs
    wal_level=logical; use follow() otherwise)."""
    check_name(name)
    sub = subscription_name(name)
    with connection.connect(leader_dsn) as conn:
        connection.check_schema(conn)
        level = queries.scalar(conn, "wal_level")
        if level != "logical":
            raise PgQueueError(
                f"the leader at {connection.describe(leader_dsn)} has wal_level={level}; logical "
                "replication needs wal_level=logical (or use `pgqueue replica follow`)")
        pruned = int(queries.scalar(conn, "pruned_through") or 0)
        if not queries.scalar(conn, "publication_exists", {"name": PUBLICATION}):
            queries.fetch(conn, "create_publication")
    prepare_replica(leader_dsn, replica_dsn, name)
    with connection.connect(replica_dsn) as conn:
        queries.fetch(conn, "enable_apply_trigger")
        if queries.fetch_one(conn, "subscription_of", {"name": sub}) is None:
            queries.create_subscription(conn, sub, leader_dsn, PUBLICATION)
    # The subscription's slot exists from here on: every op committed later reaches the replica
    # through it, and the seed below covers everything committed before.
    state_rows = 0
    if pruned:
        state_rows, seeded_ops = seed_from_state(leader_dsn, replica_dsn, name)
    else:
        seeded_ops = oplog.replay(leader_dsn, replica_dsn).applied
        with connection.connect(leader_dsn) as conn:
            if int(queries.scalar(conn, "pruned_through") or 0):
                raise PgQueueError(
                    f"replica {name}: the leader pruned its op log while the replica was being "
                    "seeded from it; run attach again on an empty replica database")
    with connection.connect(replica_dsn) as conn:
        queries.alter_subscription(conn, sub, "enable")
    with connection.connect(leader_dsn) as conn:
        queries.fetch(conn, "replica_register", {
            "name": name, "method": "logical", "slot": sub,
            "dsn": connection.redact(replica_dsn)})
    log.info("replica %s attached by logical replication (%d ops seeded)", name, seeded_ops)
    return AttachResult(name=name, method="logical", seeded_ops=seeded_ops, seeded_rows=state_rows)


# -- status, verify, prune ------------------------------------------------------------------------


def status(leader_dsn: str, *, stale_after: float = 86400.0, wait: float = 1.0) -> list[dict[str, Any]]:
    """The leader's replicas with their applied position and lag (ops, seconds).

    A logical replica's figures are exact once its slot confirms the leader's current WAL
    position, which status waits up to `wait` seconds for; otherwise they are an upper bound."""
    if wait < 0:
        raise ValueError(f"wait must be at least 0 seconds, got {wait}")
    with connection.connect(leader_dsn) as conn:
        connection.check_schema(conn)
        return queries.fetch(conn, "replica_status", {"stale_after": stale_after, "wait": wait})


def touch(conn: queries.Conn) -> int:
    """Record that the leader sees each logical replica whose slot is active now (its seen_at
    moves to now, at most every ten seconds), so `stale` means "not seen for stale_after",
    not "attached that long ago". A maintenance pass on the leader calls it."""
    return int(queries.scalar(conn, "replica_touch") or 0)


@dataclass(frozen=True)
class VerifyResult:
    identical: bool
    op_seq: int
    differences: list[str]


def _caught_up(rep: queries.Conn, span: dict[str, Any]) -> bool:
    if not span["ops"]:
        return True
    have = queries.scalar(rep, "oplog_count_between", {"lo": span["min_seq"], "hi": span["max_seq"]})
    return int(have or 0) >= int(span["ops"])


def verify(leader_dsn: str, replica_dsn: str, *, timeout: float = 60.0) -> VerifyResult:
    """Compare the queue state of leader and replica at one op-log position: writers on the
    leader are paused (op_log locked) until the replica holds every op and both are digested."""
    with connection.connect(leader_dsn, autocommit=False) as lead, \
            connection.connect(replica_dsn) as rep:
        queries.fetch(lead, "lock_op_log")
        span = queries.fetch_one(lead, "oplog_span")
        assert span is not None
        deadline = time.monotonic() + timeout
        while not _caught_up(rep, span):
            if time.monotonic() > deadline:
                lead.rollback()
                return VerifyResult(False, int(span["max_seq"]), [
                    f"the replica did not apply the leader's ops up to seq {span['max_seq']} "
                    f"within {timeout:.0f}s"])
            time.sleep(0.05)
        since = {"min_seq": span["min_seq"]}
        ours = {r["tbl"]: r for r in queries.fetch(lead, "table_digests", since)}
        theirs = {r["tbl"]: r for r in queries.fetch(rep, "table_digests", since)}
        differences: list[str] = []
        for table, mine in ours.items():
            other = theirs.get(table)
            if other is None or other["digest"] != mine["digest"]:
                differences.append(f"{table}: leader {mine['n']} rows, replica "
                                   f"{other['n'] if other else 0} rows, contents differ")
        if differences:
            a = {(r["tbl"], r["id"]): r["digest"] for r in queries.fetch(lead, "row_digests")}
            b = {(r["tbl"], r["id"]): r["digest"] for r in queries.fetch(rep, "row_digests")}
            for key in sorted(set(a) | set(b))[:10_000]:
                if a.get(key) != b.get(key):
                    where = ("only on the leader" if key not in b else
                             "only on the replica" if key not in a else "differs")
                    differences.append(f"{key[0]} id {key[1]}: {where}")
        lead.rollback()
    return VerifyResult(not differences, int(span["max_seq"]), differences)


def prune(leader_dsn: str, *, keep: float = 7 * 86400.0, stale_after: float = 86400.0,
          batch: int = 10_000, wait: float = 1.0) -> int:
    """Delete ops older than `keep` seconds that every attached replica has applied, in
    batches; replicas silent longer than `stale_after` are not waited on. A logical replica's
    position is proven as in `status` (waiting up to `wait` seconds for its slot). Pruning is
    the leader's: on a replica it raises NotLeader naming the leader."""
    with connection.connect(leader_dsn) as conn:
        connection.check_schema(conn)
        return prune_batches(conn, keep=keep, stale_after=stale_after, batch=batch, wait=wait)


def prune_batches(conn: queries.Conn, *, keep: float, stale_after: float, batch: int,
                  wait: float, max_batches: int | None = None) -> int:
    """Prune in batches of `batch` ops (each its own statement) until one comes back short,
    or after `max_batches`. Each reads only the prefix of the log it deletes."""
    return _batches(lambda: queries.scalar(conn, "oplog_prune", {
        "keep": keep, "stale_after": stale_after, "limit": batch, "wait": wait}),
        batch, max_batches)


def prune_old_batches(conn: queries.Conn, *, batch: int, max_batches: int | None = None) -> int:
    """prune_batches with the maintenance passes' fixed bounds (pgqueue.prune_old_ops: ops a
    week old, replicas stale after a day, no wait): all a worker's role may prune."""
    return _batches(lambda: queries.scalar(conn, "oplog_prune_old", {"limit": batch}),
                    batch, max_batches)


def _batches(prune_one: Callable[[], Any], batch: int, max_batches: int | None) -> int:
    """Run `prune_one` (one batch, returning how many it deleted) until a batch comes back
    short of `batch`, or `max_batches` times."""
    validate.integer(batch, "batch", low=1)
    total, done = 0, 0
    while max_batches is None or done < max_batches:
        n = int(prune_one() or 0)
        total += n
        done += 1
        if n < batch:
            break
    return total


# -- promote -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PromoteResult:
    epoch: int
    old_leader_reached: bool
    applied_seq: int
    notes: list[str]


def _wait(what: str, check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise PgQueueError(f"promote: timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.05)


def promote(replica_dsn: str, *, old_leader_dsn: str | None = None,
            timeout: float = 60.0) -> PromoteResult:
    """Make a replica the leader (see the module docstring for the order of steps)."""
    notes: list[str] = []
    node = role(replica_dsn)
    if node["role"] == "leader":
        raise PgQueueError(f"{connection.describe(replica_dsn)} is already the leader "
                           f"(epoch {node['epoch']})")
    name = node["name"] or "replica"
    reached = False
    if old_leader_dsn is not None:
        try:
            with connection.connect(old_leader_dsn, connect_timeout=5) as lead, \
                    connection.connect(replica_dsn) as rep:
                # set_role waits for every transition in flight (they hold the role lock
                # shared), so after this nothing more commits on the old leader.
                queries.fetch(lead, "node_set_role", {
                    "role": "replica", "name": None, "leader": connection.redact(replica_dsn)})
                reached = True
                found = queries.fetch_one(lead, "oplog_span")
                assert found is not None
                leader_span: dict[str, Any] = found
                _wait(f"the replica to apply the old leader's ops up to seq {found['max_seq']}",
                      lambda: _caught_up(rep, leader_span), timeout)
                queries.fetch(lead, "replica_unregister", {"name": name})
        except ConnectionFailed as exc:
            notes.append(f"the old leader was not reachable ({exc}); ops it committed after "
                         "the replica's last applied op are lost")
    else:
        notes.append("no old leader given: ops it committed after the replica's last applied "
                     "op may be lost")
    sub = subscription_name(name) if _NAME.match(name) else None
    with connection.connect(replica_dsn) as rep:
        if sub and queries.fetch_one(rep, "subscription_of", {"name": sub}) is not None:
            queries.alter_subscription(rep, sub, "disable")
            queries.alter_subscription(rep, sub, "detach")
            queries.drop_subscription(rep, sub)
            if reached and old_leader_dsn is not None:
                with connection.connect(old_leader_dsn) as lead:
                    queries.fetch(lead, "drop_slot", {"slot": sub})
        queries.fetch(rep, "disable_apply_trigger")
        with run.transaction(rep):
            queries.fetch(rep, "node_lock")  # a follower applying now finishes first
            queries.fetch(rep, "advance_sequences")
            promoted = queries.fetch_one(rep, "node_set_role",
                                         {"role": "leader", "name": None, "leader": None})
        span = queries.fetch_one(rep, "oplog_span")
    assert promoted is not None and span is not None
    log.info("promoted %s to leader, epoch %s", connection.describe(replica_dsn), promoted["epoch"])
    return PromoteResult(epoch=int(promoted["epoch"]), old_leader_reached=reached,
                         applied_seq=int(span["max_seq"]), notes=notes)
