"""Worker processes end to end: real subprocesses, SIGKILL, SIGTERM and a Postgres restart.

Each test runs worker processes on the App in tests/acceptance/worker_app.py, whose handlers
append their side effects to a `ledger` table in the test database. The ledger, the job rows
and the op log are the evidence: which step ran how often, in which process, and where a
resumed step started.

Timings are short on purpose (visibility timeouts of 1-2 s, renewals and maintenance every
0.2-0.3 s) so a crash cycle costs about two seconds.
"""
from __future__ import annotations

import datetime as dt
import math
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

import psycopg
import pytest

import pgqueue
from tests.acceptance import worker_app
from tests.dbhelp import wait_for
from tests.pgbed import Bed

T = TypeVar("T")

REPO = Path(__file__).resolve().parents[2]
APP = "tests.acceptance.worker_app:app"
#: The same kinds with async def handlers (tests/acceptance/async_app.py).
ASYNC_APP = "tests.acceptance.async_app:app"

#: How a worker process is started: the `pgqueue worker` command. The stand-in runner takes
#: the same flags: [sys.executable, "tests/acceptance/run_worker.py"].
WORKER_COMMAND = [sys.executable, "-m", "pgqueue", "worker"]


def launch_worker(dsn: str, flags: Sequence[str], *, env: Mapping[str, str],
                  log: IO[bytes], app: str = APP) -> subprocess.Popen[bytes]:
    """Start one worker process on a test App (from the repository root). The DSN travels
    in $PGQUEUE_DSN, which both the CLI and the stand-in runner read."""
    return subprocess.Popen(
        [*WORKER_COMMAND, "--app", app, *flags],
        cwd=REPO, env={**os.environ, **env, "PGQUEUE_DSN": dsn}, stdin=subprocess.DEVNULL,
        stdout=log, stderr=subprocess.STDOUT)


# -- helpers -----------------------------------------------------------------------------------




class Workers:
    """The worker processes of one test; all are killed at teardown and their logs printed."""

    def __init__(self, dsn: str, log_dir: Path, *, ledger_dsn: str | None = None) -> None:
        """
        :param ledger_dsn: where the handlers write their ledger (default: `dsn`; a worker
            connecting as a pgqueue role may not write the test's own table).
        """
        self.dsn = dsn
        self.ledger_dsn = ledger_dsn or dsn
        self.log_dir = log_dir
        self.procs: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(self, *, steps: str = "v1", concurrency: int = 1, visibility_timeout: float = 1.0,
              renew_interval: float = 0.25, poll_interval: float = 0.2,
              maintenance_interval: float = 0.2, grace_period: float = 5.0,
              extra: Sequence[str] = (), app: str = APP) -> subprocess.Popen[bytes]:
        flags = ["--concurrency", str(concurrency),
                 "--visibility-timeout", str(visibility_timeout),
                 "--renew-interval", str(renew_interval),
                 "--poll-interval", str(poll_interval),
                 "--maintenance-interval", str(maintenance_interval),
                 "--grace-period", str(grace_period), *extra]
        path = self.log_dir / f"worker-{len(self.procs)}.log"
        with open(path, "wb") as log:
            proc = launch_worker(self.dsn, flags, log=log, app=app, env={
                worker_app.LEDGER_DSN_ENV: self.ledger_dsn, worker_app.STEPS_ENV: steps})
        self.procs.append((proc, path))
        return proc

    def close(self) -> None:
        for proc, _path in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)

    def logs(self) -> str:
        parts = []
        for proc, path in self.procs:
            text = path.read_text(errors="replace") if path.exists() else ""
            parts.append(f"--- worker pid {proc.pid} (exit {proc.returncode}) ---\n{text[-6000:]}")
        return "\n".join(parts)


def stop(proc: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    """SIGTERM a worker and require a clean exit."""
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=timeout) == 0


def drive(workers: Workers, until: Callable[[], bool], timeout: float, **start: Any) -> int:
    """Keep one worker running (a new one after each death) until `until()`; then stop the
    live one cleanly. Returns how many processes were started."""
    proc: subprocess.Popen[bytes] | None = None
    started = 0
    deadline = time.monotonic() + timeout
    while not until():
        if proc is None or proc.poll() is not None:
            proc = workers.start(**start)
            started += 1
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not reached after {timeout}s and {started} worker(s)")
        time.sleep(0.05)
    if proc is not None and proc.poll() is None:
        stop(proc)
    return started


@dataclass(frozen=True)
class Entry:
    """One ledger row."""

    job_id: int
    step: str
    item: int | None
    pid: int
    at: dt.datetime


class Ledger:
    """The side-effect ledger the test App's handlers append to."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE ledger (job_id bigint, step text, item int, pid int, "
                         "at timestamptz NOT NULL DEFAULT clock_timestamp())")

    def entries(self, job_id: int | None = None, step: str | None = None) -> list[Entry]:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT job_id, step, item, pid, at FROM ledger "
                "WHERE (%(job)s::bigint IS NULL OR job_id = %(job)s) "
                "  AND (%(step)s::text IS NULL OR step = %(step)s) ORDER BY at",
                {"job": job_id, "step": step}).fetchall()
        return [Entry(*r) for r in rows]

    def count(self, job_id: int | None, step: str) -> int:
        return len(self.entries(job_id, step))


def ops(q: pgqueue.Queue, job_id: int) -> list[pgqueue.Op]:
    """The job's ops, oldest first."""
    return list(reversed(q.op_log(job_id=job_id, limit=10_000)))


def op_names(q: pgqueue.Queue, job_id: int) -> list[str]:
    return [o.op for o in ops(q, job_id)]


def state(q: pgqueue.Queue, job_id: int) -> str | None:
    info = q.job(job_id)
    return None if info is None else info.state


def job(q: pgqueue.Queue, job_id: int) -> pgqueue.JobInfo:
    info = q.job(job_id)
    assert info is not None, f"job {job_id} is gone"
    return info


def steps_as_recorded(names: Sequence[str]) -> list[dict[str, Any]]:
    return [{"name": n, "version": 1} for n in names]


# -- SIGKILL in the middle of a step ----------------------------------------------------------


@pytest.mark.parametrize("app", [APP, ASYNC_APP], ids=["threads", "async"])
def test_sigkill_mid_step_resumes_at_that_step_from_the_last_written_cursor(
        q: pgqueue.Queue, workers: Workers, ledger: Ledger, app: str) -> None:
    items, renew = 60, 0.3
    job_id = q.enqueue({"items": items, "sleep": 0.05}, kind="pipeline", schema_version=1)
    first = workers.start(visibility_timeout=1.5, renew_interval=renew, app=app)
    wait_for(lambda: ledger.count(job_id, "transform") >= 15, 30, "progress in transform")
    first.kill()
    assert first.wait(timeout=10) == -signal.SIGKILL

    # What the dead worker left behind: its lease, and the cursor its last renewal wrote.
    dead = job(q, job_id)
    assert dead.state == "leased"
    assert (dead.checkpoint.last_completed_step, dead.checkpoint.cursor_step) == (
        "download", "transform")
    assert dead.checkpoint.cursor is not None
    cursor = int(dead.checkpoint.cursor)
    done_first = [e for e in ledger.entries(job_id, "transform") if e.pid == first.pid]
    last_first = max(e.item for e in done_first if e.item is not None)
    assert [e.item for e in done_first] == list(range(last_first + 1))

    second = workers.start(visibility_timeout=1.5, renew_interval=renew, app=app)
    wait_for(lambda: q.job(job_id) is None, 30, "the job to finish on the second worker")
    stop(second)

    # Completed steps ran exactly once; the interrupted step resumed after the saved cursor.
    assert ledger.count(job_id, "download") == 1
    assert ledger.count(job_id, "upload") == 1
    enters = ledger.entries(job_id, "enter:transform")
    assert [(e.pid, e.item) for e in enters] == [(first.pid, 0), (second.pid, cursor + 1)]
    done_second = [e.item for e in ledger.entries(job_id, "transform") if e.pid == second.pid]
    assert done_second == list(range(cursor + 1, items))

    # Repeated items: those the first worker did after its last flushed cursor. The cursor is
    # flushed every renewal interval, so at most that many seconds of items (plus the item in
    # flight and one of slack) are repeated.
    span = (done_first[-1].at - done_first[0].at).total_seconds()
    rate = (len(done_first) - 1) / span
    bound = math.ceil(rate * renew) + 2
    repeated = [i for i in done_second if i is not None and i <= last_first]
    assert len(repeated) == last_first - cursor
    assert len(repeated) <= bound, (repeated, rate, bound)

    history = ops(q, job_id)
    reclaims = [o for o in history if o.op == "Reclaim"]
    assert len(reclaims) == 1 and reclaims[0].body["crashes_by_step"] == {"transform": 1}
    assert [o.op for o in history].count("Ack") == 1


# -- crash quarantine --------------------------------------------------------------------------


def test_a_step_that_kills_its_worker_three_times_is_quarantined_until_released(
        q: pgqueue.Queue, workers: Workers, ledger: Ledger) -> None:
    # Dies on entering transform while the ledger shows fewer than 4 deaths.
    job_id = q.enqueue({"items": 3, "die_at_step": "transform", "die_count": 4},
                       kind="pipeline", schema_version=1)
    started = drive(workers, lambda: state(q, job_id) == "quarantined", 60)
    assert started == 4  # three died, the fourth reclaimed the third lease into quarantine

    info = job(q, job_id)
    assert (info.state, info.state_reason) == ("quarantined", "crashed")
    assert info.checkpoint.crashes_by_step == {"transform": 3}
    assert info.state_detail == {"step": "transform", "crashes": 3, "threshold": 3}
    assert info.attempts == 3
    assert (info.checkpoint.last_completed_step, info.checkpoint.cursor_step) == (
        "download", "transform")
    assert ledger.count(job_id, "die:transform") == 3
    assert ledger.count(job_id, "download") == 1  # the completed step never ran again
    assert op_names(q, job_id).count("Lease") == 3  # nobody leased it once quarantined

    # Release without resetting: it runs again, and one more crash re-quarantines it.
    q.release(job_id)
    released = job(q, job_id)
    assert released.state == "pending" and released.state_reason is None
    assert released.checkpoint.crashes_by_step == {"transform": 3}
    drive(workers, lambda: state(q, job_id) == "quarantined", 30)
    info = job(q, job_id)
    assert info.checkpoint.crashes_by_step == {"transform": 4}
    assert info.state_detail == {"step": "transform", "crashes": 4, "threshold": 3}
    assert ledger.count(job_id, "die:transform") == 4

    # Release with reset: the counts are gone, and (no longer dying) it completes.
    q.release(job_id, reset_crashes=True)
    assert job(q, job_id).checkpoint.crashes_by_step == {}
    drive(workers, lambda: q.job(job_id) is None, 30)
    assert ledger.count(job_id, "download") == 1
    assert [e.item for e in ledger.entries(job_id, "transform")] == [0, 1, 2]
    assert ledger.count(job_id, "upload") == 1
    names = op_names(q, job_id)
    assert names.count("Release") == 2 and names.count("Ack") == 1
    assert [o.body["state"] for o in ops(q, job_id) if o.op == "Reclaim"] == [
        "pending", "pending", "quarantined", "quarantined"]


def test_an_async_step_that_kills_its_worker_three_times_is_quarantined(
        q: pgqueue.Queue, workers: Workers, ledger: Ledger) -> None:
    """Crash quarantine counts against the step in progress for coroutines as for threads."""
    job_id = q.enqueue({"items": 3, "die_at_step": "transform", "die_count": 4},
                       kind="pipeline", schema_version=1)
    started = drive(workers, lambda: state(q, job_id) == "quarantined", 60, app=ASYNC_APP)
    assert started == 4
    info = job(q, job_id)
    assert (info.state_reason, info.checkpoint.crashes_by_step) == ("crashed", {"transform": 3})
    assert ledger.count(job_id, "die:transform") == 3
    assert ledger.count(job_id, "download") == 1


def test_crashes_are_not_counted_against_jobs_the_dead_worker_had_not_started(
        q: pgqueue.Queue, workers: Workers, ledger: Ledger) -> None:
    """Only the job whose step kills its workers is quarantined: a job the worker had leased
    ahead (prefetched) but never started did not crash anything."""
    poison = q.enqueue({"items": 1, "die_at_step": "transform", "die_count": 3},
                       kind="pipeline", schema_version=1)
    innocent = q.enqueue({}, kind="note")
    drive(workers, lambda: state(q, poison) == "quarantined", 60)
    assert ledger.count(poison, "die:transform") == 3
    info = q.job(innocent)
    assert info is None or info.state != "quarantined", (
        f"job {innocent} never ran, yet was quarantined with {info.checkpoint.crashes_by_step}")
    drive(workers, lambda: q.job(innocent) is None, 30)
    assert ledger.count(innocent, "note") == 1
    assert op_names(q, innocent).count("Ack") == 1


def test_a_per_kind_threshold_quarantines_after_one_crash(
        dsn: str, q: pgqueue.Queue, workers: Workers, ledger: Ledger) -> None:
    job_id = q.enqueue({"die_at_step": "boom", "die_count": 1}, kind="fragile", schema_version=1)
    drive(workers, lambda: state(q, job_id) == "quarantined", 30)
    # The worker registered the kind's threshold where reclaim (handler-free SQL) finds it.
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT stream, kind, quarantine_after FROM pgqueue.kind_config"
                            ).fetchall()
    assert rows == [("default", "fragile", 1)]
    info = job(q, job_id)
    assert info.state_reason == "crashed"
    assert info.checkpoint.crashes_by_step == {"boom": 1}
    assert info.state_detail == {"step": "boom", "crashes": 1, "threshold": 1}

    q.release(job_id)
    drive(workers, lambda: q.job(job_id) is None, 30)
    assert ledger.count(job_id, "boom") == 1
    assert ledger.count(job_id, "die:boom") == 1


# -- the step list changes between a crash and the resume -------------------------------------


def crash_in_transform(q: pgqueue.Queue, workers: Workers, ledger: Ledger) -> tuple[int, int]:
    """Enqueue a pipeline job, and let a v1 worker die in its transform after item 1.
    Returns (job id, the cursor its last renewal wrote)."""
    job_id = q.enqueue({"items": 4, "sleep": 0.4, "die_at_step": "transform", "die_at_item": 1,
                        "die_count": 1}, kind="pipeline", schema_version=1)
    proc = workers.start(renew_interval=0.2)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    assert ledger.count(job_id, "die:transform") == 1
    info = job(q, job_id)
    assert info.checkpoint.cursor_step == "transform" and info.checkpoint.cursor is not None
    return job_id, int(info.checkpoint.cursor)


def test_a_changed_step_list_parks_the_job_and_a_compatible_change_resumes(
        q: pgqueue.Queue, workers: Workers, ledger: Ledger) -> None:
    # A step inserted before the step in progress: undecodable, nothing re-run.
    parked, _ = crash_in_transform(q, workers, ledger)
    drive(workers, lambda: state(q, parked) == "undecodable", 30, steps="inserted")
    info = job(q, parked)
    assert info.state_reason == "step_set_changed"
    assert info.state_detail is not None
    assert info.state_detail["old_steps"] == steps_as_recorded(worker_app.STEP_SETS["v1"])
    assert info.state_detail["new_steps"] == steps_as_recorded(worker_app.STEP_SETS["inserted"])
    assert info.attempts == 1  # the crash; parking costs no attempt
    assert ledger.count(parked, "validate") == 0
    assert ledger.count(parked, "enter:transform") == 1

    # A step appended after the resume point: it resumes at transform, from the cursor.
    resumed, cursor = crash_in_transform(q, workers, ledger)
    later = drive(workers, lambda: q.job(resumed) is None, 30, steps="appended")
    assert later == 1
    assert ledger.count(resumed, "download") == 1
    assert [e.item for e in ledger.entries(resumed, "enter:transform")] == [0, cursor + 1]
    assert ledger.count(resumed, "upload") == 1
    assert ledger.count(resumed, "notify") == 1

    # The operator accepts the new list for the parked job: it resumes after download.
    q.accept_step_set(parked)
    accepted = job(q, parked)
    assert accepted.state == "pending"
    assert accepted.checkpoint.step_set_hash == info.state_detail["new_hash"]
    assert q.step_list(info.state_detail["new_hash"]) == info.state_detail["new_steps"]
    drive(workers, lambda: q.job(parked) is None, 30, steps="inserted")
    assert ledger.count(parked, "download") == 1
    assert ledger.count(parked, "validate") == 1
    assert ledger.count(parked, "upload") == 1
    assert {e.item for e in ledger.entries(parked, "transform")} == {0, 1, 2, 3}


# -- SIGTERM ------------------------------------------------------------------------------------


@pytest.mark.parametrize("app", [APP, ASYNC_APP], ids=["threads", "async"])
def test_sigterm_drains_gracefully_and_loses_nothing(
        q: pgqueue.Queue, workers: Workers, ledger: Ledger, app: str) -> None:
    items, grace = 40, 2.0
    # three slots: handler threads, or coroutines (an async-only App runs no handler threads)
    slots: dict[str, Any] = {"concurrency": 3, "app": app,
                             "extra": ["--async-concurrency", "3"] if app == ASYNC_APP else []}
    quick = q.enqueue({"sleep": 1.0}, kind="quick")
    longs = [q.enqueue({"items": items, "sleep": 0.1}, kind="pipeline", schema_version=1)
             for _ in range(3)]
    proc = workers.start(visibility_timeout=2.0, renew_interval=0.3, grace_period=grace,
                         **slots)
    wait_for(lambda: ledger.count(quick, "quick:start") == 1
             and all(ledger.count(j, "transform") >= 3 for j in longs[:2]),
             30, "the quick job and two long jobs to be running")

    # The worker registered itself and holds the leases of its three running jobs (and of
    # any it prefetched).
    mine = [w for w in q.workers() if w["pid"] == proc.pid]
    assert len(mine) == 1
    assert mine[0]["host"] == socket.gethostname() and mine[0]["leases"] >= 3

    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=grace + 15) == 0
    assert time.monotonic() - started < grace + 3.0

    # The handler that could finish within the grace period finished and was acked.
    assert ledger.count(quick, "quick:end") == 1
    assert op_names(q, quick).count("Ack") == 1
    # The others went back to pending without an attempt, their checkpoint kept.
    returned: dict[int, int] = {}
    for job_id in longs[:2]:
        info = job(q, job_id)
        assert (info.state, info.attempts) == ("pending", 0)
        assert (info.checkpoint.last_completed_step, info.checkpoint.cursor_step) == (
            "download", "transform")
        assert info.checkpoint.cursor is not None
        returned[job_id] = int(info.checkpoint.cursor)
        names = op_names(q, job_id)
        assert names.count("ReturnLease") == 1
        assert "Nack" not in names and "Reclaim" not in names
    # The job that never started (not leased, or prefetched and handed back) is untouched.
    never = job(q, longs[2])
    assert (never.state, never.attempts) == ("pending", 0)
    assert never.checkpoint.cursor_step is None
    names = op_names(q, longs[2])
    assert names.count("Lease") == names.count("ReturnLease") <= 1
    assert "Nack" not in names and "Reclaim" not in names
    assert ledger.entries(longs[2]) == []
    # Clean exit deregistered it.
    assert [w for w in q.workers() if w["pid"] == proc.pid] == []

    # A new worker completes everything; every job is acked exactly once.
    second = workers.start(visibility_timeout=2.0, renew_interval=0.3, **slots)
    wait_for(lambda: q.jobs() == [], 60, "the queue to drain")
    stop(second)
    for job_id in [quick, *longs]:
        assert op_names(q, job_id).count("Ack") == 1
    for job_id in longs:
        assert ledger.count(job_id, "download") == 1
        assert ledger.count(job_id, "upload") == 1
        assert {e.item for e in ledger.entries(job_id, "transform")} == set(range(items))
    for job_id, cursor in returned.items():
        resumed = [e.item for e in ledger.entries(job_id, "enter:transform")
                   if e.pid == second.pid]
        assert resumed == [cursor + 1]
        # Items done twice: those the first worker finished after the checkpoint it handed
        # back. A graceful return must repeat no more than a crash would: one renewal
        # interval's worth of items, plus the item in flight and one of slack.
        first_run = [e for e in ledger.entries(job_id, "transform") if e.pid == proc.pid]
        rate = (len(first_run) - 1) / (first_run[-1].at - first_run[0].at).total_seconds()
        repeated = [e.item for e in first_run if e.item is not None and e.item > cursor]
        assert len(repeated) <= math.ceil(rate * 0.3) + 2, (repeated, rate)


@pytest.mark.parametrize("app", [APP, ASYNC_APP], ids=["threads", "async"])
def test_a_second_signal_stops_waiting_for_running_handlers(
        q: pgqueue.Queue, workers: Workers, ledger: Ledger, app: str) -> None:
    job_id = q.enqueue({"items": 100, "sleep": 0.1}, kind="pipeline", schema_version=1)
    proc = workers.start(visibility_timeout=2.0, renew_interval=0.3, grace_period=60, app=app)
    wait_for(lambda: ledger.count(job_id, "transform") >= 3, 30, "progress in transform")
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)  # Ctrl-C: drain, with a minute of grace
    log = workers.procs[-1][1]
    wait_for(lambda: "received SIGINT, draining" in log.read_text(errors="replace"), 10,
             "the worker to start draining")
    done = ledger.count(job_id, "transform")
    wait_for(lambda: ledger.count(job_id, "transform") >= done + 2, 10,
             "the handler to go on after the drain began")
    assert proc.poll() is None  # still waiting for the handler
    proc.send_signal(signal.SIGTERM)  # the second signal: stop waiting
    assert proc.wait(timeout=15) == 0
    assert time.monotonic() - started < 5.0
    info = job(q, job_id)
    assert (info.state, info.attempts) == ("pending", 0)
    assert info.checkpoint.cursor_step == "transform" and info.checkpoint.cursor is not None
    assert op_names(q, job_id).count("ReturnLease") == 1


def listeners(q: pgqueue.Queue) -> int:
    """Sessions of this database listening for job notifications."""
    with q.connection() as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity "
                           "WHERE datname = current_database() AND query ILIKE 'LISTEN %%'"
                           ).fetchone()
    return int(row[0]) if row else 0


# -- Postgres restart --------------------------------------------------------------------------


def test_a_worker_survives_a_postgres_restart_and_loses_nothing(
        bed: Bed, dsn: str, q: pgqueue.Queue, workers: Workers, ledger: Ledger) -> None:
    if bed.server is None:
        pytest.skip("PGQUEUE_TEST_DSN is set: the server is not ours to restart")
    q.configure_stream(retry_base=0.1, retry_cap=0.5)
    before = [q.enqueue({"sleep": 0.1}, kind="note") for _ in range(40)]
    proc = workers.start(concurrency=4, visibility_timeout=2.0, renew_interval=0.3,
                         maintenance_interval=0.3, poll_interval=0.5)
    wait_for(lambda: ledger.count(None, "note") >= 8, 30, "the worker to get going")

    # Down long enough for handlers, renewals and acks to fail, and for leases to expire.
    bed.server.stop()
    time.sleep(2.5)
    bed.server.start()

    # The test's own client starts afresh: the worker is what is under test here.
    with pgqueue.Queue(dsn) as client:
        after = [client.enqueue({"sleep": 0.1}, kind="note") for _ in range(10)]
        wait_for(lambda: client.jobs() == [], 90, "the queue to drain after the restart")
        assert proc.poll() is None, "the worker died with the server"
        # Its LISTEN connection is back too (the wakeup path, not only polling).
        wait_for(lambda: listeners(client) == 1, 10, "the worker to LISTEN again")
        stop(proc)

        assert client.dead_letters() == []
        for job_id in [*before, *after]:
            assert op_names(client, job_id).count("Ack") == 1, job_id
            assert ledger.count(job_id, "note") >= 1
