"""Prefetch in real worker processes: a worker SIGKILLed while it holds jobs leased ahead of
its handlers costs only the jobs whose handlers started (said by the lease, or by a renewal
since) an attempt and a crash; a job that kills its worker the moment it starts is still
quarantined at the threshold, even when it was leased ahead.

Uses the App and the worker processes of test_worker.py (fixtures in conftest.py)."""
from __future__ import annotations

import signal
from typing import Any

import psycopg

import pgqueue
from tests.acceptance.test_worker import Ledger, Workers, drive, job, state
from tests.dbhelp import wait_for


def row(dsn: str, job_id: int) -> dict[str, Any]:
    with psycopg.connect(dsn) as conn:
        found = conn.execute(
            "SELECT state, attempts, crashes_by_step, lease_started, unstarted_reclaims "
            "FROM pgqueue.job WHERE id = %s", [job_id]).fetchone()
    assert found is not None, f"job {job_id} is gone"
    return dict(zip(("state", "attempts", "crashes", "started", "unstarted"), found,
                    strict=True))


def test_a_worker_killed_holding_prefetched_jobs_charges_only_the_started_ones(
        dsn: str, q: pgqueue.Queue, workers: Workers, ledger: Ledger) -> None:
    # One handler thread. The lease hands it `first` at once (said started by the lease);
    # `slow` starts from the prefetch buffer when `first` is done (said by a renewal); the
    # notes behind it never start.
    first = q.enqueue({}, kind="note", priority=9)
    slow = q.enqueue({"sleep": 120}, kind="quick", priority=5)
    notes = q.enqueue_many([pgqueue.NewJob({}, kind="note") for _ in range(10)])
    proc = workers.start(concurrency=1, visibility_timeout=1.0, renew_interval=0.2,
                         extra=["--prefetch", "20", "--no-maintenance"])
    wait_for(lambda: ledger.count(slow, "quick:start") == 1, 30, "the slow job to start")
    wait_for(lambda: row(dsn, slow)["started"], 10, "a renewal to say the slow job started")
    wait_for(lambda: all(state(q, n) == "leased" for n in notes), 10, "the notes leased ahead")
    assert q.job(first) is None and ledger.count(first, "note") == 1
    assert not any(row(dsn, n)["started"] for n in notes)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)

    reclaimed: list[int] = []

    def all_reclaimed() -> bool:
        reclaimed.append(q.reclaim_expired())
        return sum(reclaimed) == 11

    wait_for(all_reclaimed, 15, "the dead worker's 11 leases to expire and be reclaimed")
    assert row(dsn, slow) == {"state": "pending", "attempts": 1, "crashes": {"": 1},
                              "started": True, "unstarted": 0}
    for n in notes:
        assert row(dsn, n) == {"state": "pending", "attempts": 0, "crashes": {},
                               "started": False, "unstarted": 1}, f"note {n} was charged"
        assert ledger.count(n, "note") == 0

    # A new worker runs every note once; each is acked under its second lease.
    q.cancel(slow)
    drive(workers, lambda: all(q.job(n) is None for n in notes), 30,
          extra=["--prefetch", "20"])
    assert [ledger.count(n, "note") for n in notes] == [1] * 10


def test_a_job_that_kills_its_worker_at_once_is_quarantined_even_when_leased_ahead(
        dsn: str, q: pgqueue.Queue, workers: Workers, ledger: Ledger) -> None:
    # The poison job is leased behind a note (so ahead of its handler), then kills the worker
    # the moment it starts, before any renewal can say it started: that first reclaim charges
    # it nothing, and every lease after counts it as started.
    q.enqueue({}, kind="note", priority=9)
    poison = q.enqueue({"items": 1, "die_at_step": "download", "die_count": 100},
                       kind="pipeline", schema_version=1)
    drive(workers, lambda: state(q, poison) == "quarantined", 90,
          renew_interval=0.5, extra=["--prefetch", "5"])
    info = job(q, poison)
    assert info.checkpoint.crashes_by_step == {"download": 3}
    assert info.state_detail == {"step": "download", "crashes": 3, "threshold": 3}
    deaths = ledger.count(poison, "die:download")
    # 4 when the first death came before a renewal said it started (the usual case), 3 when
    # a renewal came first; either way the charged crashes reached the threshold
    assert deaths in (3, 4)
    assert row(dsn, poison)["unstarted"] == deaths - 3
