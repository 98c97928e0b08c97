"""`pgqueue worker --log-format json` in a real process: one JSON object per line, a record
per job failure, undecodable job, quarantined job, reclaim pass and lifecycle event, with the
fields named the same everywhere, and never a payload or a password."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pgqueue
from tests.dbhelp import lease_long_ago, wait_for
from tests.integration.runtime.test_worker import state

REPO = Path(__file__).resolve().parents[2]
MARKER = "PAYLOAD-MARKER-4711"  # a payload no log line may show
PASSWORD = "log-Password-0815"  # noqa: S105  (trust auth accepts any password)


def records(path: Path) -> list[dict[str, Any]]:
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    return [json.loads(line) for line in lines]  # every line is one JSON object


def test_json_logs_carry_each_event_with_consistent_fields_and_no_secrets(
        dsn: str, q: pgqueue.Queue, tmp_path: Path) -> None:
    q.configure_stream(retry_base=0.01)
    q.configure_kind("ok", quarantine_after=1)
    crashing = q.enqueue({"secret": MARKER}, kind="ok", priority=255)
    (stray,) = lease_long_ago(dsn, "default")  # expired unsettled: one crash, quarantined
    assert stray.job_id == crashing
    failing = q.enqueue({"secret": MARKER}, kind="boom")
    mystery = q.enqueue({"secret": MARKER}, kind="mystery")
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pgqueue", "worker", "--app", "tests.acceptance.logs_app:app",
             "--log-format", "json", "--maintenance-interval", "0.2", "--poll-interval", "0.2"],
            cwd=REPO, env={**os.environ, "PGQUEUE_DSN": f"{dsn} password={PASSWORD}"},
            stdout=subprocess.DEVNULL, stderr=out)
    try:
        wait_for(lambda: [state(q, j) for j in (crashing, failing, mystery)] == [
            "quarantined", "dead", "undecodable"], 30, "the quarantine, the death, the parking")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    assert MARKER not in text and PASSWORD not in text
    found = records(log)
    events = [r.get("event") for r in found]
    for event in ("started", "reclaimed", "quarantined", "failed", "undecodable", "draining",
                  "stopped"):
        assert event in events, (event, events)
    for r in found:
        assert {"ts", "level", "logger", "message"} <= set(r)
    failures = [r for r in found if r.get("event") == "failed"]
    assert [(r["job_id"], r["kind"], r["stream"], r["attempt"], r["outcome"]) for r in failures] \
        == [(failing, "boom", "default", 1, "retried"), (failing, "boom", "default", 2, "dead")]
    assert all(r["error"] == "ValueError: the upstream refused the request" for r in failures)
    assert failures[0]["retry_at"] is not None and failures[1]["retry_at"] is None
    parked = next(r for r in found if r.get("event") == "undecodable")
    assert (parked["job_id"], parked["kind"], parked["outcome"], parked["reason"]) == (
        mystery, "mystery", "undecodable", "unknown_kind")
    quarantined = next(r for r in found if r.get("event") == "quarantined")
    assert (quarantined["job_id"], quarantined["kind"], quarantined["outcome"]) == (
        crashing, "ok", "quarantined")
    reclaimed = next(r for r in found if r.get("event") == "reclaimed")
    assert reclaimed["count"] == 1 and reclaimed["quarantined"] == 1
