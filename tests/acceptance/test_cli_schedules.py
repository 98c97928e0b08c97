"""`pgqueue schedules` end to end (CliRunner, a fresh database per test): add, list, show,
pause, resume, remove and next, their JSON, and their error exits.

What a command did is checked through the library (`Queue.schedule`), so a command that
printed the right words but did the wrong thing fails.
"""
from __future__ import annotations

import datetime as dt
import itertools
import json
import os
import shutil
import subprocess
import sys
from zoneinfo import ZoneInfo

import pytest
from click.testing import Result

import pgqueue
from pgqueue.client import lease as lease_stage
from pgqueue.client import schedule, settle
from pgqueue.db import connection
from pgqueue.db.queries import Conn
from tests.acceptance.clihelp import as_json, ok, run
from tests.dbhelp import wait_for

UTC = dt.timezone.utc





def assert_error(result: Result, code: int, *needles: str) -> None:
    """Exit `code`, nothing on stdout, one `pgqueue: error:` line (or click's usage error)
    naming each needle."""
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in result.stderr, (needle, result.stderr)


def stored(dsn: str, name: str, stream: str = "default") -> pgqueue.Schedule | None:
    with pgqueue.Queue(dsn, stream=stream) as q:
        return q.schedule(name)


def op_count(dsn: str) -> int:
    with connection.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM pgqueue.op_log").fetchone()
    assert row is not None
    return int(row[0])


# -- add / show / list -----------------------------------------------------------------------


def test_add_creates_the_schedule_and_prints_it(dsn: str) -> None:
    before = dt.datetime.now(UTC)
    shown = as_json(dsn, "schedules", "add", "nightly", "30 2 * * *",
                    "--timezone", "America/New_York", "--kind", "report", "--catch-up", "all",
                    "--priority", "5", "--max-attempts", "3", "--misfire-grace", "120",
                    "--payload", '{"full": true}', "--json-payload")
    s = stored(dsn, "nightly")
    assert s is not None
    assert (s.cron, s.timezone, s.kind, s.catch_up, s.priority, s.max_attempts, s.misfire_grace,
            s.paused) == ("30 2 * * *", "America/New_York", "report", "all", 5, 3, 120.0, False)
    assert json.loads(s.payload) == {"full": True}
    assert s.next_run_at > before
    assert s.next_run_at.astimezone(ZoneInfo("America/New_York")).time() in (
        dt.time(2, 30), dt.time(3, 30))
    assert shown["name"] == "nightly" and shown["stream"] == "default"
    assert (shown["cron"], shown["timezone"], shown["kind"], shown["catch_up"]) == (
        "30 2 * * *", "America/New_York", "report", "all")
    assert (shown["priority"], shown["max_attempts"], shown["misfire_grace"], shown["paused"]) == (
        5, 3, 120.0, False)
    assert dt.datetime.fromisoformat(shown["next_run_at"]) == s.next_run_at
    assert shown["last_fired_at"] is None
    assert json.loads(shown["payload"]) == {"full": True}


def test_add_defaults_and_the_human_output(dsn: str) -> None:
    result = ok(dsn, "schedules", "add", "every-5", "*/5 * * * *")
    assert "every-5" in result.stdout and "*/5 * * * *" in result.stdout
    s = stored(dsn, "every-5")
    assert s is not None
    assert (s.timezone, s.kind, s.catch_up, s.priority, s.max_attempts, s.misfire_grace,
            s.payload) == ("UTC", None, "one", 0, 25, 60.0, b"{}")  # job.json() reads {}


def test_add_of_a_name_that_exists_is_refused_unless_replace(dsn: str) -> None:
    ok(dsn, "schedules", "add", "r", "*/5 * * * *", "--kind", "a", "--timezone", "Asia/Tokyo")
    first = stored(dsn, "r")
    refused = run(dsn, "schedules", "add", "r", "*/5 * * * *", "--priority", "9")
    assert_error(refused, 1, "schedule 'r' exists in stream 'default'", "--replace",
                 "kind 'a'", "Asia/Tokyo")
    assert stored(dsn, "r") == first  # kept as it was: its kind, its zone
    ok(dsn, "schedules", "add", "r", "*/5 * * * *", "--kind", "b", "--priority", "9",
       "--replace")
    again = stored(dsn, "r")
    assert first is not None and again is not None
    assert (again.kind, again.priority, again.timezone) == ("b", 9, "UTC")  # as given
    assert [s["name"] for s in as_json(dsn, "schedules", "list")] == ["r"]


def test_add_with_a_stream_and_paused(dsn: str) -> None:
    ok(dsn, "schedules", "add", "same", "0 * * * *", "--stream", "mail", "--paused")
    ok(dsn, "schedules", "add", "same", "0 * * * *")
    mail = stored(dsn, "same", "mail")
    default = stored(dsn, "same")
    assert mail is not None and mail.paused
    assert default is not None and not default.paused
    assert [(s["stream"], s["name"]) for s in as_json(dsn, "schedules", "list", "--stream", "mail")] \
        == [("mail", "same")]


def test_add_six_fields_with_seconds_last(dsn: str) -> None:
    ok(dsn, "schedules", "add", "fast", "* * * * * */5")
    times = [dt.datetime.fromisoformat(t) for t in as_json(dsn, "schedules", "next", "fast", "-n", "3")]
    assert [(b - a).total_seconds() for a, b in itertools.pairwise(times)] == [5.0, 5.0]
    assert all(t.second % 5 == 0 for t in times)


def test_list_without_a_stream_lists_every_stream_s_schedules(dsn: str) -> None:
    ok(dsn, "schedules", "add", "nightly", "0 3 * * *", "--stream", "reports")
    ok(dsn, "schedules", "add", "hourly", "0 * * * *")
    listed = as_json(dsn, "schedules", "list")
    assert [(s["stream"], s["name"]) for s in listed] == [("default", "hourly"),
                                                          ("reports", "nightly")]
    human = ok(dsn, "schedules", "list").stdout
    assert "reports" in human and "nightly" in human and "hourly" in human
    only = as_json(dsn, "schedules", "list", "--stream", "reports")
    assert [s["name"] for s in only] == ["nightly"]
    assert "no schedules in stream 'mail'" in ok(dsn, "schedules", "list", "--stream",
                                                   "mail").stdout


def test_list_is_sorted_by_name_and_empty_lists_say_so(dsn: str) -> None:
    assert as_json(dsn, "schedules", "list") == []
    assert "no schedules" in ok(dsn, "schedules", "list").stdout
    for name in ("charlie", "alpha", "bravo"):
        ok(dsn, "schedules", "add", name, "0 3 * * *")
    listed = as_json(dsn, "schedules", "list")
    assert [s["name"] for s in listed] == ["alpha", "bravo", "charlie"]
    human = ok(dsn, "schedules", "list").stdout
    assert all(name in human for name in ("alpha", "bravo", "charlie"))


def test_show_prints_one_schedule_and_a_missing_one_exits_1(dsn: str) -> None:
    ok(dsn, "schedules", "add", "nightly", "0 3 * * *", "--timezone", "Europe/Paris")
    shown = as_json(dsn, "schedules", "show", "nightly")
    s = stored(dsn, "nightly")
    assert s is not None
    assert (shown["name"], shown["cron"], shown["timezone"]) == ("nightly", "0 3 * * *", "Europe/Paris")
    assert dt.datetime.fromisoformat(shown["next_run_at"]) == s.next_run_at
    human = ok(dsn, "schedules", "show", "nightly").stdout
    # the human view shows next_run_at in the schedule's zone
    local = s.next_run_at.astimezone(ZoneInfo("Europe/Paris")).isoformat()
    assert local in human
    assert_error(run(dsn, "schedules", "show", "missing"), 1, "missing")
    assert_error(run(dsn, "schedules", "show", "missing", "--json"), 1, "missing")
    assert_error(run(dsn, "schedules", "show", "nightly", "--stream", "other"), 1, "nightly")


# -- pause / resume / remove -----------------------------------------------------------------


def test_pause_and_resume(dsn: str) -> None:
    ok(dsn, "schedules", "add", "m", "* * * * *")
    assert "paused default/m" in ok(dsn, "schedules", "pause", "m").stdout
    s = stored(dsn, "m")
    assert s is not None and s.paused
    assert as_json(dsn, "schedules", "show", "m")["paused"] is True
    before = dt.datetime.now(UTC)
    out = ok(dsn, "schedules", "resume", "m").stdout
    s = stored(dsn, "m")
    assert s is not None and not s.paused
    assert s.next_run_at > before
    assert "resumed default/m" in out and s.next_run_at.isoformat() in out
    assert_error(run(dsn, "schedules", "pause", "missing"), 1, "missing")
    assert_error(run(dsn, "schedules", "resume", "missing"), 1, "missing")


def test_remove(dsn: str) -> None:
    ok(dsn, "schedules", "add", "gone", "* * * * *")
    ok(dsn, "schedules", "add", "kept", "* * * * *")
    assert "removed default/gone" in ok(dsn, "schedules", "remove", "gone").stdout
    assert stored(dsn, "gone") is None
    assert [s["name"] for s in as_json(dsn, "schedules", "list")] == ["kept"]
    assert_error(run(dsn, "schedules", "remove", "gone"), 1, "gone")


# -- next ------------------------------------------------------------------------------------


def test_next_prints_n_times_in_the_schedule_zone_strictly_increasing(dsn: str) -> None:
    ok(dsn, "schedules", "add", "q", "*/20 9-17 * * *", "--timezone", "Asia/Kolkata")
    lines = ok(dsn, "schedules", "next", "q", "-n", "5").stdout.splitlines()
    assert len(lines) == 5
    times = [dt.datetime.fromisoformat(line) for line in lines]
    assert all(t.utcoffset() == dt.timedelta(hours=5, minutes=30) for t in times)
    assert all(a < b for a, b in itertools.pairwise(times))
    assert all(9 <= t.hour <= 17 and t.minute in (0, 20, 40) for t in times)
    s = stored(dsn, "q")
    assert s is not None and times[0] == s.next_run_at
    assert as_json(dsn, "schedules", "next", "q", "-n", "5") == lines
    assert len(ok(dsn, "schedules", "next", "q").stdout.splitlines()) == 5  # the default


def test_next_across_a_spring_forward(dsn: str) -> None:
    # created (through the library) as of 2026-03-06, so its next five runs cross New York's
    # spring-forward day, where 02:30 does not exist and the job runs at 03:30
    with connection.connect(dsn) as conn:
        schedule.upsert(conn, "default", "d", "30 2 * * *", timezone="America/New_York",
                        now=dt.datetime(2026, 3, 6, tzinfo=UTC))
    lines = ok(dsn, "schedules", "next", "d", "-n", "5").stdout.splitlines()
    assert lines == ["2026-03-06T02:30:00-05:00", "2026-03-07T02:30:00-05:00",
                     "2026-03-08T03:30:00-04:00", "2026-03-09T02:30:00-04:00",
                     "2026-03-10T02:30:00-04:00"]


def test_next_errors(dsn: str) -> None:
    assert_error(run(dsn, "schedules", "next", "missing"), 1, "missing")
    ok(dsn, "schedules", "add", "x", "* * * * *")
    assert_error(run(dsn, "schedules", "next", "x", "-n", "0"), 2)


# -- refused input ---------------------------------------------------------------------------


BAD_ADDS = [
    (["bad", "61 * * * *"], ["61 * * * *"]),
    (["bad", "* * * *"], ["5 fields"]),
    (["bad", "garbage"], ["garbage"]),
    (["bad", "* * * * *", "--timezone", "Mars/Base"], ["Mars/Base"]),
    (["bad", "* * * * *", "--catch-up", "sometimes"], ["sometimes"]),
    (["bad", "* * * * *", "--priority", "300"], ["priority"]),
    (["bad", "* * * * *", "--misfire-grace", "-1"], ["misfire_grace"]),
    (["bad", "* * * * *", "--max-attempts", "-1"], ["max_attempts"]),
]


def test_add_refuses_bad_input_with_exit_2_and_changes_nothing(dsn: str) -> None:
    for args, needles in BAD_ADDS:
        assert_error(run(dsn, "schedules", "add", *args), 2, *needles)
        assert stored(dsn, "bad") is None, args
        assert op_count(dsn) == 0, args


def test_a_bad_cron_is_a_one_line_error(dsn: str) -> None:
    result = run(dsn, "schedules", "add", "bad", "61 * * * *")
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pgqueue: error: "), result.stderr
    assert "61 * * * *" in lines[0]


# -- a host clock minutes off ----------------------------------------------------------------


@pytest.fixture(scope="module")
def faketime() -> str:
    """Debian's faketime: installed with apt-get when missing on CI, else the test skips."""
    found = shutil.which("faketime")
    if found is None and os.environ.get("CI", "").lower() in ("true", "1", "yes"):
        sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = [*sudo, "apt-get", "install", "-y", "-q", "faketime"]
        if subprocess.run(install, env=env, capture_output=True, timeout=900).returncode != 0:
            subprocess.run([*sudo, "apt-get", "update", "-q"], env=env, capture_output=True,
                           timeout=900, check=True)
            subprocess.run(install, env=env, capture_output=True, timeout=900, check=True)
        found = shutil.which("faketime")
        assert found, "CI: apt-get installed faketime, yet it is not on PATH"
    if found is None:
        pytest.skip("faketime is not installed (apt-get install -y faketime); on CI (CI=true) "
                    "the test installs it")
    return found


def skewed_cli(faketime: str, offset: str, dsn: str, *args: str) -> str:
    """Run `pgqueue --dsn DSN ARGS` in a process whose clock is `offset` off (faketime -f);
    its stdout."""
    proc = subprocess.run([faketime, "-f", offset, sys.executable, "-m", "pgqueue", "--dsn", dsn,
                           *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PGQUEUE_DSN": ""})
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)
    return proc.stdout


def db_now(conn: Conn) -> dt.datetime:
    row = conn.execute("SELECT pgqueue.now_ms()").fetchone()
    assert row is not None
    when: dt.datetime = row[0]
    return when


def fire_times_once(conn: Conn) -> list[dt.datetime]:
    """The fire times enqueued (log order); checks that none was enqueued twice or ahead of
    the database's clock, that the advance ops agree, and that the schedules' next run lies
    after their last fire."""
    rows = conn.execute("SELECT convert_from(decode(pgqueue.op_body(o) ->> 'dedup_key', "
                        "'base64'), 'UTF8'), at FROM pgqueue.op_log o WHERE op = 'Enqueue' "
                        "ORDER BY seq").fetchall()
    times = [dt.datetime.fromisoformat(key.rpartition("@")[2]) for key, _ in rows]
    assert len(times) == len(set(times)), f"a fire time fired twice: {times}"
    ahead = [(t, at) for t, (_, at) in zip(times, rows, strict=True) if t > at]
    assert not ahead, f"fired ahead of the database's clock: {ahead}"
    listed = [dt.datetime.fromisoformat(t) for (body,) in conn.execute(
        "SELECT body FROM pgqueue.op_log WHERE op = 'UpdateScheduleNextRun' ORDER BY seq")
        for t in body["fired"] or []]
    assert listed == times
    for nxt, last in conn.execute("SELECT next_run_at, last_fired_at FROM pgqueue.schedule"):
        assert last is None or nxt > last
    return times


def tick_and_ack(conn: Conn) -> int:
    """One tick pass on the right clock, then ack every ready job; how many ticks fired."""
    fired = schedule.tick(conn).fired
    leases = lease_stage.lease(conn, "default", 100, 30.0, 0, 0)
    settle.ack_many(conn, leases)
    return fired


@pytest.mark.parametrize("offset", ["-5m", "+5m"], ids=["5-minutes-behind", "5-minutes-ahead"])
def test_a_host_clock_minutes_off_neither_refires_nor_skips_a_tick(
        dsn: str, faketime: str, offset: str) -> None:
    cron, period = "* * * * * */2", dt.timedelta(seconds=2)  # every 2 s, real time
    with connection.connect(dsn) as conn:
        schedule.upsert(conn, "default", "s", cron, b"t", catch_up="all")
        # a scheduler on the right clock fires a tick and its job is acked at once
        wait_for(lambda: tick_and_ack(conn), 30, "the first tick")
        # pause and resume from the skewed host: next run after now, by the database's clock
        skewed_cli(faketime, offset, dsn, "schedules", "pause", "s")
        out = skewed_cli(faketime, offset, dsn, "schedules", "resume", "s")
        assert "resumed default/s" in out
        s = schedule.get(conn, "default", "s")
        assert s is not None and s.last_fired_at is not None
        assert s.last_fired_at < s.next_run_at <= db_now(conn) + period, (s, db_now(conn))
        # a schedule added from the skewed host starts from the database's clock too
        before = db_now(conn)
        skewed_cli(faketime, offset, dsn, "schedules", "add", "added", cron)
        added = schedule.get(conn, "default", "added")
        assert added is not None
        assert before < added.next_run_at <= db_now(conn) + period, (before, added)
        skewed_cli(faketime, offset, dsn, "schedules", "remove", "added")
        # a scheduler on the skewed host, then on the right one: each due tick fires once
        fired_before = len(fire_times_once(conn))
        wait_for(lambda: json.loads(skewed_cli(faketime, offset, dsn, "maintain", "--once",
                                               "--json"))["schedules_fired"], 60,
                 "a tick fired by the skewed scheduler")
        wait_for(lambda: tick_and_ack(conn), 30, "a tick on the right clock")
        times = fire_times_once(conn)
        assert len(times) >= fired_before + 2
        assert times == sorted(times)
