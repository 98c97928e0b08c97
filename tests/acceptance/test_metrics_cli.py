"""`pgqueue metrics serve` in a real process: it prints where it listens, serves the
database's gauges to a scraper (parsed with prometheus_client's parser) and exits 0 on
SIGTERM; and a worker's `--metrics-port` serves the worker's own."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg

import pgqueue
from tests.dbhelp import wait_for
from tests.integration.telemetry.test_metrics import scrape

REPO = Path(__file__).resolve().parents[2]


def serve_and_scrape(dsn: str) -> dict[Any, float]:
    """Run `pgqueue metrics serve` on `dsn`, scrape it once, and SIGTERM it (exit 0)."""
    proc = subprocess.Popen([sys.executable, "-m", "pgqueue", "metrics", "serve", "--port", "0"],
                            cwd=REPO, env={**os.environ, "PGQUEUE_DSN": dsn},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = re.search(r"on (http://127\.0\.0\.1:\d+/metrics)", line)
        assert found, line
        samples = scrape(found.group(1))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        return samples
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_metrics_serve_serves_the_database_until_sigterm(dsn: str, q: pgqueue.Queue) -> None:
    q.enqueue_many([pgqueue.NewJob(b"x") for _ in range(4)])
    q.lease()
    samples = serve_and_scrape(dsn)
    assert samples[("pgqueue_jobs", (("state", "pending"), ("stream", "default")))] == 3
    assert samples[("pgqueue_jobs", (("state", "leased"), ("stream", "default")))] == 1
    assert samples[("pgqueue_database_up", ())] == 1


def test_metrics_serve_refuses_a_database_without_the_schema(empty_dsn: str) -> None:
    done = subprocess.run([sys.executable, "-m", "pgqueue", "metrics", "serve", "--port", "0"],
                          cwd=REPO, env={**os.environ, "PGQUEUE_DSN": empty_dsn},
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 3 and "pgqueue db upgrade" in done.stderr


def test_a_workers_metrics_port_serves_its_counters(dsn: str, q: pgqueue.Queue,
                                                      tmp_path: Path) -> None:
    ids = q.enqueue_many([pgqueue.NewJob(b"{}", kind="note") for _ in range(3)])
    with psycopg.connect(dsn, autocommit=True) as conn:  # the test App's side-effect ledger
        conn.execute("CREATE TABLE ledger (job_id bigint, step text, item int, pid int, "
                     "at timestamptz DEFAULT clock_timestamp())")
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pgqueue", "worker", "--app", "tests.acceptance.worker_app:app",
             "--metrics-port", "0"], cwd=REPO,
            env={**os.environ, "PGQUEUE_DSN": dsn, "PGQUEUE_TEST_LEDGER_DSN": dsn},
            stdout=subprocess.DEVNULL, stderr=out)
    try:
        url = wait_for(lambda: (m := re.search(r"metrics=(http://\S+/metrics)", log.read_text()))
                       and m.group(1), 20, "the worker to say where its metrics are")
        wait_for(lambda: all(q.job(j) is None for j in ids), 20, "the jobs to be acked")
        acked = ("pgqueue_jobs_finished_total",
                 (("kind", "note"), ("outcome", "acked"), ("stream", "default")))
        wait_for(lambda: scrape(url).get(acked) == 3, 10, "the acks to be counted")
        samples = scrape(url)
        assert samples[("pgqueue_job_duration_seconds_count",
                        (("kind", "note"), ("stream", "default")))] == 3
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
