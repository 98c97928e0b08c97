"""Maintenance: the periodic passes a queue needs (reclaim expired leases, fire due cron
ticks, forget dead workers), run inside workers under an election (a claim row, renewed at
every pass: pgqueue.claim_maintenance) or by `pgqueue maintain`.

Every pass is idempotent and safe to run from many places at once: reclaim re-checks each
lease's expiry under its row lock, so the election only avoids wasted work.

On a replica the leader's share of a pass (reclaim, cron ticks, op-log pruning: writes a
replica refuses) is skipped, not failed: `pgqueue maintain` pointed at a replica keeps doing
the local work (the worker registry, vacuum) and takes up the rest once it is promoted.
"""
from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from pgqueue.client import reclaim, schedule
from pgqueue.db import connection, pool, queries
from pgqueue.errors import ConnectionFailed, NotLeader, PgQueueError
from pgqueue.maintenance.vacuum import (  # re-exported: callers name them from here
    VACUUM_BACKOFF_MAX_SECONDS,
    VACUUM_DEAD_ROWS,
    may_vacuum,
    shrink_if_bloated,
    vacuum_if_needed,
    vacuum_job_table,
)
from pgqueue.replicas import replica
from pgqueue.telemetry.outage import Outage

log = logging.getLogger("pgqueue.maintain")

__all__ = [
    "FULL_RECLAIM_SECONDS",
    "VACUUM_BACKOFF_MAX_SECONDS",
    "VACUUM_DEAD_ROWS",
    "Maintainer",
    "PassResult",
    "may_vacuum",
    "run_pass",
    "shrink_if_bloated",
    "vacuum_if_needed",
    "vacuum_job_table",
]

#: Workers silent for this long are dropped from the registry.
WORKER_TTL_SECONDS = 600.0
#: Every pass reclaims the leases that pgqueue.lease_expiry says came due, whose cost does not
#: grow while the vacuum horizon is held; a process's first leader pass on a database (and the
#: first after a promotion: a new epoch), and one every this many seconds, reads every leased
#: job instead (pgqueue.reclaim_expired_jobs), which also finds a lease no row names (one the
#: previous release granted during the upgrade to 0014).
FULL_RECLAIM_SECONDS = 300.0
#: By server and database: the leader epoch and time.monotonic() of the last full reclaim.
_FULL_RECLAIMS: dict[tuple[str, int, str], tuple[int, float]] = {}


def _full_reclaim_due(conn: queries.Conn, epoch: int) -> bool:
    """Whether this pass reads every leased job (and, if so, remember it did)."""
    key = (conn.info.host, conn.info.port, conn.info.dbname)
    last = _FULL_RECLAIMS.get(key)
    now = time.monotonic()
    if last is not None and last[0] == epoch and now - last[1] < FULL_RECLAIM_SECONDS:
        return False
    _FULL_RECLAIMS[key] = (epoch, now)
    return True


@dataclass(frozen=True)
class PassResult:
    """What one maintenance pass did."""

    reclaimed: int
    workers_pruned: int
    schedules_fired: int = 0
    ops_pruned: int = 0
    vacuumed: bool = False
    #: False when the database is a replica: the leader's share of the pass was skipped.
    leader: bool = True
    #: the jobs reclaimed, with their new state (for the worker's metrics and logs)
    reclaimed_jobs: tuple[reclaim.Reclaimed, ...] = ()
    #: partitions of the ready entries emptied (pgqueue.recycle_ready)
    ready_recycled: int = 0
    #: partitions of the leases' expiries emptied (pgqueue.recycle_lease_expiry)
    expiry_recycled: int = 0
    #: heap bytes of pgqueue.job given back by its shrink (vacuum.shrink_if_bloated)
    shrunk_bytes: int = 0


def run_pass(conn: queries.Conn, *, vacuum: bool = True) -> PassResult:
    """One pass of every maintenance task, in batches until each comes back short. `vacuum`
    False leaves the job table's vacuum to the caller (a Maintainer runs it on a connection
    of its own, so a long vacuum never delays reclaim and cron ticks)."""
    fired = ops = 0
    reclaimed: list[reclaim.Reclaimed] = []
    node = queries.fetch_one(conn, "maintenance_node")
    leader = node is not None and node["role"] == "leader"
    if node is not None and leader:
        try:
            reclaimed, fired, ops = _leader_pass(conn, full=_full_reclaim_due(conn, int(node["epoch"])),
                                                 citus=bool(node["citus"]))
        except NotLeader:
            # demoted between the role check and a write: the next pass sees the new role
            log.info("maintenance: this database became a replica; leader tasks skipped")
            leader = False
    pruned = int(queries.scalar(conn, "prune_workers", {"older_than": WORKER_TTL_SECONDS}))
    if node is not None and node["citus"]:
        recycled, expiry, ring_ops = _recycle_rings_by_shard(conn)
        ops += ring_ops
    else:
        queries.fetch(conn, "fold_job_counts")  # the job counts' deltas, added up (observe.sql)
        # the ready entries' past partitions, truncated once they hold no ready job (maintain.sql)
        recycled = int(queries.scalar(conn, "recycle_ready"))
        # the leases' expiries whose buckets are past and done with (reclaim.sql)
        expiry = int(queries.scalar(conn, "recycle_lease_expiry"))
    if reclaimed:
        _log_reclaimed(reclaimed)
    vacuumed, shrunk = vacuum_job_table(conn) if vacuum else (False, 0)
    return PassResult(reclaimed=len(reclaimed), workers_pruned=pruned, schedules_fired=fired,
                      ops_pruned=ops, vacuumed=vacuumed, leader=leader,
                      reclaimed_jobs=tuple(reclaimed), ready_recycled=recycled,
                      expiry_recycled=expiry, shrunk_bytes=shrunk)


def _recycle_rings_by_shard(conn: queries.Conn) -> tuple[int, int, int]:
    """On Citus: the rings' upkeep (counts folded; the ready entries', lease expiries' and op
    log's past partitions emptied) once per shard group, each call run on the group's node
    (named by a stream hashed to it), all in one round trip: (ready partitions, expiry
    partitions, ops removed)."""
    keys = [str(r["key"]) for r in queries.fetch(conn, "citus_shard_keys") if r["key"]]
    if not keys:
        return 0, 0, 0
    done = [rows[0] for rows in queries.fetch_each(conn, "recycle_rings_of",
                                                   [{"stream": k} for k in keys])]
    return (sum(int(r["ready"]) for r in done), sum(int(r["expiry"]) for r in done),
            sum(int(r["ops"] or 0) for r in done))


def _log_reclaimed(reclaimed: list[reclaim.Reclaimed]) -> None:
    """One line for the pass, and one per job it quarantined or buried."""
    by_state: dict[str, int] = {}
    for r in reclaimed:
        by_state[r.state] = by_state.get(r.state, 0) + 1
    log.info("maintenance: reclaimed %d expired lease(s) (%s)", len(reclaimed),
             ", ".join(f"{n} {state}" for state, n in sorted(by_state.items())),
             extra={"pgqueue": {"event": "reclaimed", "count": len(reclaimed), **by_state}})
    for r in reclaimed:
        if r.state == "quarantined":
            log.warning("maintenance: job %d (kind %s) quarantined: step %r crashed %d time(s)",
                        r.job_id, r.kind, r.step, r.crashes or 0, extra={"pgqueue": {
                            "event": "quarantined", "stream": r.stream, "kind": r.kind,
                            "job_id": r.job_id, "outcome": "quarantined", "step": r.step,
                            "crashes": r.crashes}})
        elif r.state == "dead":
            log.warning("maintenance: job %d (kind %s) dead: its lease expired on its last "
                        "attempt", r.job_id, r.kind, extra={"pgqueue": {
                            "event": "dead", "stream": r.stream, "kind": r.kind,
                            "job_id": r.job_id, "outcome": "dead"}})


def _leader_pass(conn: queries.Conn, *, full: bool,
                 citus: bool = False) -> tuple[list[reclaim.Reclaimed], int, int]:
    """The writes only a leader makes: (leases reclaimed, cron ticks fired, ops pruned).
    `full`: reclaim reads every leased job, not only the expiries that came due. `citus`: the
    schema is laid out on a Citus cluster (reclaim runs stream by stream, each on its node)."""
    reclaimed = reclaim.reclaim_expired_jobs(conn, due_only=not full, by_stream=citus)
    ticks = schedule.tick(conn, by_stream=citus)
    replica.touch(conn)
    if citus:  # (the op log's retention is each shard group's: _recycle_rings_by_shard)
        return reclaimed, ticks.fired, 0
    # the op log's retention, by whole partitions (pgqueue.recycle_op_log: the bounds are the
    # database's, so a worker's role prunes nothing younger); no waiting for a logical
    # replica's slot here, which would hold this pass (and its snapshot) back
    row = queries.fetch_one(conn, "recycle_op_log")
    ops = 0 if row is None else int(row["pruned"] or 0)
    return reclaimed, ticks.fired, ops


def _closed(conn: queries.Conn | None) -> None:
    """Close `conn`, if any, whatever state it is in."""
    if conn is not None:
        try:
            conn.close()
        except Exception:
            log.debug("closing the vacuum connection failed", exc_info=True)


#: A runner frozen this long loses the election (at least, or three intervals if longer): the
#: server ends its idle session. So while any one process is frozen (SIGSTOP, a long pause),
#: reclaim and cron ticks resume within this plus one interval.
FROZEN_RUNNER_SECONDS = 5.0


class Maintainer:
    """Runs passes every `interval` seconds while elected (one runner per database). The
    election is a claim renewed at every pass for FROZEN_RUNNER_SECONDS (or three intervals),
    which another runner takes once it lapses or once its holder's session is gone; the
    server also closes the session once it sits idle that long, so a frozen runner cannot
    keep it. No login can hold it from outside (as one could an advisory lock)."""

    def __init__(self, dsn: str, *, interval: float = 1.0, elect: bool = True,
                 on_pass: Callable[[PassResult], None] | None = None,
                 outage: Outage | None = None,
                 connect_timeout: float | None = None) -> None:
        """
        :param on_pass: called with each pass's result (a worker's metrics count reclaims).
        :param outage: where an unreachable database is reported (a worker's, shared by its
            loops); by default one of its own: a line when it starts, one a minute, one when
            it ends.
        """
        self.on_pass = on_pass
        self.outage = outage or Outage(log, lambda: "maintenance")
        self.connect_timeout = connect_timeout
        self.dsn = dsn
        self.interval = interval
        self.elect = elect
        self.elected = False
        self.passes = 0
        self._holder = uuid.uuid4()
        self._ttl_ms = int(max(FROZEN_RUNNER_SECONDS, 3 * interval) * 1000)
        self._stop = threading.Event()
        self._conn: queries.Conn | None = None
        #: the vacuums of the job table run apart, on their own connection (vacuum_loop): one
        #: of 50,000 dead rows took 4 s, and reclaim would have waited behind it
        self.vacuums = 0

    def stop(self) -> None:
        self._stop.set()

    def _drop_connection(self) -> None:
        if self._conn is not None:
            try:
                if self.elected and not self._conn.closed:
                    # the next pass elsewhere takes over at once, not once the claim lapses
                    queries.fetch(self._conn, "release_maintenance", {"holder": self._holder})
            except Exception:
                log.debug("releasing the maintenance claim failed", exc_info=True)
            try:
                self._conn.close()
            except Exception:
                log.debug("closing maintenance connection failed", exc_info=True)
        self._conn = None
        self.elected = False

    def tick(self) -> PassResult | None:
        """Try to be elected, and run one pass if so; None when another runner holds it."""
        if self._conn is None or self._conn.closed:
            self._conn = connection.connect(self.dsn, connect_timeout=self.connect_timeout)
            self.elected = False
            # Behind a pooler a session setting would stay on a server connection the pooler
            # hands to others; there the claim's lapse alone ends a frozen runner's turn.
            if not pool.behind_pooler(self._conn):
                queries.fetch(self._conn, "maintenance_session", {"timeout": f"{self._ttl_ms}ms"})
        if self.elect:  # every pass renews the claim; one that lapsed may have been taken
            self.elected = bool(queries.scalar(self._conn, "claim_maintenance", {
                "holder": self._holder, "ttl_ms": self._ttl_ms}))
            if not self.elected:
                return None
        result = run_pass(self._conn, vacuum=False)
        self.passes += 1
        if self.on_pass is not None:
            self.on_pass(result)
        return result

    def vacuum_loop(self) -> None:
        """Vacuum the job table when it needs it (vacuum_if_needed), every interval, on a
        connection of its own, until stop(). Whether elected or not: the elected runner may be
        a worker whose role may not VACUUM the table, and a runner that may (the owner's
        `pgqueue maintain`) keeps it small regardless."""
        conn: queries.Conn | None = None
        try:
            while not self._stop.wait(self.interval):
                try:
                    if conn is None or conn.closed:
                        conn = connection.connect(self.dsn, connect_timeout=self.connect_timeout)
                    if vacuum_if_needed(conn):
                        self.vacuums += 1
                except PgQueueError as exc:  # the pass's loop reports outages
                    log.debug("maintenance: vacuum skipped: %s", exc)
                    _closed(conn)
                    conn = None
                except Exception:
                    log.exception("maintenance: vacuum failed unexpectedly")
                    _closed(conn)
                    conn = None
        finally:
            _closed(conn)

    def run(self) -> None:
        """Loop until stop(); survives lost connections (the lock is re-contested). The
        vacuums run beside it (vacuum_loop)."""
        vacuums = threading.Thread(target=self.vacuum_loop, name="pgqueue-vacuum", daemon=True)
        vacuums.start()
        try:
            while not self._stop.is_set():
                try:
                    self.tick()
                    self.outage.ok("maintenance")
                except ConnectionFailed as exc:
                    self.outage.failed("maintenance", exc)
                    self._drop_connection()
                except PgQueueError as exc:
                    log.warning("maintenance pass failed: %s", exc)
                    self._drop_connection()
                except Exception:
                    # A bug in one pass must not stop reclaiming for good: log and go on.
                    log.exception("maintenance pass failed unexpectedly")
                    self._drop_connection()
                self._stop.wait(self.interval)
        finally:
            self._stop.set()
            self._drop_connection()
            vacuums.join(timeout=30)
