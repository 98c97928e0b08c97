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
import heapq
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, croniter
from psycopg.types.json import Jsonb

from pgqueue import enqueue, queries, validate
from pgqueue.errors import ConnectionFailed, NotLeader, PgQueueError
from pgqueue.models import NewJob

log = logging.getLogger("pgqueue.schedule")

UTC = dt.timezone.utc
CATCH_UP = ("none", "one", "all")
ALL_CAP = 100          # ticks fired per schedule per pass under catch_up="all"
MAX_SCAN = 10_000      # missed ticks counted when reporting how many were dropped
NICKNAMES = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")


@dataclass(frozen=True)
class Schedule:
    """A cron schedule of a stream."""

    stream: str
    name: str
    cron: str
    timezone: str
    payload: bytes
    kind: str | None
    priority: int
    max_attempts: int
    catch_up: str
    misfire_grace: float
    paused: bool
    next_run_at: dt.datetime
    last_fired_at: dt.datetime | None
    updated_at: dt.datetime

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Schedule:
        return cls(
            stream=row["stream"], name=row["name"], cron=row["cron"], timezone=row["timezone"],
            payload=bytes(row["payload"]), kind=row["kind"], priority=row["priority"],
            max_attempts=row["max_attempts"], catch_up=row["catch_up"],
            misfire_grace=row["misfire_grace_ms"] / 1000.0, paused=row["paused"],
            next_run_at=row["next_run_at"], last_fired_at=row["last_fired_at"],
            updated_at=row["updated_at"],
        )


@dataclass(frozen=True)
class TickResult:
    """What one tick pass did."""

    schedules: int
    fired: int
    dropped: int


# -- cron on wall-clock time -----------------------------------------------------------------


def check_cron(cron: Any) -> str:
    """A cron expression croniter accepts: 5 fields, 6 with seconds last, or a @nickname."""
    if not isinstance(cron, str):
        raise TypeError(f"cron must be a str, got {type(cron).__name__}")
    text = " ".join(cron.split())
    fields = text.split(" ")
    if text.lower() in NICKNAMES:
        return text.lower()
    if len(fields) not in (5, 6):
        raise ValueError(f"cron must have 5 fields (or 6 with seconds last), got {len(fields)}: "
                         f"{cron!r}")
    if not croniter.is_valid(text):
        raise ValueError(f"cron expression {cron!r} is not valid")
    return text


def check_timezone(name: Any) -> ZoneInfo:
    """An IANA time zone."""
    if not isinstance(name, str):
        raise TypeError("timezone must be an IANA zone name such as 'Europe/Paris'")
    if not name:
        raise ValueError("timezone must be an IANA zone name such as 'Europe/Paris', got ''")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"timezone {name!r} is not a known IANA time zone") from None


def _place(wall: dt.datetime, zone: ZoneInfo) -> dt.datetime:
    """A naive wall time in `zone` on the UTC line (gap: shifted forward; fold: first)."""
    return wall.replace(tzinfo=zone, fold=0).astimezone(UTC)


#: Longer than any clock change: how far placement can move a wall time.
_SHIFT = dt.timedelta(hours=3)


def _steady(zone: ZoneInfo, a: dt.datetime, b: dt.datetime) -> bool:
    """No clock change in the zone between instants a and b (same offset at both ends; the
    window is shorter than any two changes)."""
    return a.astimezone(zone).utcoffset() == b.astimezone(zone).utcoffset()


def fire_times(cron: str, zone: ZoneInfo, after: dt.datetime) -> Iterator[dt.datetime]:
    """Fire times strictly after `after`, ascending, as UTC datetimes.

    Placement can move a wall time forward past later ones (in a gap), so candidates are
    buffered and released in order once a later wall time makes an earlier one impossible."""
    start = after - _SHIFT if not _steady(zone, after - _SHIFT, after) else after
    it = croniter(cron, start.astimezone(zone).replace(tzinfo=None))
    pending: list[dt.datetime] = []
    last = after
    while True:
        t = _place(it.get_next(dt.datetime), zone)
        heapq.heappush(pending, t)
        while pending and t - pending[0] >= _SHIFT:
            first = heapq.heappop(pending)
            if first > last:
                last = first
                yield first
        if len(pending) > 100_000:  # a pathological cron: release what we have, in order
            while pending:
                first = heapq.heappop(pending)
                if first > last:
                    last = first
                    yield first


def fire_times_before(cron: str, zone: ZoneInfo, before: dt.datetime) -> Iterator[dt.datetime]:
    """Fire times strictly before `before`, descending, as UTC datetimes."""
    end = before + _SHIFT if not _steady(zone, before, before + _SHIFT) else before
    it = croniter(cron, end.astimezone(zone).replace(tzinfo=None))
    pending: list[tuple[float, dt.datetime]] = []  # max-heap by time
    last = before
    while True:
        t = _place(it.get_prev(dt.datetime), zone)
        heapq.heappush(pending, (-t.timestamp(), t))
        while pending and pending[0][1] - t >= _SHIFT:
            _, first = heapq.heappop(pending)
            if first < last:
                last = first
                yield first
        if len(pending) > 100_000:
            while pending:
                _, first = heapq.heappop(pending)
                if first < last:
                    last = first
                    yield first


def next_fire(cron: str, timezone: str, after: dt.datetime) -> dt.datetime:
    """The first fire time strictly after `after` (ValueError for a cron that never fires)."""
    try:
        return next(fire_times(check_cron(cron), check_timezone(timezone), after))
    except (CroniterBadDateError, StopIteration):
        raise ValueError(f"cron expression {cron!r} never fires") from None


def upcoming(schedule: Schedule, n: int) -> list[dt.datetime]:
    """The next `n` fire times from next_run_at, in the schedule's zone."""
    zone = check_timezone(schedule.timezone)
    times = [schedule.next_run_at.astimezone(UTC)]
    it = fire_times(schedule.cron, zone, times[0])
    while len(times) < n:
        times.append(next(it))
    return [t.astimezone(zone) for t in times[:n]]


# -- changes ---------------------------------------------------------------------------------


def _now(conn: queries.Conn, now: dt.datetime | None) -> dt.datetime:
    """The database's clock for the current transaction, pinned to `now` first when given
    (simulated time): a host's clock may be minutes off, the database is the one clock all
    schedulers share."""
    if now is not None:
        validate.aware_datetime(now, "now")
        queries.fetch(conn, "pin_clock", {"now": now.isoformat()})
    row = queries.fetch_one(conn, "schedule_clock")
    assert row is not None
    at: dt.datetime = row["now"]
    return at.astimezone(UTC)


def _next_run(row: dict[str, Any], cron: str, timezone: str, at: dt.datetime,
              keep: bool) -> dt.datetime:
    """next_run_at for a change of the locked `row` (empty: a new schedule) at `at`: kept
    when `keep`, else the first fire time after `at`; never at or before the last fired time."""
    last: dt.datetime | None = row["last_fired_at"] if row else None
    if keep and (last is None or row["next_run_at"] > last):
        kept: dt.datetime = row["next_run_at"]
        return kept
    if keep and last is not None:
        # a row an earlier release left at or before its last fire: on from that fire
        return next_fire(cron, timezone, last)
    return next_fire(cron, timezone, at if last is None else max(at, last))


def upsert(conn: queries.Conn, stream: str, name: str, cron: str, payload: Any = b"", *,
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
    with conn.transaction():
        # the lock first: a tick that fired meanwhile has committed its last_fired_at, which
        # bounds next_run_at below (the transaction's clock may predate the wait)
        row = queries.fetch_one(conn, "schedule_lock", {"stream": stream, "name": name})
        at = _now(conn, now)
        keep = (row is not None and row["cron"] == cron and row["timezone"] == timezone
                and row["paused"] == paused)
        next_run_at = _next_run(row or {}, cron, timezone, at, keep)
        saved = queries.fetch_one(conn, "schedule_upsert", {
            "stream": stream, "name": name, "cron": cron, "timezone": timezone, "payload": data,
            "kind": kind, "priority": priority, "max_attempts": max_attempts,
            "catch_up": catch_up, "misfire_grace_ms": grace_ms, "paused": paused,
            "next_run_at": next_run_at})
    assert saved is not None
    return Schedule.from_row(saved)


def get(conn: queries.Conn, stream: str, name: str) -> Schedule | None:
    row = queries.fetch_one(conn, "schedule_get", {"stream": stream, "name": name})
    return None if row is None else Schedule.from_row(row)


def list_(conn: queries.Conn, stream: str) -> list[Schedule]:
    return [Schedule.from_row(r) for r in queries.fetch(conn, "schedules_list", {"stream": stream})]


def set_paused(conn: queries.Conn, stream: str, name: str, paused: bool, *,
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


def remove(conn: queries.Conn, stream: str, name: str) -> None:
    queries.fetch(conn, "schedule_remove", {"stream": stream, "name": name})


# -- ticking ---------------------------------------------------------------------------------


def _ticks(s: Schedule, now: dt.datetime, cap: int) -> tuple[list[dt.datetime], int]:
    """The fire times a pass at `now` fires for `s`, oldest first, and how many due ticks it
    drops. A tick is missed when the pass comes more than misfire_grace after it; at most
    `cap` ticks fire per pass, the newest, and the older surplus is dropped (and counted)."""
    zone = check_timezone(s.timezone)
    first = s.next_run_at.astimezone(UTC)
    if s.last_fired_at is not None and first <= s.last_fired_at:
        # a row an earlier release moved back onto a fired time: only later times may fire
        first = s.last_fired_at.astimezone(UTC) + dt.timedelta(milliseconds=1)
    boundary = now - dt.timedelta(seconds=s.misfire_grace)
    in_grace: list[dt.datetime] = []
    dropped = 0
    for t in fire_times(s.cron, zone, max(first, boundary) - dt.timedelta(milliseconds=1)):
        if t > now:
            break
        in_grace.append(t)
        if len(in_grace) > cap:
            in_grace.pop(0)
            dropped += 1
        if dropped >= MAX_SCAN:
            break
    missed: list[dt.datetime] = []
    if first < boundary:
        room = {"none": 0, "one": 1, "all": max(cap - len(in_grace), 0)}[s.catch_up]
        for t in fire_times_before(s.cron, zone, boundary):
            if t < first or dropped >= MAX_SCAN:
                break
            if len(missed) < room:
                missed.append(t)
            else:
                dropped += 1
        missed.reverse()
    return missed + in_grace, dropped


def tick(conn: queries.Conn, *, now: dt.datetime | None = None, limit: int = 100,
         cap: int = ALL_CAP) -> TickResult:
    """Fire every due schedule once per tick; returns counts. Idempotent and safe to run from
    many places at once (claim, enqueue and advance commit together)."""
    schedules = fired = dropped = 0
    while True:
        errors = 0
        with conn.transaction():
            at = _now(conn, now)
            rows = queries.fetch(conn, "schedules_claim_due", {"now": at, "limit": limit})
            for row in rows:
                s = Schedule.from_row(row)
                try:
                    with conn.transaction():  # a savepoint: one bad schedule stops only itself
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


def _fire(conn: queries.Conn, s: Schedule, at: dt.datetime, cap: int) -> tuple[int, int]:
    """Enqueue one schedule's due ticks and advance it; (ticks fired, ticks dropped)."""
    ticks, lost = _ticks(s, at, cap)
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
    queries.fetch(conn, "schedule_advance", {
        "stream": s.stream, "name": s.name, "next_run_at": next_run,
        "last_fired_at": ticks[-1] if ticks else None,
        "fired": Jsonb([t.isoformat() for t in ticks])})
    return len(ticks), lost


def streams_named(conn: queries.Conn, name: str) -> list[str]:
    """The streams holding a schedule called `name`, sorted (to say where a name lives when
    it is not in the stream asked for)."""
    return [r["stream"] for r in queries.fetch(conn, "schedule_streams_by_name", {"name": name})]
