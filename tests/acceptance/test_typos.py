"""No silent typos: a stream nobody knows is said so, naming the closest streams that exist,
by `jobs list`, `stats`, a worker at its start and the dashboard's jobs page, while enqueue
still creates a stream by using it; a mistyped command is answered with the one meant."""
from __future__ import annotations

import logging

import pytest
from starlette.testclient import TestClient

import pgqueue
from pgqueue.dashboard import create_app
from tests.acceptance.clihelp import ok, run
from tests.integration.runtime.test_worker import running


@pytest.fixture
def payments(q: pgqueue.Queue) -> pgqueue.Queue:
    with q.for_stream("payments") as other:
        other.enqueue(b"pay", kind="charge")
    return q


def test_jobs_list_and_stats_of_a_stream_nobody_knows_name_the_closest(
        dsn: str, payments: pgqueue.Queue) -> None:
    for args in (["jobs", "list", "--stream", "paymnets"], ["stats", "--stream", "paymnets"],
                 ["jobs", "list", "--stream", "paymnets", "--json"]):
        result = run(dsn, *args)
        assert result.exit_code == 1, (args, result.stdout)
        assert "no stream 'paymnets': did you mean 'payments'?" in result.stderr, args
    with payments.for_stream("empty") as empty:  # a stream that exists, with no job now
        job = empty.enqueue(b"x")
        (held,) = empty.lease(1)
        empty.ack(held)
        assert empty.job(job) is None
    assert "no jobs" in ok(dsn, "jobs", "list", "--stream", "empty").stdout
    far = run(dsn, "jobs", "list", "--stream", "zzz-unrelated")
    assert far.exit_code == 1 and "the streams are" in far.stderr and "'payments'" in far.stderr


def test_enqueue_to_a_new_stream_still_creates_it(dsn: str) -> None:
    ok(dsn, "enqueue", "brand-new", "hello")
    assert "brand-new" in ok(dsn, "stats").stdout


def test_a_mistyped_command_is_answered_with_the_one_meant(dsn: str) -> None:
    result = run(dsn, "stat")
    assert result.exit_code == 2 and "Did you mean 'stats'?" in result.stderr


def test_a_worker_on_a_stream_nobody_knows_warns_at_its_start(
        dsn: str, payments: pgqueue.Queue, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="pgqueue.worker")
    app = pgqueue.App()
    with running(app, dsn, streams=["paymnets"]):
        pass
    lines = [r.getMessage() for r in caplog.records if "no stream" in r.getMessage()]
    assert lines == ["worker: no stream 'paymnets': did you mean 'payments'?; working on it "
                     "anyway (enqueueing creates a stream)"], lines


def test_the_dashboard_says_a_stream_nobody_knows(dsn: str, payments: pgqueue.Queue) -> None:
    with TestClient(create_app(dsn)) as client:
        page = client.get("/jobs?stream=paymnets")
        assert page.status_code == 200
        assert "no stream &#39;paymnets&#39;: did you mean &#39;payments&#39;?" in page.text
        assert "No jobs match" in client.get("/jobs?stream=payments&state=dead").text
