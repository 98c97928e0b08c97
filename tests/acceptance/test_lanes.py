"""A worker leases for a kind only what the slots that can run it will start soon: with an
async kind beside plain `def` steps, 40 step jobs waiting and 4 handler threads, at most 8
step jobs are leased at any moment (the threads' 4, and what the automatic prefetch adds for
steps of a second: one), while the async kind's jobs go through the loop's slots at once.
Before lanes (capacity.py) the lease counted the loop's 100 slots for jobs only the threads
could run, and the worker held 30 of them.

A real `pgqueue worker` process (tests/acceptance/mixed_app.py); the leased count is sampled
from the table while it works."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psycopg

import pgqueue
from tests.dbhelp import wait_for

REPO = Path(__file__).resolve().parents[2]


def _leased(dsn: str, kind: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM pgqueue.job WHERE state = 'leased' "
                           "AND kind = %s", (kind,)).fetchone()
    return int(row[0]) if row else 0


def test_a_mixed_app_leases_step_jobs_only_for_its_threads(dsn: str, q: pgqueue.Queue,
                                                           tmp_path: Path) -> None:
    reports = q.enqueue_many([pgqueue.NewJob({}, kind="report") for _ in range(40)])
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pgqueue", "worker", "--app",
             "tests.acceptance.mixed_app:app", "--concurrency", "4"],
            cwd=REPO, env={**os.environ, "PGQUEUE_DSN": dsn}, stdout=out, stderr=out,
            stdin=subprocess.DEVNULL)
    try:
        wait_for(lambda: _leased(dsn, "report"), 30, "the worker to lease step jobs")
        notes = q.enqueue_many([pgqueue.NewJob({}, kind="notify") for _ in range(20)])
        wait_for(lambda: all(q.job(n) is None for n in notes), 10,
                 "the async jobs to run beside the steps")
        most, until = 0, time.monotonic() + 6.0  # three jobs' time of four threads
        while time.monotonic() < until:
            most = max(most, _leased(dsn, "report"))
            time.sleep(0.05)  # sampling, not waiting for anything
        assert 4 <= most <= 8, f"{most} step jobs leased at once by 4 threads"
        assert sum(1 for r in reports if q.job(r) is not None) > 8  # the rest waited pending
    finally:
        proc.terminate()
        assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]
