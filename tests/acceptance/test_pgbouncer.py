"""pgqueue through a real PgBouncer (Debian's 1.18) in transaction pooling mode, as many users
run it: every statement may land on another server connection, no prepared statement is
forwarded, and LISTEN hears nothing.

Producers (Queue, AsyncQueue, also in the caller's transaction on a pooled connection), the
worker as a process (polling, and with a direct --listen-dsn for wake-ups), the CLI, the
dashboard and the metrics; all past psycopg's prepare threshold (5 runs of a statement), where
a prepared statement would be missing or already there on the next server connection.
"""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

import pgqueue
from pgqueue.db import connection
from pgqueue.maintenance import maintain
from pgqueue.telemetry.metrics import database_registry
from tests.dbhelp import wait_for
from tests.integration.dashboard.dashboard_help import BEARER, dashboard
from tests.pgbed import Bed
from tests.poolerbed import Pooler

REPO = Path(__file__).resolve().parents[2]
APP = "tests.acceptance.logs_app:app"
#: More than psycopg's prepare threshold: a statement prepared on one server connection.
RUNS = 12


def test_a_pooler_is_detected_and_a_direct_connection_is_not(dsn: str, pooled_dsn: str) -> None:
    with pgqueue.Queue(pooled_dsn) as through, pgqueue.Queue(dsn) as direct:
        assert through.pooled is True and direct.pooled is False
    with pgqueue.Queue(pooled_dsn, pooled=False) as told:
        assert told.pooled is False
    with pytest.raises(TypeError, match="pooled"):
        pgqueue.Queue(dsn, pooled="yes")  # type: ignore[arg-type]


def test_statements_prepared_behind_the_pooler_break_and_pgqueue_prepares_none(
        pooled_dsn: str) -> None:
    """The failure itself (told it is not pooled, the queue prepares: PgBouncer then hands a
    statement to a server connection that lacks it, or has it already), and the queue that
    knows it is pooled running every call many times over."""
    with pgqueue.Queue(pooled_dsn, pooled=False, pool_size=4) as told_wrong:
        with pytest.raises(pgqueue.PgQueueError, match="prepared statement"):
            _busy(told_wrong, concurrently=True)
    with pgqueue.Queue(pooled_dsn, pool_size=4) as q:
        _busy(q, concurrently=True)
        for _ in range(RUNS):
            q.enqueue({"n": 1})
            q.enqueue_many([pgqueue.NewJob(b"x"), pgqueue.NewJob(b"y")])
            leased = q.lease(3, visibility_timeout=30)
            q.renew(leased[0])
            q.ack(leased[0])
            q.nack(leased[1], error="failed on purpose")
            q.ack_many(leased[2:])
            q.stats()
            q.jobs(limit=5)
            assert q.history(leased[0].job_id) is not None
        with connection.connect(pooled_dsn) as conn:
            for _ in range(RUNS):
                maintain.run_pass(conn)
        assert any(f.name == "pgqueue_jobs" for f in database_registry(pooled_dsn).collect())


def _busy(q: pgqueue.Queue, *, concurrently: bool) -> None:
    """Enqueue and lease from several threads at once, so that the pooler's server
    connections are shared between the queue's pooled connections."""
    from concurrent.futures import ThreadPoolExecutor

    def one(_: int) -> None:
        for _ in range(RUNS):
            q.enqueue(b"busy")
            for held in q.lease(1):
                q.ack(held)

    with ThreadPoolExecutor(4 if concurrently else 1) as pool:
        list(pool.map(one, range(4)))


def test_async_queue_through_the_pooler(pooled_dsn: str) -> None:
    async def scenario() -> int:
        async with pgqueue.AsyncQueue(pooled_dsn) as q:
            assert q.pooled is True
            ids = await asyncio.gather(*(q.enqueue({"n": n}) for n in range(RUNS * 5)))
            done = 0
            while done < len(ids):
                leased = await q.lease(10)
                done += len(await q.ack_many(leased))
            return done

    assert asyncio.run(scenario()) == RUNS * 5


def test_enqueue_in_the_callers_transaction_on_a_pooled_connection(pooled_dsn: str) -> None:
    """On the caller's own connection through the pooler, inside its transaction: a commit
    makes every job visible, a rollback leaves nothing, and pgqueue's statements are not
    prepared even on a connection with psycopg's default threshold."""
    with pgqueue.Queue(pooled_dsn) as q:
        with psycopg.connect(pooled_dsn) as mine:  # psycopg's default prepare_threshold (5)
            with mine.transaction():
                for n in range(RUNS):
                    q.enqueue({"n": n}, conn=mine)
                q.enqueue_many([pgqueue.NewJob(b"m")] * 3, conn=mine)
            with pytest.raises(_RollBack), mine.transaction():
                for _ in range(RUNS):
                    q.enqueue(b"rolled back", conn=mine)
                raise _RollBack
        counts = {s.state: s.count for s in q.stats()}
        assert counts.get("pending") == RUNS + 3, counts
        with psycopg.connect(pooled_dsn, prepare_threshold=None) as told:
            with told.transaction():
                job = q.enqueue(b"told", conn=told)
            assert q.job(job) is not None


class _RollBack(Exception):
    """Raised inside a transaction block to roll it back."""


def _worker(pooled_dsn: str, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "pgqueue", "worker", "--app", APP, "--stream", "pooled",
             "--log-format", "json", *extra],
            cwd=REPO, env={**os.environ, "PGQUEUE_DSN": pooled_dsn}, stdout=out, stderr=out,
            stdin=subprocess.DEVNULL)


def _events(log: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]


@pytest.mark.parametrize("listen", [False, True], ids=["polling", "listen-dsn"])
def test_a_worker_through_the_pooler(dsn: str, pooled_dsn: str, tmp_path: Path,
                                     listen: bool) -> None:
    """Without --listen-dsn it says once that it polls, and works at its poll interval; with
    it, a job enqueued while it idles is done at once (by NOTIFY, long before the poll)."""
    log = tmp_path / "worker.log"
    poll = "5" if listen else "0.5"
    with pgqueue.Queue(pooled_dsn, "pooled") as q:  # before the worker: its first lease finds them
        first = [q.enqueue("x", kind="ok") for _ in range(RUNS)]
    proc = _worker(pooled_dsn, log, "--poll-interval", poll, "--verbose",
                   *(["--listen-dsn", dsn] if listen else []))
    try:
        with pgqueue.Queue(pooled_dsn, "pooled") as q:
            wait_for(lambda: all(q.job(j) is None for j in first), timeout=60,
                     what="the worker to do the first jobs")
            # idle: the next job comes after a lease of the worker's came back empty
            wait_for(lambda: any(e.get("event") == "idle" for e in _events(log)), timeout=30,
                     what="the worker to go idle")
            started = time.monotonic()
            after = q.enqueue("y", kind="ok")
            wait_for(lambda: q.job(after) is None, timeout=30, what="a job enqueued while idle")
            waited = time.monotonic() - started
    finally:
        proc.terminate()
        assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]
    polling = [e for e in _events(log) if e.get("event") == "polling"]
    if listen:
        assert not polling and waited < 2.5, (waited, log.read_text()[-3000:])
    else:
        assert len(polling) == 1 and "--listen-dsn" in str(polling[0]["message"]), polling
        assert waited < 0.5 + 2.5


def test_the_cli_through_the_pooler(pooled_dsn: str) -> None:
    env = {**os.environ, "PGQUEUE_DSN": pooled_dsn}

    def cli(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "pgqueue", *args], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, (args, done.stderr)
        return done.stdout

    for n in range(3):
        cli("enqueue", "cli", f'{{"n": {n}}}', "--kind", "k")
    assert json.loads(cli("stats", "--json"))
    assert len(json.loads(cli("jobs", "list", "--stream", "cli", "--json"))) == 3
    cli("maintain", "--once")
    cli("--not-pooled", "stats")  # told, not detected (a few statements: nothing prepared)


def test_the_dashboard_through_the_pooler(pooled_dsn: str) -> None:
    with pgqueue.Queue(pooled_dsn) as q:
        ids = [q.enqueue({"n": n}) for n in range(3)]
    with dashboard(pooled_dsn) as client:
        for _ in range(RUNS // 2):
            for path in ("/", "/jobs", f"/jobs/{ids[0]}", "/api/stats", "/api/jobs",
                         "/kinds", "/workers"):
                assert client.get(path, headers=BEARER).status_code == 200, path
        assert client.post(f"/api/jobs/{ids[1]}/cancel", headers=BEARER).status_code == 200
    with pgqueue.Queue(pooled_dsn) as q:
        assert q.job(ids[1]) is None


def test_in_statement_mode_single_calls_work_and_a_transaction_is_refused_by_name(
        dsn: str, bed: Bed) -> None:
    """Statement pooling runs single statements only: enqueue, lease and settle work; a
    maintenance pass (a transaction) is refused with an error that says why, not taken for an
    outage."""
    pooler = Pooler(bed.server_dsn, mode="statement")
    try:
        through = pooler.dsn(dsn)
        with pgqueue.Queue(through) as q:
            for _ in range(RUNS):
                q.enqueue(b"x")
                for held in q.lease(1):
                    q.ack(held)
        with connection.connect(through) as conn, \
                pytest.raises(pgqueue.PgQueueError, match="statement mode") as refused:
            maintain.run_pass(conn)
        assert not isinstance(refused.value, pgqueue.ConnectionFailed)
    finally:
        pooler.close()
