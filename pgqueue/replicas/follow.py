"""The follow reader: consumes a leader's op log into a replica where logical replication is
not available (see replica.py for the two ways and their guarantees).

It polls the leader and applies ops whose writing transaction is below its snapshot's xmin;
its low-water mark moves past a seq only once every transaction that could still hold a lower
seq has finished, so a late commit is never skipped; its position is stored in the replica in
the same transaction as the ops it applied, and reported to the leader.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

import psycopg
from psycopg.types.json import Jsonb

from pgqueue.db import connection, queries
from pgqueue.errors import ConnectionFailed, Contention
from pgqueue.replicas.seed import check_name, check_not_pruned, prepare_replica, seed_from_state
from pgqueue.telemetry.outage import FIRST_DELAY_SECONDS, Outage, jittered, next_delay

log = logging.getLogger("pgqueue.replica")

BATCH = 2000


@dataclass
class Follower:
    """Consumes the leader's op log into the replica without logical replication."""

    leader_dsn: str
    replica_dsn: str
    name: str
    poll_interval: float = 0.5
    batch: int = BATCH
    applied: int = 0
    polls: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    #: The leader server's start time at the previous poll (None: no poll yet in this process).
    _leader_started: str | None = None

    def __post_init__(self) -> None:
        check_name(self.name)
        #: an unreachable leader or replica: a line when it starts, one a minute, one at the end
        self.outage = Outage(log, lambda: f"follower {self.name}")

    def stop(self) -> None:
        self._stop.set()

    def setup(self) -> None:
        """Migrate the replica, set its role and register it on the leader (from then on the
        leader prunes nothing this follower has not confirmed). An empty replica of a leader
        whose op log was pruned is seeded from the leader's state first."""
        prepare_replica(self.leader_dsn, self.replica_dsn, self.name)
        with connection.connect(self.leader_dsn) as conn:
            connection.check_schema(conn)
            queries.fetch(conn, "replica_register", {
                "name": self.name, "method": "follow", "slot": None,
                "dsn": connection.redact(self.replica_dsn)})
            pruned = int(queries.scalar(conn, "pruned_through") or 0)
        with connection.connect(self.replica_dsn) as rep:
            fresh = (queries.scalar(rep, "replica_is_empty")
                     and queries.fetch_one(rep, "follow_state_get", {"name": self.name}) is None)
            queries.fetch(rep, "follow_state_forget_mark", {"name": self.name})
        if pruned and fresh:
            seed_from_state(self.leader_dsn, self.replica_dsn, self.name)

    def poll(self) -> int:
        """One pass: apply every committed op not yet applied; returns how many were new.
        Returns -1 when the replica was promoted meanwhile (the follower must stop)."""
        with connection.connect(self.leader_dsn, autocommit=True) as lead, \
                connection.connect(self.replica_dsn, autocommit=False) as rep:
            state = queries.fetch_one(rep, "follow_state_get", {"name": self.name}) or {
                "low_seq": 0, "mark_seq": 0, "mark_xmax": None}
            # ops up to the leader's prune point at a seed from its state are in that state
            seeded_through = int(queries.scalar(rep, "seeded_through") or 0)
            rep.commit()
            started = str(queries.scalar(lead, "leader_started"))
            head = int(queries.scalar(lead, "oplog_head") or 0)  # before the snapshot
            check_not_pruned(lead, self.name, max(int(state["low_seq"]), seeded_through))
            lead.autocommit = False
            lead.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            lead.read_only = True
            bounds = queries.fetch_one(lead, "snapshot_bounds")
            assert bounds is not None
            xmin = int(bounds["xmin"])
            low = int(state["low_seq"])
            # A mark is a seq read as the head, and an xid assigned after it was read. A
            # transaction has its xid before it draws an op seq (op_log's default), so every
            # transaction holding a seq at or below the head has an xid below the mark's. Once
            # xmin has passed the mark's xid they have all finished, and this poll (which pages
            # to the end of its snapshot) reads every one that committed: the low-water mark
            # moves to the head. Not the snapshot's xmax: that is the latest finished xid + 1,
            # and a transaction that had its xid and seq but had not finished could be above it
            # (the soak caught a Renew skipped that way).
            mark_seq, mark_xmax = int(state["mark_seq"]), state["mark_xmax"]
            if started != self._leader_started:
                # First poll of this process, or the leader restarted (or is another server,
                # after a failover). A crash can hand out again the seqs and xids of
                # transactions that never committed, so neither the mark nor a low-water mark
                # past the ops this replica holds can be trusted: every committed op at or
                # below `low` is applied here, so read again from the highest one held.
                low = min(low, int(queries.scalar(rep, "applied_head") or 0))
                mark_seq, mark_xmax = 0, None
                rep.commit()
            new_low = low
            if mark_xmax is not None and xmin >= int(mark_xmax):
                new_low = max(low, mark_seq)
                mark_xmax = None
            if mark_xmax is None:
                mark_seq, mark_xmax = head, str(queries.scalar(lead, "xid_after_head"))
            after, new = low, 0
            while True:
                rows = queries.fetch(lead, "oplog_committed_batch",
                                     {"after": after, "limit": self.batch})
                node = queries.fetch_one(rep, "node_lock")
                if node is None or node["role"] != "replica":
                    rep.rollback()
                    return -1
                if rows:
                    new += int(queries.scalar(rep, "oplog_ingest",
                                              {"ops": Jsonb([r["op"] for r in rows])}) or 0)
                    after = rows[-1]["seq"]
                if not rows:
                    # Read to the end of the snapshot (a batch is also cut short by size, so
                    # only an empty one says the end). The position moves in the same
                    # transaction as the last ops applied.
                    queries.fetch(rep, "follow_state_put", {
                        "name": self.name, "low_seq": new_low, "mark_seq": mark_seq,
                        "mark_xmax": mark_xmax})
                    rep.commit()
                    break
                rep.commit()
            lead.rollback()
            low = new_low
            lead.read_only = False
            lead.isolation_level = psycopg.IsolationLevel.READ_COMMITTED
            queries.fetch(lead, "replica_confirm", {"name": self.name, "seq": low})
            lead.commit()
        self._leader_started = started
        self.applied += new
        self.polls += 1
        return new

    def run(self, *, setup: bool = True) -> None:
        """Poll until stop() or promotion; lost connections are retried with a short capped
        backoff (outage.py), so that the follower is back within a second of its servers."""
        if setup:
            self.setup()
        delay = FIRST_DELAY_SECONDS
        while not self._stop.is_set():
            try:
                new = self.poll()
                if new < 0:
                    log.info("replica %s was promoted; follower stops", self.name)
                    return
                self.outage.ok()
                delay = FIRST_DELAY_SECONDS
                if new >= self.batch:
                    continue
                wait = self.poll_interval
            except (ConnectionFailed, psycopg.OperationalError) as exc:
                # OperationalError: a commit or rollback on a connection the server ended (a
                # terminated backend, a restart) is raised by the driver itself.
                self.outage.failed("poll", exc)
                wait, delay = jittered(delay), next_delay(delay)
            except Contention as exc:
                # a deadlock with a promotion taking the node row (Postgres rolled this poll
                # back): the next poll sees the new role
                log.warning("follower %s: %s; retrying in %.1fs", self.name, exc, delay)
                wait, delay = jittered(delay), next_delay(delay)
            self._stop.wait(wait)
