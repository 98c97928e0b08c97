"""Schedules on real Postgres: every cron tick is enqueued exactly once (DESIGN.md guarantee 8),
however many schedulers tick at once, after outages (catch-up policies none/one/all), across
daylight-saving changes, through pause/resume, and through an op-log replay.

Time is simulated: `schedule.upsert/set_paused/tick(now=...)` take the clock from the caller
and pin the database's clock (`pgqueue.now`) to it for the transaction, so hours of ticking
run in seconds. Simulated times lie in the past, so the tick jobs are leasable at once.

The verdict comes from the op log: each tick's Enqueue op carries the dedup key
`schedule:NAME@FIRE_TIME`, which names the schedule and the fire time it was enqueued for.
"""
from __future__ import annotations

import base64
import datetime as dt
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import pytest
from psycopg.types.json import Jsonb

import pgqueue
from pgqueue.client import lease as lease_stage
from pgqueue.client import schedule, settle
from pgqueue.db import connection, queries
from pgqueue.db.queries import Conn
from pgqueue.maintenance import maintain
from tests.dbhelp import lock_waiters, pinned, set_now, wait_for
from tests.pgbed import Bed

pytestmark = pytest.mark.layouts("single", "citus", "stock")

UTC = dt.timezone.utc
T0 = dt.datetime(2025, 6, 2, 0, 0, tzinfo=UTC)  # a Monday, long past: tick jobs are leasable
NEW_YORK = ZoneInfo("America/New_York")
PARIS = ZoneInfo("Europe/Paris")


def minutes(n: float) -> dt.timedelta:
    return dt.timedelta(minutes=n)


def seconds(n: float) -> dt.timedelta:
    return dt.timedelta(seconds=n)


# -- reading what happened -------------------------------------------------------------------


@dataclass(frozen=True)
class Fired:
    """One tick job, read back from its Enqueue op."""

    seq: int
    stream: str
    name: str
    at: dt.datetime
    job_id: int


def fired(conn: Conn, stream: str | None = None) -> list[Fired]:
    """Every tick job ever enqueued (in log order), decoded from the Enqueue ops' dedup keys."""
    rows = conn.execute(
        "SELECT seq, stream, job_id, pgqueue.op_body(o) ->> 'dedup_key' FROM pgqueue.op_log o "
        "WHERE op = 'Enqueue' AND (%(stream)s::text IS NULL OR stream = %(stream)s) ORDER BY seq",
        {"stream": stream}).fetchall()
    out: list[Fired] = []
    for seq, s, job_id, key in rows:
        text = base64.b64decode(key).decode()
        assert text.startswith("schedule:"), text
        name, _, when = text[len("schedule:"):].rpartition("@")
        out.append(Fired(seq, s, name, dt.datetime.fromisoformat(when), job_id))
    return out


def fired_at(conn: Conn, name: str, stream: str = "default") -> list[dt.datetime]:
    """The fire times `name` was enqueued for, in log order."""
    return [f.at for f in fired(conn, stream) if f.name == name]


def op_counts(conn: Conn) -> Counter[str]:
    return Counter(dict(conn.execute("SELECT op, count(*) FROM pgqueue.op_log GROUP BY op").fetchall()))


def ops(conn: Conn, op: str) -> list[dict[str, Any]]:
    return [r[0] for r in conn.execute(
        "SELECT body FROM pgqueue.op_log WHERE op = %s ORDER BY seq", (op,)).fetchall()]


def expected_fires(cron: str, zone: str, after: dt.datetime, until: dt.datetime) -> list[dt.datetime]:
    """What the cron math says fires in (after, until]."""
    out: list[dt.datetime] = []
    for t in schedule.fire_times(schedule.check_cron(cron), schedule.check_timezone(zone), after):
        if t > until:
            return out
        out.append(t)
    raise AssertionError("unreachable")


#: The rows a replay must reproduce, in a row-for-row order. The op log's lsn (each
#: database's own WAL position of the row) is local by nature and left out.
REPLAYED = {
    "pgqueue.schedule": "SELECT * FROM pgqueue.schedule ORDER BY stream, name",
    "pgqueue.job": "SELECT * FROM pgqueue.job ORDER BY id",
    "pgqueue.op_log": "SELECT seq, stream, op, job_id, lease_id, body, xid, at "
                      "FROM pgqueue.op_log ORDER BY seq",
}


def table(conn: Conn, name: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    cur = conn.execute(REPLAYED[name])
    return [d.name for d in cur.description or []], cur.fetchall()


@pytest.fixture
def conn(dsn: str) -> Iterator[Conn]:
    with connection.connect(dsn) as c:
        yield c


def drain(conn: Conn, streams: Sequence[str], worker: int = 0) -> int:
    """Lease and ack the ready jobs of `streams` (up to 1000 each); how many."""
    done = 0
    for stream in streams:
        leases = lease_stage.lease(conn, stream, 1000, 30.0, worker, 0)
        if leases:
            assert len(settle.ack_many(conn, leases)) == len(leases)
            done += len(leases)
    return done


# -- exactly once under concurrent schedulers ------------------------------------------------


@dataclass(frozen=True)
class Spec:
    stream: str
    name: str
    cron: str
    timezone: str = "UTC"
    catch_up: str = "one"


def run_schedulers(dsn: str, specs: Sequence[Spec], steps: int, step: dt.timedelta,
                   jitter: dt.timedelta, *, ack: bool, schedulers: int = 3,
                   seed: int = 0) -> tuple[list[pgqueue.TickResult], dt.datetime]:
    """Create `specs` at T0, then run `schedulers` threads, each with its own connection,
    ticking at T0 + i*step + (its own random jitter < `jitter`) for i in 1..steps, all
    released together at each step; with `ack`, each leases and acks every ready job right
    after its tick. Returns each scheduler's summed TickResult and the latest clock used."""
    assert jitter < step
    with connection.connect(dsn) as c:
        for s in specs:
            schedule.upsert(c, s.stream, s.name, s.cron, b"tick", kind="cron",
                            timezone=s.timezone, catch_up=s.catch_up, now=T0)
    streams = sorted({s.stream for s in specs})
    rng = random.Random(seed)
    clocks = [[T0 + step * i + jitter * rng.random() for i in range(1, steps + 1)]
              for _ in range(schedulers)]
    barrier = threading.Barrier(schedulers)

    def scheduler(k: int) -> pgqueue.TickResult:
        total = pgqueue.TickResult(0, 0, 0)
        try:
            with connection.connect(dsn) as c:
                for now in clocks[k]:
                    barrier.wait(timeout=60)
                    r = schedule.tick(c, now=now)
                    total = pgqueue.TickResult(total.schedules + r.schedules,
                                               total.fired + r.fired, total.dropped + r.dropped)
                    if ack:
                        drain(c, streams, worker=k)
        except BaseException:
            barrier.abort()
            raise
        return total

    with ThreadPoolExecutor(schedulers) as pool:
        results = list(pool.map(scheduler, range(schedulers)))
    return results, max(clock[-1] for clock in clocks)


def check_exactly_once(dsn: str, specs: Sequence[Spec], results: Sequence[pgqueue.TickResult],
                       until: dt.datetime, *, ack: bool) -> int:
    """Every fire time of every spec in (T0, until] was enqueued exactly once, and nothing
    else was; returns the number of ticks."""
    with connection.connect(dsn) as c:
        # a last pass at the latest clock: a tick that every scheduler skipped at its last
        # step (the row was claimed by one with an earlier clock) is still within the grace
        last = schedule.tick(c, now=until)
        assert last.dropped == 0
        jobs = fired(c)
        per_tick = Counter((f.stream, f.name, f.at) for f in jobs)
        doubles = {k: n for k, n in per_tick.items() if n > 1}
        assert not doubles, f"ticks enqueued more than once: {sorted(doubles.items())[:10]}"
        total = 0
        for s in specs:
            got = fired_at(c, s.name, s.stream)
            want = expected_fires(s.cron, s.timezone, T0, until)
            assert len(want) > 0
            assert sorted(got) == want, (s, sorted(set(want) - set(got))[:5],
                                         sorted(set(got) - set(want))[:5])
            total += len(want)
        assert len(jobs) == total
        assert sum(r.fired for r in results) + last.fired == total
        assert sum(r.dropped for r in results) == 0
        # the claim is contended: the ticks were fired by more than one scheduler
        assert sum(1 for r in results if r.fired > 0) >= 2, results
        # the advance ops list each fire time once too
        advanced = Counter((b["stream"], b["name"], dt.datetime.fromisoformat(t))
                           for b in ops(c, "UpdateScheduleNextRun") for t in b["fired"])
        assert advanced == per_tick
        counts = op_counts(c)
        assert counts["Enqueue"] == total
        if ack:
            # each tick's job was acked at once: no live job held its dedup key when the
            # next scheduler came, so only the claim-and-advance kept the ticks single
            left = drain(c, sorted({s.stream for s in specs}))
            assert left == last.fired
            assert counts["Ack"] + left == total
            assert c.execute("SELECT count(*) FROM pgqueue.job").fetchone() == (0,)
        else:
            state = c.execute("SELECT count(*), count(DISTINCT (stream, dedup_key)) "
                              "FROM pgqueue.job").fetchone()
            assert state == (total, total)
        for s in specs:
            row = schedule.get(c, s.stream, s.name)
            assert row is not None and row.next_run_at > until
            assert row.last_fired_at == expected_fires(s.cron, s.timezone, T0, until)[-1]
    return total


@pytest.mark.slow
def test_three_schedulers_acking_at_once_enqueue_each_tick_exactly_once(dsn: str) -> None:
    specs = [
        Spec("default", "every-minute", "* * * * *", catch_up="one"),
        Spec("default", "every-5-minutes", "*/5 * * * *", catch_up="all"),
        Spec("default", "paris-hourly", "0 * * * *", timezone="Europe/Paris", catch_up="none"),
        Spec("other", "every-2-minutes", "*/2 * * * *", catch_up="all"),
        Spec("other", "every-minute", "* * * * *", timezone="America/New_York"),
    ]
    # steps of 40 s plus up to 15 s of jitter: no scheduler ever moves on by more than the
    # 60 s grace, so no tick is missed and every one of them must fire
    results, until = run_schedulers(dsn, specs, steps=400, step=seconds(40), jitter=seconds(15),
                                    ack=True)
    assert check_exactly_once(dsn, specs, results, until, ack=True) >= 600


@pytest.mark.slow
def test_three_schedulers_with_second_fields_enqueue_each_tick_exactly_once(dsn: str) -> None:
    # six fields, seconds last: every 5 and every 15 seconds. The jobs stay live here, so
    # each tick's dedup key is held throughout (the second guard is up as well)
    specs = [
        Spec("default", "every-5s", "* * * * * */5", catch_up="all"),
        Spec("default", "every-15s", "* * * * * */15", catch_up="one"),
    ]
    results, until = run_schedulers(dsn, specs, steps=60, step=seconds(3), jitter=seconds(2),
                                    ack=False, seed=1)
    assert check_exactly_once(dsn, specs, results, until, ack=False) >= 45


# -- catch-up after an outage ----------------------------------------------------------------

#: A per-minute schedule created at T0 (first tick T0+1m) with misfire_grace=90 s, ticked
#: first at T0+30m30s: ticks T0+1m..T0+28m are missed (more than 90 s late) and
#: T0+29m, T0+30m are within the grace.
OUTAGE_NOW = T0 + minutes(30.5)
GRACE = 90.0


@pytest.mark.parametrize(("catch_up", "want_minutes", "want_dropped"), [
    ("none", [29, 30], 28),
    ("one", [28, 29, 30], 27),
    ("all", list(range(1, 31)), 0),
])
def test_catch_up_after_an_outage(conn: Conn, catch_up: str, want_minutes: list[int],
                                  want_dropped: int) -> None:
    schedule.upsert(conn, "default", "m", "* * * * *", catch_up=catch_up, misfire_grace=GRACE,
                    now=T0)
    result = schedule.tick(conn, now=OUTAGE_NOW)
    want = [T0 + minutes(m) for m in want_minutes]
    assert fired_at(conn, "m") == want  # in log order: oldest first
    assert (result.schedules, result.fired, result.dropped) == (1, len(want), want_dropped)
    s = schedule.get(conn, "default", "m")
    assert s is not None
    assert s.next_run_at == T0 + minutes(31) and s.next_run_at > OUTAGE_NOW
    assert s.last_fired_at == want[-1]
    # the missed ticks are gone for good, and normal ticking resumes
    assert schedule.tick(conn, now=OUTAGE_NOW).fired == 0
    assert schedule.tick(conn, now=T0 + minutes(31)).fired == 1
    assert fired_at(conn, "m") == [*want, T0 + minutes(31)]


def test_catch_up_one_fires_a_single_job_for_the_latest_missed_tick(conn: Conn) -> None:
    schedule.upsert(conn, "default", "daily", "0 3 * * *", payload={"report": True},
                    catch_up="one", misfire_grace=60, now=T0)
    now = T0 + dt.timedelta(days=10, hours=12)  # eleven 03:00 ticks missed, none in the grace
    result = schedule.tick(conn, now=now)
    assert (result.fired, result.dropped) == (1, 10)
    (job,) = fired(conn)
    assert job.at == T0 + dt.timedelta(days=10, hours=3)
    key = conn.execute("SELECT dedup_key FROM pgqueue.job WHERE id = %s", (job.job_id,)).fetchone()
    assert key == (f"schedule:daily@{job.at.isoformat()}".encode(),)
    s = schedule.get(conn, "default", "daily")
    assert s is not None and s.next_run_at == T0 + dt.timedelta(days=11, hours=3) > now


def test_catch_up_all_above_the_cap_drops_the_older_surplus(conn: Conn) -> None:
    schedule.upsert(conn, "default", "m", "* * * * *", catch_up="all", misfire_grace=GRACE, now=T0)
    now = T0 + minutes(150.5)  # ticks 1..150: 148 missed, 149 and 150 within the grace
    result = schedule.tick(conn, now=now)
    assert schedule.ALL_CAP == 100
    assert (result.fired, result.dropped) == (100, 50)
    assert fired_at(conn, "m") == [T0 + minutes(m) for m in range(51, 151)]
    s = schedule.get(conn, "default", "m")
    assert s is not None and s.next_run_at == T0 + minutes(151) > now


def test_catch_up_all_with_a_smaller_cap(conn: Conn) -> None:
    schedule.upsert(conn, "default", "m", "* * * * *", catch_up="all", misfire_grace=GRACE, now=T0)
    result = schedule.tick(conn, now=OUTAGE_NOW, cap=10)
    assert (result.fired, result.dropped) == (10, 20)
    assert fired_at(conn, "m") == [T0 + minutes(m) for m in range(21, 31)]
    s = schedule.get(conn, "default", "m")
    assert s is not None and s.next_run_at == T0 + minutes(31) > OUTAGE_NOW


@pytest.mark.parametrize("catch_up", ["none", "one", "all"])
def test_a_pass_never_loses_a_due_tick_silently(conn: Conn, catch_up: str) -> None:
    # all 30 ticks lie within the hour-long grace, so none is "missed"; with a cap of 10 per
    # pass, what does not fire must at least be counted as dropped, and like missed ticks
    # under catch_up="all" the surplus dropped is the older one: the newest tick fires
    schedule.upsert(conn, "default", "m", "* * * * *", catch_up=catch_up, misfire_grace=3600,
                    now=T0)
    result = schedule.tick(conn, now=OUTAGE_NOW, cap=10)
    got = fired_at(conn, "m")
    due = [T0 + minutes(m) for m in range(1, 31)]
    assert result.fired == len(got) > 0
    assert result.fired + result.dropped == len(due), (result, got)
    assert got == due[-len(got):], got
    s = schedule.get(conn, "default", "m")
    assert s is not None and s.next_run_at == T0 + minutes(31)


def test_ticks_within_the_grace_fire_late_and_in_order(conn: Conn) -> None:
    schedule.upsert(conn, "default", "s", "* * * * * */10", catch_up="none", misfire_grace=60,
                    now=T0)
    result = schedule.tick(conn, now=T0 + seconds(45))
    assert (result.fired, result.dropped) == (4, 0)
    assert fired_at(conn, "s") == [T0 + seconds(n) for n in (10, 20, 30, 40)]


# -- daylight saving -------------------------------------------------------------------------


@dataclass(frozen=True)
class Transition:
    zone: str
    day: dt.date            # the local date of the change
    spring: bool            # spring forward (else fall back)
    daily_0230: dt.datetime  # where the daily 02:30 fires that day (UTC)
    daily_0130: dt.datetime  # where the daily 01:30 fires that day (UTC)


TRANSITIONS = [
    pytest.param(Transition("America/New_York", dt.date(2026, 3, 8), True,
                            dt.datetime(2026, 3, 8, 7, 30, tzinfo=UTC),     # 03:30 EDT
                            dt.datetime(2026, 3, 8, 6, 30, tzinfo=UTC)),    # 01:30 EST
                 id="new_york-spring"),
    pytest.param(Transition("America/New_York", dt.date(2026, 11, 1), False,
                            dt.datetime(2026, 11, 1, 7, 30, tzinfo=UTC),    # 02:30 EST
                            dt.datetime(2026, 11, 1, 5, 30, tzinfo=UTC)),   # the first 01:30 (EDT)
                 id="new_york-fall"),
    pytest.param(Transition("Europe/Paris", dt.date(2026, 3, 29), True,
                            dt.datetime(2026, 3, 29, 1, 30, tzinfo=UTC),    # 03:30 CEST
                            dt.datetime(2026, 3, 29, 0, 30, tzinfo=UTC)),   # 01:30 CET
                 id="paris-spring"),
    pytest.param(Transition("Europe/Paris", dt.date(2026, 10, 25), False,
                            dt.datetime(2026, 10, 25, 0, 30, tzinfo=UTC),   # the first 02:30 (CEST)
                            dt.datetime(2026, 10, 24, 23, 30, tzinfo=UTC)),  # 01:30 CEST
                 id="paris-fall"),
]


@pytest.mark.parametrize("tr", TRANSITIONS)
def test_daylight_saving_days_tick_through(conn: Conn, tr: Transition) -> None:
    zone = ZoneInfo(tr.zone)
    day_start = dt.datetime.combine(tr.day, dt.time(0), tzinfo=zone).astimezone(UTC)
    day_end = dt.datetime.combine(tr.day + dt.timedelta(days=1), dt.time(0),
                                  tzinfo=zone).astimezone(UTC)
    start = day_start - dt.timedelta(hours=6)
    end = day_end + dt.timedelta(hours=6)
    crons = {"daily-0230": "30 2 * * *", "daily-0130": "30 1 * * *", "hourly": "0 * * * *",
             "quarter": "*/15 * * * *"}
    for name, cron in crons.items():
        schedule.upsert(conn, "default", name, cron, timezone=tr.zone, catch_up="all", now=start)
    now = start
    dropped = 0
    while now < end:  # a pass every 15 minutes, on the quarter hours (UTC and local alike)
        now += minutes(15)
        dropped += schedule.tick(conn, now=now).dropped
    assert dropped == 0

    def on_the_day(name: str) -> list[dt.datetime]:
        return [t for t in fired_at(conn, name) if day_start <= t < day_end]

    for name, cron in crons.items():
        got = fired_at(conn, name)
        assert got == sorted(set(got)), f"{name}: an instant fired twice or out of order"
        assert got == expected_fires(cron, tr.zone, start, now), name
    assert on_the_day("daily-0230") == [tr.daily_0230]
    assert on_the_day("daily-0130") == [tr.daily_0130]
    wall = [t.astimezone(zone) for t in on_the_day("hourly")]
    if tr.spring:
        assert len(wall) == 23
        assert sorted(w.hour for w in wall) == [h for h in range(24) if h != 2]
    else:
        assert sorted(w.hour for w in wall) == list(range(24))
    quarter = [t.astimezone(zone) for t in on_the_day("quarter")]
    assert len(quarter) == len({t.astimezone(UTC) for t in quarter}) == (92 if tr.spring else 96)
    assert [(w.hour, w.minute) for w in quarter] == sorted((w.hour, w.minute) for w in quarter)


def test_the_daily_0230_fires_once_each_day_through_both_new_york_changes(conn: Conn) -> None:
    # one schedule, ticked every 30 minutes from late February to early November's change
    start = dt.datetime(2026, 3, 6, tzinfo=UTC)
    schedule.upsert(conn, "default", "d", "30 2 * * *", timezone="America/New_York",
                    catch_up="none", misfire_grace=0, now=start)
    for first, last in ((start, dt.datetime(2026, 3, 11, tzinfo=UTC)),
                        (dt.datetime(2026, 10, 29, 7, 30, tzinfo=UTC),
                         dt.datetime(2026, 11, 4, tzinfo=UTC))):
        if first != start:  # jump ahead, as a pause over the summer would
            schedule.set_paused(conn, "default", "d", True, now=first - minutes(1))
            schedule.set_paused(conn, "default", "d", False, now=first - minutes(1))
        now = first
        while now < last:
            now += minutes(30)
            schedule.tick(conn, now=now)
    days = Counter(t.astimezone(NEW_YORK).date() for t in fired_at(conn, "d"))
    assert set(days.values()) == {1}
    assert sorted(days) == [dt.date(2026, 3, d) for d in range(6, 11)] + \
        [dt.date(2026, m, d) for m, d in ((10, 30), (10, 31), (11, 1), (11, 2), (11, 3))]


# -- pause / resume --------------------------------------------------------------------------


def test_a_paused_schedule_does_not_fire_and_resume_starts_from_now(conn: Conn) -> None:
    schedule.upsert(conn, "default", "m", "* * * * *", catch_up="all", misfire_grace=3600, now=T0)
    assert schedule.tick(conn, now=T0 + minutes(1)).fired == 1
    paused = schedule.set_paused(conn, "default", "m", True, now=T0 + minutes(1.5))
    assert paused.paused
    for m in range(2, 11):
        assert schedule.tick(conn, now=T0 + minutes(m)) == pgqueue.TickResult(0, 0, 0)
    resumed = schedule.set_paused(conn, "default", "m", False, now=T0 + minutes(10.5))
    assert not resumed.paused
    assert resumed.next_run_at == T0 + minutes(11)
    # catch_up="all" and an hour of grace, yet the ticks of the pause never fire
    assert schedule.tick(conn, now=T0 + minutes(11)).fired == 1
    assert fired_at(conn, "m") == [T0 + minutes(1), T0 + minutes(11)]
    upserts = ops(conn, "UpsertSchedule")
    assert [b["paused"] for b in upserts] == [False, True, False]


def test_queue_pause_and_resume(q: pgqueue.Queue) -> None:
    q.upsert_schedule("nightly", "0 3 * * *", kind="report")
    assert q.pause_schedule("nightly").paused
    got = q.schedule("nightly")
    assert got is not None and got.paused
    resumed = q.resume_schedule("nightly")
    assert not resumed.paused
    assert resumed.next_run_at > dt.datetime.now(UTC)
    assert resumed.kind == "report" and resumed.cron == "0 3 * * *"
    for call in (q.pause_schedule, q.resume_schedule, q.remove_schedule):
        with pytest.raises(pgqueue.JobNotFound, match="missing"):
            call("missing")


# -- a fire time fires at most once, ever ----------------------------------------------------

NOON = T0 + dt.timedelta(hours=12)


def no_fire_time_twice(conn: Conn) -> Counter[tuple[str, str, dt.datetime]]:
    """Check that no fire time of any schedule was enqueued twice, nor listed twice by the
    UpdateScheduleNextRun ops, and that each schedule fired its times in ascending order;
    returns the fire times."""
    jobs = fired(conn)
    per_tick = Counter((f.stream, f.name, f.at) for f in jobs)
    doubles = sorted(k for k, n in per_tick.items() if n > 1)
    assert not doubles, f"fire times enqueued more than once: {doubles[:10]}"
    advanced = Counter((b["stream"], b["name"], dt.datetime.fromisoformat(t))
                       for b in ops(conn, "UpdateScheduleNextRun") for t in b["fired"] or [])
    assert not [k for k, n in advanced.items() if n > 1], "an advance op lists a time twice"
    assert advanced == per_tick
    by_schedule: dict[tuple[str, str], list[dt.datetime]] = defaultdict(list)
    for f in jobs:
        by_schedule[(f.stream, f.name)].append(f.at)
    for key, times in by_schedule.items():
        assert times == sorted(times), f"{key} fired an earlier time after a later one"
    for row in conn.execute("SELECT stream, name, next_run_at, last_fired_at FROM pgqueue.schedule"):
        assert row[3] is None or row[2] > row[3], row
    return per_tick


def test_noon_fired_and_acked_does_not_fire_again_after_a_resume_5s_behind(conn: Conn) -> None:
    # the reproduction: a tick fires 12:00 and its job is acked (no live job holds the dedup
    # key any more), the schedule is paused, then resumed from a clock 5 s behind
    schedule.upsert(conn, "default", "m", "* * * * *", catch_up="all", now=NOON - seconds(30))
    assert schedule.tick(conn, now=NOON + seconds(0.5)).fired == 1
    assert drain(conn, ["default"]) == 1
    schedule.set_paused(conn, "default", "m", True, now=NOON + seconds(2))
    resumed = schedule.set_paused(conn, "default", "m", False, now=NOON + seconds(3) - seconds(5))
    assert resumed.next_run_at == NOON + minutes(1)
    assert resumed.last_fired_at == NOON
    assert schedule.tick(conn, now=NOON + seconds(4)).fired == 0
    assert schedule.tick(conn, now=NOON + minutes(1)).fired == 1
    assert fired_at(conn, "m") == [NOON, NOON + minutes(1)]
    no_fire_time_twice(conn)


def test_a_change_that_waited_behind_a_tick_does_not_refire_its_time(dsn: str, conn: Conn) -> None:
    # no skew: an upsert reads its clock (11:59:59.8), then waits for the row lock of a tick
    # that fires 12:00; it must not put next_run_at back on 12:00 when it gets the lock
    schedule.upsert(conn, "default", "m", "* * * * *", now=NOON - seconds(30))
    outcome: list[pgqueue.Schedule] = []
    with connection.connect(dsn) as ticker:
        with ticker.transaction():
            assert schedule.tick(ticker, now=NOON + seconds(0.5)).fired == 1

            def change() -> None:
                with connection.connect(dsn) as c, c.transaction():
                    queries.fetch(c, "pin_clock", {"now": (NOON - seconds(0.2)).isoformat()})
                    outcome.append(schedule.upsert(c, "default", "m", "0-59 * * * *",
                                                   b"changed"))

            thread = threading.Thread(target=change)
            thread.start()
            wait_for(lambda: lock_waiters(conn) == 1, 10,
                     "the change to wait for the tick's row lock")
        thread.join(10)
    assert not thread.is_alive() and len(outcome) == 1
    assert outcome[0].payload == b"changed"
    assert outcome[0].next_run_at == NOON + minutes(1)
    assert drain(conn, ["default"]) == 1
    assert schedule.tick(conn, now=NOON + seconds(2)).fired == 0
    assert fired_at(conn, "m") == [NOON]
    no_fire_time_twice(conn)


# one server only: it pins the clock (pgqueue.now), which on Citus is the coordinator's session's,
# not the streams' nodes' (where the schedule's transitions run, 0019)
@pytest.mark.layouts("single")
def test_the_database_clock_decides_not_the_hosts(dsn: str) -> None:
    # this session's database clock says 2025 while the host says today: upsert, resume and
    # tick (no `now` given) must all take the database's
    with pinned(dsn, NOON - seconds(30)) as c:
        s = schedule.upsert(c, "default", "m", "* * * * *", catch_up="all")
        assert s.next_run_at == NOON and s.updated_at == NOON - seconds(30)
        set_now(c, NOON + seconds(1))
        assert schedule.tick(c).fired == 1
        assert fired_at(c, "m") == [NOON]
        schedule.set_paused(c, "default", "m", True)
        set_now(c, NOON + minutes(5.5))
        assert schedule.set_paused(c, "default", "m", False).next_run_at == NOON + minutes(6)
        set_now(c, NOON + minutes(6))
        assert schedule.tick(c).fired == 1
        assert fired_at(c, "m") == [NOON, NOON + minutes(6)]


# one server only: it pins the clock (pgqueue.now), which on Citus is the coordinator's session's,
# not the streams' nodes' (where the schedule's transitions run, 0019)
@pytest.mark.layouts("single")
def test_the_transitions_refuse_a_time_at_or_before_the_last_fired_one(conn: Conn) -> None:
    # a psql caller (or an older release) gets the same rule as the library
    schedule.upsert(conn, "default", "m", "* * * * *", now=NOON - seconds(30))
    assert schedule.tick(conn, now=NOON + seconds(1)).fired == 1
    before = table(conn, "pgqueue.schedule"), op_counts(conn)
    due_again = NOON + minutes(1) + seconds(2)

    def refused(sql: str, *args: Any, at: dt.datetime = due_again, why: str = "fire") -> None:
        with pytest.raises(psycopg.Error) as caught:  # by default the schedule is due again
            conn.execute("SELECT set_config('pgqueue.now', %s, false)", (at.isoformat(),))
            conn.execute(sql, args)
        assert caught.value.diag.sqlstate == "PQ422", caught.value
        assert why in str(caught.value)
        assert (table(conn, "pgqueue.schedule"), op_counts(conn)) == before

    upsert = ("SELECT pgqueue.upsert_schedule('default', 'm', '* * * * *', 'UTC', ''::bytea, "
              "NULL, 0, 25, 'one', 60000, false, %s)")
    refused(upsert, NOON)                     # onto the fired time
    refused(upsert, NOON - minutes(1))        # before it
    advance = "SELECT pgqueue.advance_schedule('default', 'm', %s, %s, %s)"
    refused(advance, NOON + minutes(1), NOON, Jsonb([NOON.isoformat()]))  # fire 12:00 again
    refused(advance, NOON, None, Jsonb([]))                               # move back onto it
    refused(advance, NOON + minutes(3), NOON + minutes(2),                # ahead of the clock
            Jsonb([(NOON + minutes(2)).isoformat()]))
    # only a due schedule advances, and never from before its next run: a worker (the role
    # that ticks) cannot move a schedule that is not its turn, nor fire it off its grid
    refused(advance, NOON + minutes(2), None, Jsonb([]), at=NOON + seconds(2), why="not due")
    refused(advance, NOON + minutes(2), NOON + seconds(30),
            Jsonb([(NOON + seconds(30)).isoformat()]), why="before its next run")
    conn.execute("RESET pgqueue.now")
    # what the rule allows still goes through
    conn.execute(upsert, (NOON + minutes(1),))
    assert schedule.tick(conn, now=NOON + minutes(1)).fired == 1


def test_a_paused_schedule_is_not_advanced_even_when_due(conn: Conn) -> None:
    schedule.upsert(conn, "default", "p", "* * * * *", paused=True, now=NOON - seconds(30))
    before = table(conn, "pgqueue.schedule"), op_counts(conn)
    with pytest.raises(psycopg.Error, match="is paused") as caught:
        conn.execute("SELECT set_config('pgqueue.now', %s, false)",
                     ((NOON + seconds(2)).isoformat(),))
        conn.execute("SELECT pgqueue.advance_schedule('default', 'p', %s, NULL, '[]')",
                     (NOON + minutes(1),))
    assert caught.value.diag.sqlstate == "PQ422"
    assert (table(conn, "pgqueue.schedule"), op_counts(conn)) == before


def test_a_row_left_on_a_fired_time_by_an_earlier_release_fires_on_after_it(conn: Conn) -> None:
    # the bug this guards against could leave rows behind (next_run_at on 12:00, fired and
    # acked) that a database upgraded to 0005 still holds: they tick on from 12:01
    schedule.upsert(conn, "default", "m", "* * * * *", catch_up="all", now=NOON - seconds(30))
    schedule.upsert(conn, "default", "p", "* * * * *", catch_up="all", paused=True,
                    now=NOON - seconds(30))
    for name in ("m", "p"):
        conn.execute("UPDATE pgqueue.schedule SET last_fired_at = %s, next_run_at = %s "
                     "WHERE name = %s", (NOON, NOON - minutes(1), name))
    # a change that keeps next_run_at moves it past the fire, a tick fires only later times
    kept = schedule.upsert(conn, "default", "p", "* * * * *", b"new", catch_up="all",
                           paused=True, now=NOON + seconds(5))
    assert kept.next_run_at == NOON + minutes(1)
    assert schedule.tick(conn, now=NOON + seconds(5)).fired == 0
    healed = schedule.get(conn, "default", "m")
    assert healed is not None and healed.next_run_at == NOON + minutes(1)
    assert schedule.tick(conn, now=NOON + minutes(1)).fired == 1
    assert fired_at(conn, "m") == [NOON + minutes(1)]
    no_fire_time_twice(conn)


@pytest.mark.slow
def test_changes_racing_ticks_of_three_schedulers_never_refire_a_time(dsn: str, bed: Bed) -> None:
    # three schedulers, each with its own connection, tick every 2 s of simulated time and ack
    # at once; between ticks each randomly pauses, resumes or changes (cron text, so next_run_at
    # is recomputed) a schedule from a clock up to 8 s behind or 2 s ahead of its own
    crons = {"every-3s": ("* * * * * */3", "* * * * * 0-59/3"),
             "every-5s": ("* * * * * */5", "* * * * * 0-59/5"),
             "minutely": ("* * * * *", "0-59 * * * *")}
    start = NOON - minutes(1)
    with connection.connect(dsn) as c:
        for name, (cron, _) in crons.items():
            schedule.upsert(c, "default", name, cron, b"tick", catch_up="all", now=start)
    steps, step, schedulers = 90, seconds(2), 3
    barrier = threading.Barrier(schedulers)
    changes = Counter[str]()

    def scheduler(k: int) -> int:
        rng = random.Random(k)
        total = 0
        try:
            with connection.connect(dsn) as c:
                for i in range(1, steps + 1):
                    now = start + step * i + seconds(rng.random())
                    barrier.wait(timeout=60)
                    if rng.random() < 0.6:
                        total += schedule.tick(c, now=now).fired
                        drain(c, ["default"], worker=k)
                        continue
                    name = rng.choice(sorted(crons))
                    skewed = now + seconds(rng.uniform(-8, 2))
                    current = schedule.get(c, "default", name)
                    assert current is not None
                    verb = rng.choice(["pause", "resume", "resume", "change"])
                    if verb == "change":
                        a, b = crons[name]
                        schedule.upsert(c, "default", name, b if current.cron == a else a,
                                        b"tick", catch_up="all", paused=current.paused,
                                        now=skewed)
                    else:
                        schedule.set_paused(c, "default", name, verb == "pause", now=skewed)
                    changes[verb] += 1
        except BaseException:
            barrier.abort()
            raise
        return total

    with ThreadPoolExecutor(schedulers) as pool:
        totals = list(pool.map(scheduler, range(schedulers)))
    with connection.connect(dsn) as c:
        for name in crons:  # a last resume and tick, so every schedule ends unpaused
            schedule.set_paused(c, "default", name, False, now=start + step * steps)
        schedule.tick(c, now=start + step * (steps + 1))
        per_tick = no_fire_time_twice(c)
        assert sum(per_tick.values()) > 40
        assert sum(1 for n in totals if n > 0) >= 2, totals
        assert min(changes[v] for v in ("pause", "resume", "change")) > 5, changes
        target = bed.new_database()
        try:
            pgqueue.replay(dsn, target)
            with connection.connect(target) as t:
                assert table(t, "pgqueue.schedule") == table(c, "pgqueue.schedule")
        finally:
            bed.drop(target)


# -- refusing bad schedules ------------------------------------------------------------------

BAD: list[Any] = [
    pytest.param({"cron": "* * * *"}, "5 fields", id="four-fields"),
    pytest.param({"cron": "* * * * * * *"}, "5 fields", id="seven-fields"),
    pytest.param({"cron": "61 * * * *"}, "61 * * * *", id="minute-61"),
    pytest.param({"cron": "0 25 * * *"}, "0 25 * * *", id="hour-25"),
    pytest.param({"cron": "* * * * * 60"}, "* * * * * 60", id="second-60"),
    pytest.param({"cron": "garbage"}, "garbage", id="garbage"),
    pytest.param({"cron": "every day at noon"}, "every day at noon", id="words"),
    pytest.param({"cron": ""}, "cron", id="empty"),
    pytest.param({"cron": "0 0 31 2 *"}, "0 0 31 2 *", id="never-fires-feb-31"),
    pytest.param({"timezone": "Mars/Base"}, "Mars/Base", id="unknown-zone"),
    pytest.param({"timezone": "Europe/Pariss"}, "Europe/Pariss", id="misspelt-zone"),
    pytest.param({"catch_up": "sometimes"}, "catch_up", id="catch-up"),
    pytest.param({"misfire_grace": -1}, "misfire_grace", id="negative-grace"),
    pytest.param({"priority": 300}, "priority", id="priority-300"),
    pytest.param({"priority": -1}, "priority", id="priority-negative"),
    pytest.param({"max_attempts": -1}, "max_attempts", id="max-attempts"),
    pytest.param({"name": ""}, "name", id="empty-name"),
]


def test_bad_schedules_are_refused_and_change_nothing(q: pgqueue.Queue, conn: Conn) -> None:
    wrong: list[str] = []
    for case in BAD:
        change, needle = case.values
        args: dict[str, Any] = {"name": "s", "cron": "*/5 * * * *", **change}
        try:
            q.upsert_schedule(**args)
        except ValueError as exc:
            if needle not in str(exc):
                wrong.append(f"{case.id}: the error does not name {needle!r}: {exc}")
        else:
            wrong.append(f"{case.id}: accepted")
        if q.schedules() or op_counts(conn) or \
                conn.execute("SELECT count(*) FROM pgqueue.schedule").fetchone() != (0,):
            wrong.append(f"{case.id}: left a schedule or an op behind")
            conn.execute("TRUNCATE pgqueue.schedule, pgqueue.op_log")
    assert not wrong, "\n".join(wrong)


def test_a_bad_change_leaves_the_schedule_as_it_was(conn: Conn) -> None:
    schedule.upsert(conn, "default", "s", "*/5 * * * *", b"keep", kind="k", priority=3, now=T0)
    before = table(conn, "pgqueue.schedule")
    ops_before = op_counts(conn)
    wrong: list[str] = []
    for case in BAD:
        change, needle = case.values
        args: dict[str, Any] = {"name": "s", "cron": "*/5 * * * *", **change}
        if args["name"] != "s":
            continue
        del args["name"]
        cron = args.pop("cron")
        try:
            schedule.upsert(conn, "default", "s", cron, b"new", now=T0 + minutes(1), **args)
        except ValueError as exc:
            if needle not in str(exc):
                wrong.append(f"{case.id}: the error does not name {needle!r}: {exc}")
        else:
            wrong.append(f"{case.id}: accepted")
        assert table(conn, "pgqueue.schedule") == before, case.id
        assert op_counts(conn) == ops_before, case.id
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(("cron", "zone"), [("not a cron", "UTC"), ("* * * * *", "Mars/Base")],
                         ids=["bad-cron", "unknown-zone"])
def test_a_schedule_a_pass_cannot_evaluate_does_not_stop_the_others(
        conn: Conn, dsn: str, cron: str, zone: str) -> None:
    # The psql-callable transition (DESIGN.md 3) stores what it is given: croniter and
    # zoneinfo live in Python. A replayed UpsertSchedule from a host whose tzdata knows more
    # zones gets the same row. Such a row must not stop every other schedule from firing.
    schedule.upsert(conn, "default", "good", "* * * * *", now=T0)
    conn.execute("SELECT pgqueue.upsert_schedule('default', 'bad', %s, %s, ''::bytea, NULL, 0, "
                 "25, 'one', 60000, false, %s)", (cron, zone, T0 + minutes(1)))
    for m in (1, 2):
        try:
            schedule.tick(conn, now=T0 + minutes(m))
        except (ValueError, pgqueue.PgQueueError):
            pass  # reporting the bad schedule is fine; blocking the good one is not
    assert fired_at(conn, "good") == [T0 + minutes(1), T0 + minutes(2)]
    assert fired_at(conn, "bad") == []
    # nor may it stop maintenance: the loop keeps running its passes (reclaim and all)
    runner = maintain.Maintainer(dsn, interval=0.02, elect=False)
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 5
        while runner.passes < 3 and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert thread.is_alive(), "the maintenance loop died on the bad schedule"
        assert runner.passes >= 3
    finally:
        runner.stop()
        thread.join(5)


# -- upsert semantics ------------------------------------------------------------------------


# one server only: it pins the clock (pgqueue.now), which on Citus is the coordinator's session's,
# not the streams' nodes' (where the schedule's transitions run, 0019)
@pytest.mark.layouts("single")
def test_upsert_keeps_next_run_at_unless_the_cron_zone_or_pause_changes(conn: Conn) -> None:
    def upserts() -> list[dict[str, Any]]:
        return ops(conn, "UpsertSchedule")

    s = schedule.upsert(conn, "default", "r", "*/10 * * * *", b"v1", now=T0)
    assert s.next_run_at == T0 + minutes(10)
    assert len(upserts()) == 1

    s = schedule.upsert(conn, "default", "r", "*/10 * * * *", {"v": 2}, kind="report",
                        priority=9, max_attempts=3, catch_up="all", misfire_grace=5,
                        now=T0 + minutes(3))
    assert s.next_run_at == T0 + minutes(10)  # kept
    assert (s.payload, s.kind, s.priority, s.max_attempts, s.catch_up, s.misfire_grace) == (
        b'{"v":2}', "report", 9, 3, "all", 5.0)
    assert s.updated_at == T0 + minutes(3)
    body = upserts()[-1]
    assert (body["kind"], body["priority"], body["catch_up"], body["misfire_grace_ms"]) == (
        "report", 9, "all", 5000)
    assert body["next_run_at_ms"] == int((T0 + minutes(10)).timestamp() * 1000)

    assert schedule.tick(conn, now=T0 + minutes(10)).fired == 1
    assert schedule.upsert(conn, "default", "r", "*/10   *  * * *", b"v3",
                           now=T0 + minutes(12)).next_run_at == T0 + minutes(20)  # same cron, kept
    changed = schedule.upsert(conn, "default", "r", "*/7 * * * *", b"v3", now=T0 + minutes(12))
    assert changed.next_run_at == T0 + minutes(14)  # recomputed from now
    assert changed.last_fired_at == T0 + minutes(10)
    zoned = schedule.upsert(conn, "default", "r", "*/7 * * * *", b"v3", timezone="Asia/Kolkata",
                            now=T0 + minutes(12))
    # 05:42 in Kolkata (+05:30) is 00:12 UTC; the next */7 wall minute is 05:49
    assert zoned.next_run_at == T0 + minutes(19)
    assert len(upserts()) == 5
    assert [b["cron"] for b in upserts()] == ["*/10 * * * *"] * 3 + ["*/7 * * * *"] * 2
    got = schedule.get(conn, "default", "r")
    assert got == zoned
    assert upserts()[-1]["next_run_at_ms"] == int(zoned.next_run_at.timestamp() * 1000)


def test_the_tick_job_carries_the_schedule_fields(conn: Conn) -> None:
    schedule.upsert(conn, "mail", "digest", "0 * * * *", {"to": "all"}, kind="send_digest",
                    priority=7, max_attempts=4, now=T0)
    assert schedule.tick(conn, now=T0 + minutes(60)).fired == 1
    row = conn.execute("SELECT stream, kind, payload, priority, max_attempts, dedup_key, state "
                       "FROM pgqueue.job").fetchall()
    assert row == [("mail", "send_digest", b'{"to":"all"}', 7, 4,
                    b"schedule:digest@2025-06-02T01:00:00+00:00", "pending")]


def test_names_are_unique_within_a_stream_not_across_streams(conn: Conn, dsn: str) -> None:
    schedule.upsert(conn, "a", "same", "*/5 * * * *", b"from a", now=T0)
    schedule.upsert(conn, "b", "same", "*/5 * * * *", b"from b", now=T0)
    schedule.upsert(conn, "a", "same", "*/5 * * * *", b"from a again", now=T0)
    with pgqueue.Queue(dsn, stream="a") as qa, pgqueue.Queue(dsn, stream="b") as qb:
        assert [(s.stream, s.name, s.payload) for s in qa.schedules()] == [("a", "same", b"from a again")]
        assert [(s.stream, s.name, s.payload) for s in qb.schedules()] == [("b", "same", b"from b")]
        assert schedule.tick(conn, now=T0 + minutes(5)).fired == 2
        assert sorted((f.stream, f.name, f.at) for f in fired(conn)) == [
            ("a", "same", T0 + minutes(5)), ("b", "same", T0 + minutes(5))]
        qa.remove_schedule("same")
        assert qa.schedule("same") is None
        assert qb.schedule("same") is not None
    assert ops(conn, "RemoveSchedule") == [{"stream": "a", "name": "same"}]
    assert schedule.tick(conn, now=T0 + minutes(10)).fired == 1


# -- replay ----------------------------------------------------------------------------------


def test_schedule_ops_replay_to_identical_tables(conn: Conn, dsn: str, bed: Bed) -> None:
    schedule.upsert(conn, "default", "minutely", "* * * * *", b"m", catch_up="all", now=T0)
    schedule.upsert(conn, "default", "paris", "30 2 * * *", {"x": 1}, kind="k",
                    timezone="Europe/Paris", priority=200, now=T0)
    schedule.upsert(conn, "other", "minutely", "*/2 * * * *", b"o", catch_up="none",
                    misfire_grace=30, now=T0)
    schedule.upsert(conn, "other", "doomed", "0 * * * *", now=T0)
    for m in range(1, 20):
        schedule.tick(conn, now=T0 + minutes(m))
        if m % 3 == 0:
            drain(conn, ["default"])
    schedule.upsert(conn, "default", "minutely", "*/3 * * * *", b"m2", now=T0 + minutes(19.5))
    schedule.set_paused(conn, "other", "minutely", True, now=T0 + minutes(20))
    schedule.remove(conn, "other", "doomed")
    schedule.tick(conn, now=T0 + minutes(90))  # an outage: catch-up for the rest
    schedule.set_paused(conn, "other", "minutely", False, now=T0 + minutes(95))
    schedule.tick(conn, now=T0 + dt.timedelta(days=2))
    counts = op_counts(conn)
    for op in ("UpsertSchedule", "UpdateScheduleNextRun", "RemoveSchedule", "Enqueue", "Ack"):
        assert counts[op] > 0, op

    target = bed.new_database()
    try:
        first = pgqueue.replay(dsn, target)
        assert first.read == first.applied == sum(counts.values())
        with connection.connect(target) as t:
            for name in REPLAYED:
                assert table(t, name) == table(conn, name), name
            replayed = table(t, "pgqueue.schedule")
            assert len(replayed[1]) == 3
            again = pgqueue.replay(dsn, target)
            assert again.applied == 0
            for name in REPLAYED:
                assert table(t, name) == table(conn, name), name
            # the replayed schedules tick on from where the source left them
            src = schedule.tick(conn, now=T0 + dt.timedelta(days=2, minutes=3))
            dst = schedule.tick(t, now=T0 + dt.timedelta(days=2, minutes=3))
            assert src == dst and src.fired > 0
            assert table(t, "pgqueue.schedule") == \
                table(conn, "pgqueue.schedule")
    finally:
        bed.drop(target)


# -- maintenance -----------------------------------------------------------------------------


def test_a_maintenance_pass_fires_due_schedules(conn: Conn) -> None:
    real_now = dt.datetime.now(UTC)
    # daily at midnight UTC, created an hour before the last midnight: that midnight is due,
    # within a day's grace (whatever the time of day the test runs at)
    created = real_now.replace(hour=0, minute=0, second=0, microsecond=0) - dt.timedelta(hours=1)
    schedule.upsert(conn, "default", "midnight", "0 0 * * *", b"m", misfire_grace=86400,
                    now=created)
    due = schedule.next_fire("0 0 * * *", "UTC", created)
    assert due <= real_now
    result = maintain.run_pass(conn)
    assert result.schedules_fired == 1
    assert fired_at(conn, "midnight") == [due]
    s = schedule.get(conn, "default", "midnight")
    assert s is not None and s.next_run_at > dt.datetime.now(UTC)
    assert s.last_fired_at == due
    assert maintain.run_pass(conn).schedules_fired == 0
    assert len(fired(conn)) == 1


def test_queue_tick_schedules_fires_every_stream(dsn: str, conn: Conn) -> None:
    schedule.upsert(conn, "a", "x", "*/5 * * * *", now=T0)
    schedule.upsert(conn, "b", "y", "*/10 * * * *", now=T0)
    with pgqueue.Queue(dsn, stream="a") as q:
        result = q.tick_schedules(now=T0 + minutes(10))
    assert (result.schedules, result.fired) == (2, 3)
    by_stream: dict[str, list[dt.datetime]] = defaultdict(list)
    for f in fired(conn):
        by_stream[f.stream].append(f.at)
    assert by_stream == {"a": [T0 + minutes(5), T0 + minutes(10)], "b": [T0 + minutes(10)]}
