"""The job table's vacuum, and its shrink once a held vacuum horizon is released.

A queue table churns: every lease and ack leaves a dead row version, so the maintenance passes
vacuum it as soon as enough piled up (autovacuum wakes too late). While something holds the
vacuum horizon back (a session idle in transaction, a REPEATABLE READ report, a replication
slot) a vacuum can remove nothing that died since: once one has run with the horizon where it
is, the next waits until the horizon moves (read from the server's sessions, slots and
prepared transactions, named in the log), instead of reading the whole table again on every
pass for nothing. And the rows left behind meanwhile have grown the file: vacuum frees the
space for reuse once the horizon moves, but a queue's inserts land all over the table, so the
file never gets shorter.
Once a vacuum has removed what piled up, a table many times larger than its live rows and one
vacuum interval's churn need is rewritten (VACUUM FULL): a table of few live rows takes a
moment to copy, under a lock the rewrite waits for at most SHRINK_LOCK_TIMEOUT_MS.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, NamedTuple

import psycopg

from pgqueue.db import queries

log = logging.getLogger("pgqueue.maintain")

#: Vacuum the job table when this many dead row versions (or a fifth of the live ones) piled
#: up: autovacuum wakes once a minute, too late for a queue table (see NOTES: 248 MB vs 43 MB).
VACUUM_DEAD_ROWS = 5000
#: Kept for callers of earlier releases: a vacuum no longer backs off by time, it waits for the
#: vacuum horizon to move (VacuumMemory.horizon).
VACUUM_BACKOFF_MAX_SECONDS = 60.0
#: Shrink the job table once its heap is at least this large ...
SHRINK_MIN_BYTES = 8 * 1024 * 1024
#: ... and this many times what its live rows and VACUUM_DEAD_ROWS more need ...
SHRINK_RATIO = 4
#: ... and at most this large: the rewrite reads the whole heap with the table locked, so its
#: time grows with the file; a larger one is left to an operator (logged once).
SHRINK_MAX_BYTES = 1024 * 1024 * 1024
#: How long the rewrite waits for its lock (while it waits, the transitions queue behind it);
#: when it cannot have it in time, the next try comes SHRINK_RETRY_SECONDS later.
SHRINK_LOCK_TIMEOUT_MS = 100
SHRINK_RETRY_SECONDS = 10.0
#: Not while a transaction older than this holds the vacuum horizon: the rewrite keeps every
#: row version it may still see, so it would copy what died since it began under the lock
#: (ten minutes of a busy queue's churn) and give little back; the shrink is tried again
#: SHRINK_RETRY_SECONDS later.
SHRINK_HELD_SECONDS = 1.0
#: A vacuum is passed over only while the horizon has not moved since the last one AND the
#: transaction holding it has run this long (or is a slot's): in a busy queue the horizon is
#: always some transaction of a few milliseconds, which a reading may catch a moment before
#: the last vacuum's own.
VACUUM_HELD_SECONDS = 5.0


@dataclass
class VacuumMemory:
    """What the last vacuums of one database's job table achieved (per process)."""

    #: the vacuum horizon (a 32-bit transaction id) when the last vacuum started: what died
    #: since can be removed only once the horizon is past it
    horizon: int | None = None
    #: who held the horizon when a vacuum was last passed over
    held_by: str | None = None
    #: and the horizon it held (said once per horizon: several readers that took their
    #: snapshots together hold one horizon, and the one named may change from one pass to
    #: the next)
    held_at: int | None = None
    #: a shrink is due (a vacuum freed the space) and is tried from this time.monotonic() on
    shrink_at: float | None = None
    #: a heap too large to rewrite was logged already
    too_large_said: bool = False


#: By server and database: run_pass is called with a connection, by a Maintainer or the CLI.
_VACUUMS: dict[tuple[str, int, str], VacuumMemory] = {}

#: Whether each role may VACUUM the job table, as found (asked once per role and process).
_MAY_VACUUM: dict[str, bool] = {}


def may_vacuum(conn: queries.Conn) -> bool:
    """Whether the connected role may VACUUM the job table (its owner may; a pgqueue role may
    not). Said once, at WARNING, when it may not."""
    user = conn.info.user
    if user not in _MAY_VACUUM:
        _MAY_VACUUM[user] = bool(queries.scalar(conn, "may_vacuum_job"))
        if not _MAY_VACUUM[user]:
            log.warning("maintenance: the role %s may not VACUUM pgqueue.job (its owner may): "
                        "dead row versions are left to `pgqueue maintain` run as the owner (it "
                        "vacuums whoever runs the passes), or to autovacuum", user)
    return _MAY_VACUUM[user]


def _memory(conn: queries.Conn) -> VacuumMemory:
    return _VACUUMS.setdefault((conn.info.host, conn.info.port, conn.info.dbname),
                               VacuumMemory())


class Vacuumed(NamedTuple):
    """What vacuum_job_table did."""

    vacuumed: bool
    #: heap bytes the shrink gave back (0: none ran)
    shrunk_bytes: int = 0


def vacuum_if_needed(conn: queries.Conn) -> bool:
    """vacuum_job_table; True when it vacuumed."""
    return vacuum_job_table(conn).vacuumed


def _held_longer_than(seen: dict[str, Any] | None, seconds: float) -> bool:
    """Whether a vacuum_horizon reading says a transaction that has run for more than
    `seconds` (or a slot, whose age is unknown) holds the horizon."""
    return seen is not None and seen["holder"] is not None and (
        seen["held_seconds"] is None or seen["held_seconds"] > seconds)


def _moved(before: int, now: int) -> bool:
    """Whether the vacuum horizon moved forward from `before` to `now` (32-bit transaction ids,
    which wrap around: compared as the server compares them)."""
    return 0 < (now - before) % 2**32 < 2**31


def vacuum_job_table(conn: queries.Conn) -> Vacuumed:
    """VACUUM the job table when dead row versions piled up, the role may, and the vacuum
    horizon moved since the last vacuum (one that has not could remove nothing that died
    since); then shrink it when that freed most of a file grown while the horizon was held
    (shrink_if_bloated)."""
    if not may_vacuum(conn):
        return Vacuumed(False)
    row = queries.fetch_one(conn, "job_dead_tuples")
    if row is None or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        return Vacuumed(False)
    memory = _memory(conn)
    dead, live = int(row["dead"] or 0), int(row["live"] or 0)
    if dead < max(VACUUM_DEAD_ROWS, live // 5):
        if memory.shrink_at is not None and time.monotonic() >= memory.shrink_at:
            return Vacuumed(False, shrink_if_bloated(conn))  # a retry: the lock was busy
        return Vacuumed(False)
    seen = queries.fetch_one(conn, "vacuum_horizon")
    horizon = None if seen is None or seen["horizon"] is None else int(seen["horizon"])
    holder = None if seen is None else seen["holder"]
    if _held_longer_than(seen, VACUUM_HELD_SECONDS) and horizon is not None \
            and memory.horizon is not None and not _moved(memory.horizon, horizon):
        if horizon != memory.held_at:
            memory.held_by, memory.held_at = holder, horizon
            log.warning("maintenance: pgqueue.job has %d dead row versions that no vacuum can "
                        "remove while %s holds back the vacuum horizon (a long or "
                        "idle-in-transaction session, a REPEATABLE READ reader, a replication "
                        "slot: see pg_stat_activity.backend_xmin); the next vacuum waits until "
                        "the horizon moves", dead, holder or "a transaction")
        return Vacuumed(False)
    if memory.held_by is not None:
        log.info("maintenance: the vacuum horizon moved on (%s no longer holds it): vacuuming "
                 "pgqueue.job's %d dead row versions", memory.held_by, dead)
        memory.held_by = memory.held_at = None
    queries.vacuum(conn, "job")
    memory.horizon = horizon
    log.debug("maintenance: vacuumed pgqueue.job (%d dead row versions)", dead)
    # the shrink reads the horizon and the file itself: the dead rows the statistics say the
    # vacuum left count those that died while it ran too, which at a busy queue's rate said
    # "held" after every vacuum of a grown table
    return Vacuumed(True, shrink_if_bloated(conn))


def shrink_if_bloated(conn: queries.Conn) -> int:
    """Rewrite the job table (VACUUM FULL) when its heap is at least SHRINK_MIN_BYTES and
    SHRINK_RATIO times what its live rows plus VACUUM_DEAD_ROWS more need (the statistics the
    last VACUUM (ANALYZE) left), waiting at most SHRINK_LOCK_TIMEOUT_MS for the lock. Only
    while no transaction older than SHRINK_HELD_SECONDS holds the vacuum horizon: a rewrite
    keeps every row version some snapshot may still see, so under a held horizon it would copy
    them all under the lock and shrink little. (Not by the dead row versions the vacuum left:
    under load those always exceed the limit, and the table would never be rewritten.)
    Returns the heap bytes it
    gave back (0: not needed, not allowed, the horizon held or the lock busy: then it is tried
    again SHRINK_RETRY_SECONDS later)."""
    memory = _memory(conn)
    memory.shrink_at = None
    use = queries.fetch_one(conn, "job_heap_use")
    if use is None or use["live_bytes"] is None:
        return 0  # never analyzed: nothing to go by
    heap, live, row = int(use["heap_bytes"]), int(use["live_bytes"]), int(use["row_bytes"])
    needs = live + VACUUM_DEAD_ROWS * row
    if heap < SHRINK_MIN_BYTES or heap <= SHRINK_RATIO * needs:
        return 0
    if heap > SHRINK_MAX_BYTES:
        if not memory.too_large_said:
            memory.too_large_said = True
            log.warning("maintenance: pgqueue.job takes %d MB for about %d MB of rows, too "
                        "large to rewrite under its lock here (above %d MB): VACUUM FULL "
                        "pgqueue.job at a quiet time gives the space back", heap >> 20,
                        max(live >> 20, 1), SHRINK_MAX_BYTES >> 20)
        return 0
    seen = queries.fetch_one(conn, "vacuum_horizon")
    if seen is not None and _held_longer_than(seen, SHRINK_HELD_SECONDS):
        # the horizon is held (again): the rewrite would copy every row version the holder
        # may see, under the table's lock, and give little back
        memory.shrink_at = time.monotonic() + SHRINK_RETRY_SECONDS
        log.debug("maintenance: %s holds the vacuum horizon; pgqueue.job's shrink again in "
                  "%.0fs", seen["holder"], SHRINK_RETRY_SECONDS)
        return 0
    started = time.monotonic()
    if not queries.vacuum_full(conn, "job", lock_timeout_ms=SHRINK_LOCK_TIMEOUT_MS):
        memory.shrink_at = time.monotonic() + SHRINK_RETRY_SECONDS
        log.debug("maintenance: pgqueue.job's lock was busy for its shrink; again in %.0fs",
                  SHRINK_RETRY_SECONDS)
        return 0
    after = queries.fetch_one(conn, "job_heap_use")
    now = heap if after is None else int(after["heap_bytes"])
    log.info("maintenance: pgqueue.job shrank from %.1f to %.1f MB (VACUUM FULL, %.0f ms): "
             "the file had grown while the vacuum horizon was held", heap / 2**20, now / 2**20,
             (time.monotonic() - started) * 1000,
             extra={"pgqueue": {"event": "shrunk", "count": heap - now}})
    return max(heap - now, 0)
