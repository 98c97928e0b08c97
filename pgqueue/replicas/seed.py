"""Preparing a replica database: migrate it, refuse a follower that fell behind a prune, and
seed an empty one from the leader's state when the leader's op log was pruned.

Shared by both ways of consuming the op log (replica.attach and follow.Follower).
"""
from __future__ import annotations

import logging
import re
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from pgqueue.db import connection, queries, schema
from pgqueue.errors import PgQueueError

log = logging.getLogger("pgqueue.replica")

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,40}$")


def check_name(name: str) -> str:
    """A replica name: lowercase letters, digits and _, starting with a letter (it names a
    subscription and a replication slot)."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"replica name must match {_NAME.pattern}, got {name!r}")
    return name



def check_not_pruned(lead: queries.Conn, name: str, applied: int) -> None:
    """A follower catches up from the op log: refuse when the leader pruned ops this replica
    has not applied (a stale follower; a new, empty replica is seeded from state instead)."""
    pruned = int(queries.scalar(lead, "pruned_through") or 0)
    if pruned > applied:
        raise PgQueueError(
            f"replica {name}: the leader pruned its op log up to seq {pruned}, and this replica "
            f"has applied only up to {applied}; it cannot catch up from the log (rebuild it: "
            "an empty replica database is seeded from the leader's state; keep replicas "
            "attached so pruning waits for them)")


SEED_PAGE = 5000


def seed_from_state(leader_dsn: str, replica_dsn: str, name: str) -> tuple[int, int]:
    """Copy the leader's queue state and what is left of its op log, from one snapshot, into an
    empty replica: for a leader that pruned its op log, whose state replaying the log can no
    longer rebuild. The replica records the snapshot, so an op that arrives later but was
    already committed in it is logged without being applied twice. (state rows, ops) copied."""
    state_rows = ops = 0
    with connection.connect(leader_dsn, autocommit=False) as lead, \
            connection.connect(replica_dsn, autocommit=False) as rep:
        lead.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        lead.read_only = True
        bounds = queries.fetch_one(lead, "seed_bounds")  # opens the snapshot read below
        assert bounds is not None
        if not queries.scalar(rep, "replica_is_empty"):
            raise PgQueueError(
                f"replica {name}: the leader pruned its op log up to seq "
                f"{bounds['pruned_through']}, so a replica is seeded from the leader's state, "
                "which needs an empty replica; this one already holds jobs or ops")

        def insert(table: str, rows: list[Any]) -> int:
            return int(queries.scalar(rep, "seed_insert", {"table": table, "rows": Jsonb(rows)})
                       or 0)

        for small in queries.fetch(lead, "seed_small_tables"):
            state_rows += insert(small["tbl"], small["rows"])
        for table, query in (("job", "seed_job_page"), ("dead_letter", "seed_dead_letter_page")):
            after = 0
            while page := queries.fetch(lead, query, {"after": after, "limit": SEED_PAGE}):
                state_rows += insert(table, [r["row"] for r in page])
                after = page[-1]["key"]
        after = 0
        while page := queries.fetch(lead, "oplog_visible_batch", {"after": after, "limit": SEED_PAGE}):
            ops += insert("op_log", [r["op"] for r in page])
            after = page[-1]["seq"]
        queries.fetch(rep, "seed_finish", bounds)
        rep.commit()
        lead.rollback()
    log.info("replica %s seeded from the leader's state: %d rows, %d ops (op log pruned up to "
             "seq %s)", name, state_rows, ops, bounds["pruned_through"])
    return state_rows, ops


def prepare_replica(leader_dsn: str, replica_dsn: str, name: str) -> None:
    """Migrate the replica and set its role. A database in leader role that has ops of its
    own is refused: its seqs would collide with the leader's. So is a leader on a Citus
    cluster, whose op log has no single commit order to follow (docs: Running on Citus)."""
    with connection.connect(leader_dsn) as conn:
        if queries.scalar(conn, "schema_on_citus"):
            raise PgQueueError(
                f"{connection.describe(leader_dsn)} is a Citus cluster: its nodes draw op seqs "
                "and transaction ids of their own, so its op log has no single commit order a "
                "replica could follow; give each node a streaming standby instead, and copy "
                "the queue to one server with `pgqueue oplog replay`")
    schema.migrate(replica_dsn)
    with connection.connect(replica_dsn) as conn:
        node = queries.fetch_one(conn, "node_get")
        span = queries.fetch_one(conn, "oplog_span")
        assert node is not None and span is not None
        if node["role"] == "leader" and span["ops"]:
            raise PgQueueError(
                f"{connection.describe(replica_dsn)} is a leader with {span['ops']} ops of its "
                "own; a replica must start from an empty pgqueue database")
        queries.fetch(conn, "node_set_role", {
            "role": "replica", "name": name, "leader": connection.redact(leader_dsn)})
