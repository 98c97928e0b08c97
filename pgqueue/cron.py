"""Cron for schedules, without I/O: checking a cron expression and a zone, fire times on the
UTC line, and which ticks a pass fires (see schedule.py for the guarantees and the writes).
"""
from __future__ import annotations

import datetime as dt
import heapq
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, croniter

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


def _calm(zone: ZoneInfo, t: dt.datetime) -> bool:
    """No clock change within _SHIFT either side of instant t: every wall time placed
    elsewhere lands on the same side of t as its wall time lies (a gap moves a wall time
    forward by less than _SHIFT, a fold back by less)."""
    return _steady(zone, t - _SHIFT, t) and _steady(zone, t, t + _SHIFT)


def fire_times(cron: str, zone: ZoneInfo, after: dt.datetime) -> Iterator[dt.datetime]:
    """Fire times strictly after `after`, ascending, as UTC datetimes.

    Placement can move a wall time forward past later ones (in a gap), so candidates are
    buffered and released in order once a later wall time makes an earlier one impossible: at
    once when the zone keeps one offset within _SHIFT of it (no later wall time can land
    before it), else once a candidate _SHIFT later came (a per-second cron would otherwise
    compute three hours of candidates before its first)."""
    start = after - _SHIFT if not _steady(zone, after - _SHIFT, after) else after
    it = croniter(cron, start.astimezone(zone).replace(tzinfo=None))
    pending: list[dt.datetime] = []
    last = after
    while True:
        t = _place(it.get_next(dt.datetime), zone)
        heapq.heappush(pending, t)
        while pending and (t - pending[0] >= _SHIFT or _calm(zone, pending[0])):
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
    """Fire times strictly before `before`, descending, as UTC datetimes (released as
    fire_times releases them, mirrored)."""
    end = before + _SHIFT if not _steady(zone, before, before + _SHIFT) else before
    it = croniter(cron, end.astimezone(zone).replace(tzinfo=None))
    pending: list[tuple[float, dt.datetime]] = []  # max-heap by time
    last = before
    while True:
        t = _place(it.get_prev(dt.datetime), zone)
        heapq.heappush(pending, (-t.timestamp(), t))
        while pending and (pending[0][1] - t >= _SHIFT or _calm(zone, pending[0][1])):
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


# -- what a change and a pass compute -----------------------------------------------------------


def next_run_after(row: dict[str, Any], cron: str, timezone: str, at: dt.datetime,
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


def due_ticks(s: Schedule, now: dt.datetime, cap: int) -> tuple[list[dt.datetime], int]:
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
