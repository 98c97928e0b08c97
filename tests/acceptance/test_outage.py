"""While the database is away: calls fail within their connect timeout, a worker waits an
outage out quietly and exits at once on a misconfiguration, the dashboard answers 503.

A server of its own (stopped and started by these tests, never the shared one), real worker
processes, the producer API and the dashboard's ASGI app.
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from psycopg.conninfo import make_conninfo
from starlette.testclient import TestClient

import pgqueue
from pgqueue.db import connection, connection_async
from pgqueue.db.embedded import EmbeddedServer
from pgqueue.telemetry.outage import Outage
from tests.dbhelp import wait_for

REPO = Path(__file__).resolve().parents[2]
APP = "tests.acceptance.logs_app:app"
#: What a bounded call may take beyond its connect timeout (a loaded machine, the statement).
SLACK = 3.0


class Server:
    """An embedded server these tests stop and start; its DSN stays the same."""

    def __init__(self) -> None:
        self.server = EmbeddedServer(Path(tempfile.mkdtemp(prefix="pgqueue-outage-")),
                                     settings={"fsync": "off"})
        base = self.server.start()
        with connection.connect(base) as conn:
            conn.execute("CREATE DATABASE outage")
        self.dsn = make_conninfo(base, dbname="outage")
        pgqueue.migrate(self.dsn)

    def down(self) -> None:
        self.server.stop("immediate")

    def up(self) -> None:
        if not self.server.is_running():
            self.server.start()


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    s = Server()
    try:
        yield s
    finally:
        s.server.stop("immediate")
        shutil.rmtree(s.server.root, ignore_errors=True)


@pytest.fixture
def up(server: Server) -> Iterator[Server]:
    """The server, running at the start and again at the end of the test."""
    server.up()
    try:
        yield server
    finally:
        server.up()


def test_calls_fail_within_the_connect_timeout_while_the_server_is_away(up: Server) -> None:
    with pgqueue.Queue(up.dsn, connect_timeout=1) as q:
        q.enqueue("before")
        up.down()
        started = time.monotonic()
        with pytest.raises(pgqueue.ConnectionFailed):
            q.enqueue("during")
        assert time.monotonic() - started < 1 + SLACK
        started = time.monotonic()
        with pytest.raises(pgqueue.ConnectionFailed):
            pgqueue.Queue(up.dsn, connect_timeout=1)
        assert time.monotonic() - started < 1 + SLACK
        up.up()
        wait_for(lambda: _enqueued(q), timeout=30, what="the queue's calls to succeed again")


def _enqueued(q: pgqueue.Queue) -> bool:
    try:
        q.enqueue("after")
    except pgqueue.ConnectionFailed:
        return False
    return True


def test_an_async_call_fails_within_the_connect_timeout(up: Server) -> None:
    async def scenario() -> float:
        async with pgqueue.AsyncQueue(up.dsn, connect_timeout=1) as q:
            await q.enqueue("before")
            up.down()
            started = time.monotonic()
            with pytest.raises(pgqueue.ConnectionFailed):
                await q.enqueue("during")
            return time.monotonic() - started

    assert asyncio.run(scenario()) < 1 + SLACK


@pytest.mark.parametrize("bad, named", [
    ({"dbname": "no_such_database"}, 'database "no_such_database" does not exist'),
    ({"user": "no_such_role"}, 'role "no_such_role" does not exist'),
])
def test_a_misconfigured_worker_exits_at_once_naming_the_cause(
        up: Server, bad: dict[str, str], named: str) -> None:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pgqueue", "worker", "--app", APP],
        cwd=REPO, env={**os.environ, "PGQUEUE_DSN": make_conninfo(up.dsn, **bad)},
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 3, done.stderr
    assert time.monotonic() - started < 30
    errors = [line for line in done.stderr.splitlines() if line.startswith("pgqueue: error:")]
    assert len(errors) == 1 and named in errors[0], done.stderr


def test_a_worker_on_a_database_without_the_schema_exits_naming_it(up: Server) -> None:
    with connection.connect(up.server.dsn()) as conn:
        conn.execute("DROP DATABASE IF EXISTS bare")
        conn.execute("CREATE DATABASE bare")
    done = subprocess.run(
        [sys.executable, "-m", "pgqueue", "worker", "--app", APP],
        cwd=REPO, env={**os.environ, "PGQUEUE_DSN": make_conninfo(up.dsn, dbname="bare")},
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 3 and "pgqueue db upgrade" in done.stderr, done.stderr


def test_a_worker_waits_an_outage_out_and_says_so_twice(up: Server, tmp_path: Path) -> None:
    """Down for a few seconds under a running worker: one line when it starts, one when it
    ends (with its length), none per retry; then the worker works again."""
    log_path = tmp_path / "worker.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pgqueue", "--connect-timeout", "1", "worker", "--app", APP,
             "--stream", "outage", "--log-format", "json", "--poll-interval", "0.2",
             "--maintenance-interval", "0.2"],
            cwd=REPO, env={**os.environ, "PGQUEUE_DSN": up.dsn}, stdout=log, stderr=log,
            stdin=subprocess.DEVNULL)
    try:
        with pgqueue.Queue(up.dsn, "outage") as q:
            first = q.enqueue("x", kind="ok")
            wait_for(lambda: q.job(first) is None, timeout=30, what="the first job to be done")
        up.down()
        wait_for(lambda: "outage_started" in log_path.read_text(), timeout=30,
                 what="the worker to notice the outage")
        time.sleep(3)  # the outage's length (not a wait for anything): retries go on
        up.up()
        with pgqueue.Queue(up.dsn, "outage") as q:
            after = q.enqueue("y", kind="ok")
            wait_for(lambda: q.job(after) is None, timeout=60, what="a job done after the outage")
        wait_for(lambda: "outage_ended" in log_path.read_text(), timeout=30,
                 what="the worker to say the outage ended")
        assert proc.poll() is None, log_path.read_text()[-2000:]
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    events = [json.loads(line) for line in log_path.read_text().splitlines()
              if line.startswith("{")]
    warnings = [e for e in events if e["level"] == "warning"]
    assert [e["event"] for e in warnings] == ["outage_started", "outage_ended"], warnings
    assert warnings[1]["seconds"] >= 3


def test_an_outage_is_told_once_a_minute_at_most(caplog: pytest.LogCaptureFixture) -> None:
    """The rule itself, on a clock the test moves: start, every minute, end."""
    import logging

    now = [0.0]
    outage = Outage(logging.getLogger("pgqueue.test"), lambda: "worker 1", clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="pgqueue.test"):
        outage.ok()
        for second in range(0, 150):
            now[0] = float(second)
            outage.failed("lease", pgqueue.ConnectionFailed("refused"))
        now[0] = 151.5
        outage.ok()
        outage.ok()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 4 and outage.failures == 150, lines
    assert "unreachable (lease: refused)" in lines[0]
    assert "still unreachable after 60s" in lines[1] and "after 120s" in lines[2]
    assert lines[3] == "worker 1: the database is back after 151.5s"


def test_the_dashboard_answers_503_within_the_connect_timeout(up: Server) -> None:
    from pgqueue.dashboard import create_app

    with TestClient(create_app(up.dsn, connect_timeout=1)) as client:
        assert client.get("/").status_code == 200
        up.down()
        for path in ("/", "/api/stats", "/jobs"):
            started = time.monotonic()
            response = client.get(path)
            assert response.status_code == 503, (path, response.text[:300])
            assert time.monotonic() - started < 1 + SLACK, path
        up.up()
        wait_for(lambda: client.get("/").status_code == 200, timeout=30,
                 what="the dashboard to answer again")


def test_the_live_refresh_says_the_database_is_away_and_when_it_is_back(up: Server) -> None:
    """The event stream every page holds: `away` (with the reason, as data) while the server
    is stopped, `refresh` once it is back."""
    from pgqueue.dashboard.live import Broadcaster

    async def scenario() -> tuple[str, str]:
        live = Broadcaster(lambda: connection_async.find_leader([up.dsn], connect_timeout=1),
                           connect_timeout=1)
        events = live.events()
        try:
            assert await anext(events) == "retry: 3000\n\n"
            up.down()
            away = await asyncio.wait_for(anext(events), 30)
            up.up()
            back = await asyncio.wait_for(anext(events), 60)
            return away, back
        finally:
            await events.aclose()
            await live.stop()

    away, back = asyncio.run(scenario())
    assert away.startswith("event: away\ndata: "), away
    assert json.loads(away.split("data: ", 1)[1])["message"], away
    assert back == "event: refresh\ndata: {}\n\n"


def test_a_stale_connection_just_after_an_outage_is_no_new_outage(
        caplog: pytest.LogCaptureFixture) -> None:
    """The pool's connections from before the outage fail once each on their next use: within
    SETTLE_SECONDS of its end that says nothing, unless the failures last that long."""
    import logging

    from pgqueue.telemetry.outage import SETTLE_SECONDS

    now = [0.0]
    outage = Outage(logging.getLogger("pgqueue.test"), lambda: "worker 1", clock=lambda: now[0])
    refused = pgqueue.ConnectionFailed("refused")
    with caplog.at_level(logging.WARNING, logger="pgqueue.test"):
        outage.failed("lease", refused)
        now[0] = 4.0
        outage.ok()                       # the outage: started, ended
        now[0] = 5.0
        outage.failed("renewal", refused)  # a stale pooled connection
        outage.ok()                       # silent both ways
        now[0] = 6.0
        for second in range(int(SETTLE_SECONDS) + 1):  # a real one, right after
            now[0] = 6.0 + second
            outage.failed("lease", refused)
        outage.ok()
    events = [r.pgqueue["event"] for r in caplog.records]  # type: ignore[attr-defined]
    assert events == ["outage_started", "outage_ended", "outage_started", "outage_ended"]


def test_the_fastapi_example_answers_503_while_the_database_is_away_and_200_after(
        up: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """The docs' FastAPI service: an order placed while the server is down answers 503 (not a
    stale connection's 500), and the next orders succeed within seconds of its return."""
    import importlib

    import examples.fastapi_app

    monkeypatch.setenv("PGQUEUE_DSN", up.dsn)
    example = importlib.reload(examples.fastapi_app)
    numbers = iter(range(1000, 2000))
    with TestClient(example.app) as client:
        assert client.post(f"/orders/{next(numbers)}").status_code == 200
        up.down()
        during = client.post(f"/orders/{next(numbers)}")
        assert during.status_code == 503, during.text
        assert during.headers["retry-after"] == "5"
        up.up()
        back = time.monotonic()
        codes: list[int] = []

        def placed() -> bool:
            codes.append(client.post(f"/orders/{next(numbers)}").status_code)
            return codes[-1] == 200

        wait_for(placed, timeout=30, what="an order placed after the outage")
        assert time.monotonic() - back < 3 + SLACK and set(codes) <= {503, 200}, codes
