# DO NOT EDIT: generated from pgqueue/client/schedule_async.py by tools/generate.py; edit that file.
"""Schedules: cron that fires exactly once per tick.

Cron expressions (five fields, or six with seconds last, croniter's convention, or @daily and
friends) are evaluated on wall-clock time in the schedule's zone, then each wall time is
placed on the UTC line: a wall time skipped by a spring-forward gap fires at the same offset
after the gap (02:30 becomes 03:30), an ambiguous wall time in a fall-back fires at its first
occurrence, and a UTC instant is never fired twice. So a daily 02:30 job fires once on both
days.

A tick is claimed with SKIP LOCKED, its job enqueued and next_run_at advanced past it in one
transaction: exactly once however many schedulers run. Each tick's job also carries the dedup
key `schedule:NAME@FIRE_TIME` as a second guard, while the job is live.

A fire time fires at most once, ever: last_fired_at is the latest fire time fired, and the SQL
functions refuse, under the schedule's row lock, a fire time or a next_run_at that is not
after it. Changes compute next_run_at from max(the database's clock, last_fired_at) read under
that lock, so neither a host clock behind nor a change that waited behind a tick's lock can
move a schedule back onto a time it already fired. Every decision here takes the database's
clock (pgqueue.now_ms()), never the host's.
"""
from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from psycopg.types.json import Jsonb

from pgqueue import validate
from pgqueue.client import enqueue
from pgqueue.cron import (
    ALL_CAP,
    CATCH_UP,
    MAX_SCAN,
    UTC,
    Schedule,
    TickResult,
    check_cron,
    check_timezone,
    due_ticks,
    fire_times,
    fire_times_before,
    next_fire,
    next_run_after,
    upcoming,
)
from pgqueue.db import run
from pgqueue.errors import ConnectionFailed, NotLeader, PgQueueError
from pgqueue.models import NewJob

__all__ = ["ALL_CAP", "CATCH_UP", "Schedule", "TickResult", "check_cron", "check_timezone",
           "fire_times", "fire_times_before", "get", "list_", "next_fire", "remove",
           "set_paused", "streams_named", "tick", "upcoming", "upsert"]

log = logging.getLogger("pgqueue.schedule")


# -- changes ---------------------------------------------------------------------------------


def _now(conn: run.Conn, now: dt.datetime | None) -> dt.datetime:
    """The database's clock for the current transaction, pinned to `now` first when given
    (simulated time): a host's clock may be minutes off, the database is the one clock all
    schedulers share."""
    if now is not None:
        validate.aware_datetime(now, "now")
        run.fetch(conn, "pin_clock", {"now": now.isoformat()})
    row = run.fetch_one(conn, "schedule_clock")
    assert row is not None
    at: dt.datetime = row["now"]
    return at.astimezone(UTC)


def upsert(conn: run.Conn, stream: str, name: str, cron: str, payload: Any = b"{}", *,
           kind: str | None = None, timezone: str = "UTC", priority: int = 0,
           max_attempts: int = 25, catch_up: str = "one", misfire_grace: float = 60.0,
           paused: bool = False, now: dt.datetime | None = None) -> Schedule:
    """Create or change a schedule; every argument is checked before anything is written.
    next_run_at is kept when the cron, zone and paused state are unchanged."""
    validate.stream(stream)
    validate.stream(name, "name")
    cron = check_cron(cron)
    check_timezone(timezone)
    data = validate.payload(payload)
    validate.kind(kind)
    validate.integer(priority, "priority", low=0, high=255)
    validate.integer(max_attempts, "max_attempts", low=0, high=2**31 - 1)
    if catch_up not in CATCH_UP:
        raise ValueError(f"catch_up must be one of {', '.join(CATCH_UP)}, got {catch_up!r}")
    grace_ms = validate.to_ms(misfire_grace, "misfire_grace")
    if not isinstance(paused, bool):
        raise TypeError("paused must be a bool")
    with run.transaction(conn):
        # the lock first: a tick that fired meanwhile has committed its last_fired_at, which
        # bounds next_run_at below (the transaction's clock may predate the wait)
        row = run.fetch_one(conn, "schedule_lock", {"stream": stream, "name": name})
        at = _now(conn, now)
        keep = (row is not None and row["cron"] == cron and row["timezone"] == timezone
                and row["paused"] == paused)
        next_run_at = next_run_after(row or {}, cron, timezone, at, keep)
        saved = run.fetch_one(conn, "schedule_upsert", {
            "stream": stream, "name": name, "cron": cron, "timezone": timezone, "payload": data,
            "kind": kind, "priority": priority, "max_attempts": max_attempts,
            "catch_up": catch_up, "misfire_grace_ms": grace_ms, "paused": paused,
            "next_run_at": next_run_at})
    assert saved is not None
    return Schedule.from_row(saved)


def get(conn: run.Conn, stream: str, name: str) -> Schedule | None:
    row = run.fetch_one(conn, "schedule_get", {"stream": stream, "name": name})
    return None if row is None else Schedule.from_row(row)


def list_(conn: run.Conn, stream: str | None) -> list[Schedule]:
    """A stream's schedules (every stream's when None), by stream and name."""
    rows = run.fetch(conn, "schedules_list", {"stream": stream})
    return [Schedule.from_row(r) for r in rows]


def set_paused(conn: run.Conn, stream: str, name: str, paused: bool, *,
               now: dt.datetime | None = None) -> Schedule:
    """Pause, or resume (next_run_at recomputed from the database's clock, never onto a time
    already fired: paused ticks do not fire)."""
    current = get(conn, stream, name)
    if current is None:
        from pgqueue.errors import JobNotFound

        raise JobNotFound(f"no schedule {name!r} in stream {stream!r}")
    return upsert(conn, stream, name, current.cron, current.payload, kind=current.kind,
                  timezone=current.timezone, priority=current.priority,
                  max_attempts=current.max_attempts, catch_up=current.catch_up,
                  misfire_grace=current.misfire_grace, paused=paused, now=now)


def remove(conn: run.Conn, stream: str, name: str) -> None:
    run.fetch(conn, "schedule_remove", {"stream": stream, "name": name})


# -- ticking ---------------------------------------------------------------------------------


def tick(conn: run.Conn, *, now: dt.datetime | None = None, limit: int = 100,
         cap: int = ALL_CAP, by_stream: bool | None = None) -> TickResult:
    """Fire every due schedule once per tick; returns counts. Idempotent and safe to run from
    many places at once (claim, enqueue and advance commit together).

    `by_stream` (None: when the database is a Citus cluster's): the streams with a due
    schedule first, then each stream's in a transaction of its own, which runs on the node
    holding the stream alone."""
    if by_stream is None:
        by_stream = run.on_citus(conn)
    if not by_stream:
        return _tick(conn, None, now=now, limit=limit, cap=cap)
    with run.transaction(conn):
        at = _now(conn, now)
        streams = [str(r["stream"]) for r in run.fetch(conn, "schedule_due_streams",
                                                              {"now": at})]
    total = TickResult(schedules=0, fired=0, dropped=0)
    for stream in streams:
        one = _tick(conn, stream, now=now, limit=limit, cap=cap)
        total = TickResult(schedules=total.schedules + one.schedules,
                           fired=total.fired + one.fired, dropped=total.dropped + one.dropped)
    return total


def _tick(conn: run.Conn, stream: str | None, *, now: dt.datetime | None,
          limit: int, cap: int) -> TickResult:
    """tick over every stream's due schedules (None), or one stream's."""
    schedules = fired = dropped = 0
    while True:
        errors = 0
        with run.transaction(conn):
            at = _now(conn, now)
            rows = run.fetch(
                conn, "schedules_claim_due" if stream is None else "schedules_claim_due_of",
                {"now": at, "limit": limit, "stream": stream})
            for row in rows:
                s = Schedule.from_row(row)
                try:
                    # a savepoint: one bad schedule stops only itself
                    with run.transaction(conn):
                        n, lost = _fire(conn, s, at, cap)
                except (NotLeader, ConnectionFailed):
                    raise
                except (ValueError, PgQueueError) as exc:
                    log.error("schedule %s/%s cannot fire: %s", s.stream, s.name, exc)
                    errors += 1
                    continue
                schedules += 1
                fired += n
                dropped += lost
        if len(rows) - errors < limit:
            return TickResult(schedules=schedules, fired=fired, dropped=dropped)


def _fire(conn: run.Conn, s: Schedule, at: dt.datetime, cap: int) -> tuple[int, int]:
    """Enqueue one schedule's due ticks and advance it; (ticks fired, ticks dropped)."""
    ticks, lost = due_ticks(s, at, cap)
    if lost:
        log.warning("schedule %s/%s: dropped %s missed tick(s) (catch_up=%s)",
                    s.stream, s.name, lost if lost < MAX_SCAN else f">={lost}",
                    s.catch_up)
    if ticks:
        enqueue.enqueue_many(conn, s.stream, [
            NewJob(s.payload, kind=s.kind, priority=s.priority,
                   max_attempts=s.max_attempts,
                   dedup_key=f"schedule:{s.name}@{t.isoformat()}")
            for t in ticks])
    after = max(at, s.last_fired_at) if s.last_fired_at is not None else at
    next_run = next(fire_times(s.cron, check_timezone(s.timezone), after))
    run.fetch(conn, "schedule_advance", {
        "stream": s.stream, "name": s.name, "next_run_at": next_run,
        "last_fired_at": ticks[-1] if ticks else None,
        "fired": Jsonb([t.isoformat() for t in ticks])})
    return len(ticks), lost


def streams_named(conn: run.Conn, name: str) -> list[str]:
    """The streams holding a schedule called `name`, sorted (to say where a name lives when
    it is not in the stream asked for)."""
    rows = run.fetch(conn, "schedule_streams_by_name", {"name": name})
    return [r["stream"] for r in rows]
