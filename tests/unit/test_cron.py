"""Cron on wall-clock time (no database): which expressions and zones are accepted, and where
each fire time lands on the UTC line, above all across daylight-saving changes.

The rules under test (pgqueue/client/schedule.py): croniter's syntax, five fields or six with the
seconds LAST; each wall time is placed in the schedule's zone; a wall time skipped by a
spring-forward gap fires at the same offset after the gap (02:30 becomes 03:30); an ambiguous
wall time in a fall-back fires at its first occurrence; a UTC instant is never fired twice.

DST dates used: America/New_York springs forward 2026-03-08 02:00 EST -> 03:00 EDT and falls
back 2026-11-01 02:00 EDT -> 01:00 EST; Europe/Paris springs forward 2026-03-29 02:00 CET ->
03:00 CEST and falls back 2026-10-25 03:00 CEST -> 02:00 CET.
"""
from __future__ import annotations

import datetime as dt
import itertools
from collections import Counter
from collections.abc import Iterable
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st

from pgqueue.client.schedule import (
    Schedule,
    check_cron,
    check_timezone,
    fire_times,
    fire_times_before,
    next_fire,
    upcoming,
)

UTC = dt.timezone.utc
NEW_YORK = ZoneInfo("America/New_York")
PARIS = ZoneInfo("Europe/Paris")
UTC_ZONE = ZoneInfo("UTC")

#: (zone, local date of the spring-forward day, local date of the fall-back day)
DST_ZONES = [
    pytest.param(NEW_YORK, dt.date(2026, 3, 8), dt.date(2026, 11, 1), id="new_york"),
    pytest.param(PARIS, dt.date(2026, 3, 29), dt.date(2026, 10, 25), id="paris"),
]


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0,
        micro: int = 0) -> dt.datetime:
    return dt.datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC)


def take_until(times: Iterable[dt.datetime], stop: dt.datetime) -> list[dt.datetime]:
    """The ascending `times` up to and including `stop`."""
    return list(itertools.takewhile(lambda t: t <= stop, times))


def take_down_to(times: Iterable[dt.datetime], stop: dt.datetime) -> list[dt.datetime]:
    """The descending `times` down to and including `stop`."""
    return list(itertools.takewhile(lambda t: t >= stop, times))


def local_day(zone: ZoneInfo, day: dt.date) -> tuple[dt.datetime, dt.datetime]:
    """The UTC instants of local midnight starting `day` and the next local midnight."""
    start = dt.datetime.combine(day, dt.time(0), tzinfo=zone).astimezone(UTC)
    end = dt.datetime.combine(day + dt.timedelta(days=1), dt.time(0), tzinfo=zone).astimezone(UTC)
    return start, end


def fires_on(cron: str, zone: ZoneInfo, day: dt.date) -> list[dt.datetime]:
    """The fire times whose instant falls on local date `day`, in the zone."""
    start, end = local_day(zone, day)
    times = take_until(fire_times(cron, zone, start - dt.timedelta(microseconds=1)), end)
    return [t.astimezone(zone) for t in times if t < end]


# -- check_cron ------------------------------------------------------------------------------


@pytest.mark.parametrize(("cron", "normal"), [
    ("* * * * *", "* * * * *"),
    ("*/15 9-17 * * MON-FRI", "*/15 9-17 * * MON-FRI"),
    ("  0   3 *  * *  ", "0 3 * * *"),
    ("0 0 1 JAN *", "0 0 1 JAN *"),
    ("* * * * * */5", "* * * * * */5"),
    ("0 * * * * 30", "0 * * * * 30"),
    ("@daily", "@daily"),
    ("@HOURLY", "@hourly"),
    ("@yearly", "@yearly"),
])
def test_check_cron_accepts_five_or_six_fields_and_nicknames(cron: str, normal: str) -> None:
    assert check_cron(cron) == normal


@pytest.mark.parametrize(("cron", "needle"), [
    ("* * * *", "5 fields"),
    ("* * * * * * *", "5 fields"),
    ("", "5 fields"),
    ("garbage", "5 fields"),
    ("@reboot", "5 fields"),
    ("61 * * * *", "61 * * * *"),
    ("* 24 * * *", "* 24 * * *"),
    ("* * 32 * *", "* * 32 * *"),
    ("* * 0 * *", "* * 0 * *"),
    ("* * * 13 *", "* * * 13 *"),
    ("* * * * 8", "* * * * 8"),
    ("* * * * * 61", "* * * * * 61"),
    ("*/0 * * * *", "*/0 * * * *"),
    ("a b c d e", "a b c d e"),
    ("1,,2 * * * *", "1,,2 * * * *"),
])
def test_check_cron_refuses_bad_expressions_naming_them(cron: str, needle: str) -> None:
    with pytest.raises(ValueError, match="cron") as caught:
        check_cron(cron)
    assert needle in str(caught.value)
    assert repr(cron) in str(caught.value)


@pytest.mark.parametrize("cron", [None, 5, ["*"] * 5, b"* * * * *"])
def test_check_cron_refuses_non_strings(cron: object) -> None:
    with pytest.raises(TypeError, match="cron"):
        check_cron(cron)


# -- check_timezone --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["UTC", "Europe/Paris", "America/New_York", "Asia/Kolkata",
                                  "Australia/Lord_Howe", "Etc/GMT+5"])
def test_check_timezone_accepts_iana_zones(name: str) -> None:
    assert check_timezone(name) == ZoneInfo(name)


@pytest.mark.parametrize("name", ["Mars/Base", "Europe/Pariss", "Europe/Paris ", "../../etc/passwd",
                                  "/etc/localtime", "Not A Zone"])
def test_check_timezone_refuses_unknown_zones_naming_them(name: str) -> None:
    with pytest.raises(ValueError, match="time zone") as caught:
        check_timezone(name)
    assert repr(name) in str(caught.value)


@pytest.mark.parametrize("name", [None, 0, ZoneInfo("UTC")])
def test_check_timezone_refuses_non_strings(name: object) -> None:
    with pytest.raises(TypeError, match="timezone"):
        check_timezone(name)


# -- next_fire / fire_times / fire_times_before ----------------------------------------------


def test_next_fire_is_strictly_after() -> None:
    assert next_fire("*/15 * * * *", "UTC", utc(2026, 1, 1, 10, 0)) == utc(2026, 1, 1, 10, 15)
    assert next_fire("*/15 * * * *", "UTC", utc(2026, 1, 1, 10, 0, 0, 1)) == utc(2026, 1, 1, 10, 15)
    assert next_fire("*/15 * * * *", "UTC", utc(2026, 1, 1, 9, 59, 59)) == utc(2026, 1, 1, 10, 0)
    first = next_fire("0 3 * * *", "UTC", utc(2026, 1, 1, 3, 0))
    assert first == utc(2026, 1, 2, 3, 0) and first.tzinfo is not None


def test_next_fire_checks_cron_and_zone() -> None:
    with pytest.raises(ValueError, match="61"):
        next_fire("61 * * * *", "UTC", utc(2026, 1, 1))
    with pytest.raises(ValueError, match="Mars/Base"):
        next_fire("* * * * *", "Mars/Base", utc(2026, 1, 1))


def test_next_fire_finds_a_leap_day() -> None:
    assert next_fire("0 0 29 2 *", "UTC", utc(2025, 3, 1)) == utc(2028, 2, 29)


def test_next_fire_accepts_an_aware_after_in_any_zone() -> None:
    after = dt.datetime(2026, 1, 1, 11, 0, tzinfo=PARIS)  # 10:00 UTC
    assert next_fire("0 * * * *", "UTC", after) == utc(2026, 1, 1, 11, 0)


def test_seconds_are_the_last_of_six_fields() -> None:
    start = utc(2026, 1, 1, 12, 0, 0)
    every5 = take_until(fire_times("* * * * * */5", UTC_ZONE, start), start + dt.timedelta(seconds=30))
    assert every5 == [start + dt.timedelta(seconds=s) for s in range(5, 31, 5)]
    every_second = take_until(fire_times("* * * * * *", UTC_ZONE, start), start + dt.timedelta(seconds=3))
    assert every_second == [start + dt.timedelta(seconds=s) for s in (1, 2, 3)]
    # "0 * * * * 30": minute 0 of every hour, at second 30 (not second 0 of minute 30)
    hourly_at_30s = list(itertools.islice(fire_times("0 * * * * 30", UTC_ZONE, start), 3))
    assert hourly_at_30s == [utc(2026, 1, 1, 12, 0, 30), utc(2026, 1, 1, 13, 0, 30),
                             utc(2026, 1, 1, 14, 0, 30)]



def test_fire_times_ascend_strictly_after_and_before_descends_strictly_before() -> None:
    at = utc(2026, 5, 5, 10, 30)
    after = list(itertools.islice(fire_times("*/10 * * * *", UTC_ZONE, at), 4))
    assert after == [utc(2026, 5, 5, 10, 40), utc(2026, 5, 5, 10, 50), utc(2026, 5, 5, 11, 0),
                     utc(2026, 5, 5, 11, 10)]
    before = list(itertools.islice(fire_times_before("*/10 * * * *", UTC_ZONE, at), 4))
    assert before == [utc(2026, 5, 5, 10, 20), utc(2026, 5, 5, 10, 10), utc(2026, 5, 5, 10, 0),
                      utc(2026, 5, 5, 9, 50)]
    assert all(t.utcoffset() == dt.timedelta(0) for t in after + before)


@pytest.mark.parametrize("zone", [UTC_ZONE, PARIS, NEW_YORK])
@pytest.mark.parametrize("at", [utc(2026, 5, 5, 10, 30), utc(2026, 3, 29, 0, 30),
                                utc(2026, 11, 1, 5, 30)])
def test_a_per_second_cron_computes_few_candidates_away_from_a_clock_change(
        zone: ZoneInfo, at: dt.datetime, monkeypatch: pytest.MonkeyPatch) -> None:
    # A clock change is buffered across (three hours of candidates: 10,800 for a per-second
    # cron); anywhere else a fire time is released as soon as it is computed. A scheduler pass
    # over per-second schedules took seconds per schedule before.
    calls = Counter[str]()

    class Counting(croniter):  # type: ignore[misc]
        def get_next(self, *args: object, **kwargs: object) -> object:
            calls["next"] += 1
            return super().get_next(*args, **kwargs)

        def get_prev(self, *args: object, **kwargs: object) -> object:
            calls["prev"] += 1
            return super().get_prev(*args, **kwargs)

    monkeypatch.setattr("pgqueue.cron.croniter", Counting)
    after = list(itertools.islice(fire_times("* * * * * *", zone, at), 3))
    before = list(itertools.islice(fire_times_before("* * * * * *", zone, at), 3))
    step = dt.timedelta(seconds=1)
    assert after == [at + step, at + 2 * step, at + 3 * step]
    assert before == [at - step, at - 2 * step, at - 3 * step]
    calm = all(zone.utcoffset(at.replace(tzinfo=None) + k * dt.timedelta(hours=1)) ==
               zone.utcoffset(at.replace(tzinfo=None)) for k in range(-4, 5))
    if calm:  # (within hours of a change the buffer is crossed: exact, but not cheap)
        assert calls["next"] <= 5 and calls["prev"] <= 5, calls


def test_cron_runs_on_the_zone_wall_clock() -> None:
    # 09:00 in Paris is 08:00 UTC in winter (CET) and 07:00 UTC in summer (CEST)
    assert next_fire("0 9 * * *", "Europe/Paris", utc(2026, 1, 10)) == utc(2026, 1, 10, 8, 0)
    assert next_fire("0 9 * * *", "Europe/Paris", utc(2026, 7, 10)) == utc(2026, 7, 10, 7, 0)
    assert next_fire("0 9 * * *", "America/New_York", utc(2026, 1, 10)) == utc(2026, 1, 10, 14, 0)
    assert next_fire("0 9 * * *", "America/New_York", utc(2026, 7, 10)) == utc(2026, 7, 10, 13, 0)
    assert next_fire("30 9 * * *", "Asia/Kolkata", utc(2026, 7, 10)) == utc(2026, 7, 10, 4, 0)


# -- daylight saving -------------------------------------------------------------------------


def test_new_york_daily_0230_fires_once_on_spring_forward_day_at_0330() -> None:
    fired = fires_on("30 2 * * *", NEW_YORK, dt.date(2026, 3, 8))
    assert fired == [dt.datetime(2026, 3, 8, 3, 30, tzinfo=NEW_YORK)]
    assert fired[0].astimezone(UTC) == utc(2026, 3, 8, 7, 30)
    # the days around are untouched
    assert fires_on("30 2 * * *", NEW_YORK, dt.date(2026, 3, 7))[0].astimezone(UTC) == utc(2026, 3, 7, 7, 30)
    assert fires_on("30 2 * * *", NEW_YORK, dt.date(2026, 3, 9))[0].astimezone(UTC) == utc(2026, 3, 9, 6, 30)


def test_new_york_daily_0230_fires_once_on_fall_back_day() -> None:
    fired = fires_on("30 2 * * *", NEW_YORK, dt.date(2026, 11, 1))
    assert [t.astimezone(UTC) for t in fired] == [utc(2026, 11, 1, 7, 30)]  # 02:30 EST


def test_new_york_daily_0130_fires_once_on_fall_back_day_at_the_first_0130() -> None:
    fired = fires_on("30 1 * * *", NEW_YORK, dt.date(2026, 11, 1))
    assert [t.astimezone(UTC) for t in fired] == [utc(2026, 11, 1, 5, 30)]  # 01:30 EDT
    assert fired[0].utcoffset() == dt.timedelta(hours=-4)


def test_paris_daily_0230_fires_once_on_both_transition_days() -> None:
    spring = fires_on("30 2 * * *", PARIS, dt.date(2026, 3, 29))
    assert [t.astimezone(UTC) for t in spring] == [utc(2026, 3, 29, 1, 30)]  # 03:30 CEST
    assert (spring[0].hour, spring[0].minute) == (3, 30)
    fall = fires_on("30 2 * * *", PARIS, dt.date(2026, 10, 25))
    assert [t.astimezone(UTC) for t in fall] == [utc(2026, 10, 25, 0, 30)]  # the first 02:30 (CEST)
    assert fall[0].utcoffset() == dt.timedelta(hours=2)


@pytest.mark.parametrize(("zone", "spring", "fall"), DST_ZONES)
def test_daily_jobs_fire_exactly_once_every_day_across_both_transitions(
        zone: ZoneInfo, spring: dt.date, fall: dt.date) -> None:
    for day in (spring, fall):
        for offset in (-1, 0, 1):
            for cron in ("30 2 * * *", "30 1 * * *", "0 2 * * *", "59 2 * * *", "0 3 * * *",
                         "0 0 * * *"):
                fired = fires_on(cron, zone, day + dt.timedelta(days=offset))
                assert len(fired) == 1, (cron, day, offset, fired)


@pytest.mark.parametrize(("zone", "spring", "fall"), DST_ZONES)
def test_hourly_never_fires_twice_at_one_instant_and_each_wall_hour_once(
        zone: ZoneInfo, spring: dt.date, fall: dt.date) -> None:
    start, _ = local_day(zone, spring - dt.timedelta(days=1))
    _, end = local_day(zone, spring + dt.timedelta(days=1))
    times = take_until(fire_times("0 * * * *", zone, start), end)
    assert times == sorted(set(times))
    spring_day = fires_on("0 * * * *", zone, spring)
    assert len(spring_day) == 23  # the skipped hour does not exist; 02:00 lands on 03:00
    assert len({t.astimezone(UTC) for t in spring_day}) == 23

    start, _ = local_day(zone, fall - dt.timedelta(days=1))
    _, end = local_day(zone, fall + dt.timedelta(days=1))
    times = take_until(fire_times("0 * * * *", zone, start), end)
    assert times == sorted(set(times))
    fall_day = fires_on("0 * * * *", zone, fall)
    assert sorted(Counter(t.hour for t in fall_day).items()) == [(h, 1) for h in range(24)]
    assert len({t.astimezone(UTC) for t in fall_day}) == 24


def test_quarter_hours_in_the_new_york_fall_back_fire_each_wall_time_once() -> None:
    fired = fires_on("*/15 * * * *", NEW_YORK, dt.date(2026, 11, 1))
    walls = [(t.hour, t.minute) for t in fired]
    assert walls == [(h, m) for h in range(24) for m in (0, 15, 30, 45)]
    assert len({t.astimezone(UTC) for t in fired}) == len(fired)


def test_fire_times_after_a_time_inside_the_repeated_hour_skip_to_after_it() -> None:
    # 01:30 EST (the second 01:30) is 06:30 UTC: the wall times 01:30..01:59 already fired
    # at their first occurrence, so the next hourly fire is 02:00 EST
    second_0130 = dt.datetime(2026, 11, 1, 1, 30, fold=1, tzinfo=NEW_YORK)
    assert second_0130.astimezone(UTC) == utc(2026, 11, 1, 6, 30)
    assert next_fire("0 * * * *", "America/New_York", second_0130) == utc(2026, 11, 1, 7, 0)


# -- fire_times and fire_times_before agree --------------------------------------------------

CRONS = ["* * * * *", "*/7 * * * *", "0 * * * *", "30 2 * * *", "30 1 * * *", "15 0-3 * * *",
         "0 2 * * SUN", "*/20 1-3 * * *", "0 0 * * *"]
ZONES = ["America/New_York", "Europe/Paris", "Australia/Lord_Howe", "UTC"]
#: instants near the 2026 transitions of the zones above (and one quiet day)
ANCHORS = [utc(2026, 3, 8, 7), utc(2026, 11, 1, 6), utc(2026, 3, 29, 1), utc(2026, 10, 25, 1),
           utc(2026, 4, 4, 15), utc(2026, 10, 3, 15), utc(2026, 6, 1, 12)]


@settings(max_examples=150, deadline=None, derandomize=True)
@given(cron=st.sampled_from(CRONS), zone_name=st.sampled_from(ZONES),
       anchor=st.sampled_from(ANCHORS),
       shift=st.integers(min_value=-6 * 3600, max_value=6 * 3600),
       window=st.integers(min_value=60, max_value=30 * 3600))
def test_forward_and_backward_iteration_agree(cron: str, zone_name: str, anchor: dt.datetime,
                                              shift: int, window: int) -> None:
    zone = ZoneInfo(zone_name)
    lo = anchor + dt.timedelta(seconds=shift)
    hi = lo + dt.timedelta(seconds=window)
    forward = [t for t in take_until(fire_times(cron, zone, lo), hi) if t < hi]
    backward = [t for t in take_down_to(fire_times_before(cron, zone, hi), lo) if t > lo]
    assert forward == sorted(set(forward))
    assert all(lo < t < hi for t in forward)
    assert forward == backward[::-1]
    # each fire time is a wall time the cron names, or one a spring-forward gap pushed on
    for t in forward:
        wall = t.astimezone(zone).replace(tzinfo=None)
        offset = t.astimezone(zone).utcoffset()
        before = (t - dt.timedelta(hours=3)).astimezone(zone).utcoffset()
        assert offset is not None and before is not None
        gap = offset - before
        assert croniter.match(cron, wall) or (gap > dt.timedelta(0) and croniter.match(cron, wall - gap)), \
            (t, wall)


def test_a_half_hour_gap_keeps_the_real_wall_times_after_it() -> None:
    # Lord Howe Island springs forward by 30 minutes: 2026-10-04 02:00 (+10:30) -> 02:30
    # (+11:00). "*/7" names 02:00, 02:07 ... 02:28 (in the gap: they fire 30 minutes later,
    # at 02:30, 02:37 ... 02:58) and 02:35, 02:42, 02:49, 02:56, which exist and must fire too.
    zone = ZoneInfo("Australia/Lord_Howe")
    start = dt.datetime(2026, 10, 4, 1, 50, tzinfo=zone)
    end = dt.datetime(2026, 10, 4, 2, 59, tzinfo=zone)
    times = take_until(fire_times("*/7 * * * *", zone, start), end)
    got = [t.astimezone(zone).strftime("%H:%M") for t in times]
    assert got == ["01:56", "02:30", "02:35", "02:37", "02:42", "02:44", "02:49", "02:51", "02:56",
                   "02:58"]
    back = take_down_to(fire_times_before("*/7 * * * *", zone, end), start)
    assert [t.astimezone(zone).strftime("%H:%M") for t in back[::-1]] == got


# -- upcoming --------------------------------------------------------------------------------


def test_upcoming_lists_n_times_from_next_run_at_in_the_schedule_zone() -> None:
    s = Schedule(stream="default", name="s", cron="30 2 * * *", timezone="America/New_York",
                 payload=b"", kind=None, priority=0, max_attempts=25, catch_up="one",
                 misfire_grace=60.0, paused=False, next_run_at=utc(2026, 3, 7, 7, 30),
                 last_fired_at=None, updated_at=utc(2026, 3, 1))
    times = upcoming(s, 4)
    assert [t.isoformat() for t in times] == [
        "2026-03-07T02:30:00-05:00", "2026-03-08T03:30:00-04:00", "2026-03-09T02:30:00-04:00",
        "2026-03-10T02:30:00-04:00"]
    assert all(t.tzinfo == NEW_YORK for t in times)
    assert upcoming(s, 1) == [s.next_run_at]
