"""Smaller CLI breaks of issue 11 (break 7): PGQUEUE_DEBUG keeps every exit code, and a
schedule asked for in the wrong stream says which streams hold it.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import pgqueue
from tests.acceptance.clihelp import ok, run

UNREACHABLE = "host=127.0.0.1 port=1 dbname=x password=secret"
REPO = Path(__file__).resolve().parents[2]
DEBUG: dict[str, str | None] = {"PGQUEUE_DEBUG": "1"}


# -- PGQUEUE_DEBUG ----------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "code", "needle"), [
    (["jobs", "cancel", "424242"], 1, "424242"),  # JobNotFound from the library
    (["enqueue", "s", "x", "--priority", "300"], 2, "priority"),  # the library's ValueError
    (["stats"], 3, "127.0.0.1:1"),  # cannot connect
])
def test_debug_shows_the_traceback_and_keeps_the_exit_code(
        dsn: str, args: list[str], code: int, needle: str) -> None:
    target = UNREACHABLE if code == 3 else dsn
    plain = run(target, *args)
    debug = run(target, *args, env=DEBUG)
    assert plain.exit_code == debug.exit_code == code, (debug.exit_code, debug.stderr)
    assert "Traceback" not in plain.stderr
    assert "Traceback (most recent call last)" in debug.stderr
    last = debug.stderr.strip().splitlines()[-1]
    assert last.startswith("pgqueue: error: ") and needle in last, debug.stderr
    assert "secret" not in debug.output


def test_debug_keeps_exit_code_3_in_a_real_process() -> None:
    env = {k: v for k, v in os.environ.items() if k != "PGQUEUE_DSN"}
    proc = subprocess.run(
        [sys.executable, "-m", "pgqueue", "--dsn", UNREACHABLE, "jobs", "list"],
        capture_output=True, text=True, timeout=60, cwd=REPO, env={**env, "PGQUEUE_DEBUG": "1"})
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" in proc.stderr and "pgqueue: error: " in proc.stderr


# -- a schedule in another stream -------------------------------------------------------------


def test_remove_without_stream_names_the_streams_that_hold_the_name(dsn: str) -> None:
    for stream in ("reports", "billing"):
        with pgqueue.Queue(dsn, stream=stream) as q:
            q.upsert_schedule("nightly", "0 3 * * *")
    result = run(dsn, "schedules", "remove", "nightly")
    assert result.exit_code == 1 and result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert "no schedule nightly in stream default" in line
    assert "nightly exists in stream(s) billing, reports: pass --stream" in line
    for stream in ("reports", "billing"):  # nothing was removed
        with pgqueue.Queue(dsn, stream=stream) as q:
            assert q.schedule("nightly") is not None
    # the other commands that look a schedule up by name say the same
    for command in ("show", "pause", "resume", "next"):
        result = run(dsn, "schedules", command, "nightly")
        assert result.exit_code == 1, (command, result.stderr)
        assert "exists in stream(s) billing, reports: pass --stream" in result.stderr, command
    # in one of its streams but asked in another: only the others are named
    result = run(dsn, "schedules", "remove", "nightly", "--stream", "elsewhere")
    assert "exists in stream(s) billing, reports" in result.stderr
    ok(dsn, "schedules", "remove", "nightly", "--stream", "billing")
    result = run(dsn, "schedules", "remove", "nightly", "--stream", "billing")
    assert "exists in stream(s) reports: pass --stream" in result.stderr


def test_remove_of_a_name_no_stream_holds_says_only_that(dsn: str) -> None:
    result = run(dsn, "schedules", "remove", "ghost")
    assert result.exit_code == 1
    assert "no schedule ghost in stream default" in result.stderr
    assert "exists in" not in result.stderr
