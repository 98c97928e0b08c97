"""The chaos soak, seeded: `bench/soak/soak.py --duration 60 --seed 1` as a subprocess.

It starts its own three servers, workers, schedulers and producers, injects every kind of fault
its plan holds (worker SIGKILL and SIGSTOP, backend terminations, leader restarts fast and
immediate, a replica restart, a failover) and checks the producers' and handlers' records
against the op log. This test asserts the run exits 0, that the JSON it writes shows at least
one fault of every kind injected, and that every check passed (violations are printed).

A fast test first feeds the soak's checks a made-up op log with one violation of each kind,
so a check that can never fail would show here.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.soak import soak_checks
from bench.soak.soak_checks import Evidence, Op

REPO = Path(__file__).resolve().parents[2]
KINDS = ("kill_worker", "stop_worker", "terminate_backends", "restart_leader_immediate",
         "restart_leader_fast", "restart_replica", "failover")


T0 = 1_800_000_000_000  # ms, a whole second


def _op(seq: int, op: str, job: int | None = None, lease: int | None = None,
        body: dict[str, object] | None = None, at: int = T0, kind: str | None = None,
        payload: dict[str, object] | None = None, dedup: bytes | None = None) -> Op:
    return Op(seq, op, job, lease, dict(body or {}), at, kind, dedup,
              None if payload is None else json.dumps(payload).encode())


def test_the_checks_flag_made_up_violations_of_each_kind() -> None:
    fired = ["2027-01-15T08:00:01+00:00"]  # T0 + 1 s
    ops = [
        _op(1, "UpsertSchedule", body={"name": "s", "next_run_at_ms": T0 + 1000,
                                       "catch_up": "one", "misfire_grace_ms": 3000}),
        _op(2, "Enqueue", 1, kind="plain", payload={"tag": "p0-1"}),
        _op(3, "Lease", 1, 10, {"expires_at_ms": T0 + 2000}),
        _op(4, "Ack", 1, 10),
        _op(5, "Ack", 1, 10),                         # acked twice, under an ended lease
        _op(6, "Enqueue", 2, kind="plain", payload={"tag": "p0-2"}),  # rolled back: exists
        _op(7, "Enqueue", 3, kind="steps", payload={"tag": "p0-3", "items": 2}),
        _op(8, "Lease", 3, 11, {"expires_at_ms": T0 + 5000}),
        _op(9, "Renew", 3, 11, {"expires_at_ms": T0 + 6000, "checkpoint": {
            "last_completed_step": "a", "cursor_step": "b", "cursor": "MA=="}}),  # "0"
        _op(10, "Reclaim", 3, 11, at=T0 + 5500),      # before its expiry
        _op(11, "Lease", 3, 12, {"expires_at_ms": T0 + 9000}),
        _op(12, "UpdateScheduleNextRun", body={"name": "s", "fired": fired * 2,
                                               "next_run_at_ms": T0 + 2000}, at=T0 + 1200),
    ]
    ledger: list[dict[str, Any]] = [
        {"ev": "done", "job": 1, "lease": 10},
        {"ev": "step_start", "job": 3, "lease": 12, "step": "a", "cursor": None}]
    produced: list[dict[str, Any]] = [
        {"ev": "ok", "mode": "single", "ids": [1], "tags": ["p0-1"], "dedup": None},
        {"ev": "rolled_back", "mode": "txn", "ids": [2], "tags": ["p0-2"], "why": "x"}]
    ev = Evidence(ops=ops, old_leader_ops=[(99, "Ack", 9, 9)], final_jobs={2: "pending"},
                  dead=set(), ledger=ledger, produced=produced, faults=[],
                  schedules_stopped_ms=T0 + 1200, replica_identical=False,
                  replica_differences=["job id 2: only on the leader"],
                  unexpected_exits=["worker-9 exited by itself"])
    checks = {c.name: c for c in soak_checks.run_all(ev)}
    text = {name: "\n".join(c.violations) for name, c in checks.items()}
    assert all(not c.passed for c in checks.values()), {n: c.count for n, c in checks.items()}
    joined = "\n".join(text.values())
    for wanted in ("never committed (x) and exists", "acked 2 times", "which ended by Ack",
                   "before its expiry", "step a ran again under lease 12",
                   "fired 08:00:01.000 2 times", "only on the leader",
                   "of the old leader is not on the new leader", "worker-9"):
        assert wanted in joined, f"{wanted!r} not in:\n{joined}"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_seeded_chaos_soak_finds_no_violation(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    run = subprocess.run(
        [sys.executable, str(REPO / "bench" / "soak" / "soak.py"), "--duration", "60", "--seed", "1",
         "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=840, check=False)
    tail = (run.stdout + run.stderr)[-12000:]
    assert out.exists(), f"the soak wrote no JSON (exit {run.returncode}):\n{tail}"
    data = json.loads(out.read_text())
    missing = [k for k in KINDS if data.get("faults", {}).get(k, 0) < 1]
    assert not missing, f"faults never injected: {missing}\n{tail}"
    assert not data.get("faults_failed"), data.get("faults_failed")
    failed = {c["name"]: c["violations"] for c in data["checks"] if not c["passed"]}
    assert not failed, json.dumps(failed, indent=2)
    assert data["passed"] is True
    assert run.returncode == 0, tail
    figures = data["figures"]
    assert figures["jobs_enqueued"] > 0 and figures["ticks_fired"] > 0
