"""Cancelling a running job end to end: real worker processes (plain, step and async handlers)
stopped by `pgqueue jobs cancel ID` while they run, and a cancel of a job whose worker was
SIGKILLed or SIGSTOPped, which then ends as cancelled at reclaim instead of running again.

The workers renew every 10 s here, so a job that stops within a few seconds of the cancel
was told by NOTIFY; the renewal's fallback is tested in tests/integration/client/test_cancel.py.
The ledger (tests/acceptance/worker_app.py) says what each handler did, and in which process.
"""
from __future__ import annotations

import signal
import subprocess
import time

import pytest

import pgqueue
from tests.acceptance.clihelp import as_json, ok
from tests.acceptance.test_worker import APP, ASYNC_APP, Ledger, Workers, op_names, ops
from tests.dbhelp import listening, wait_for

#: Long renewals: a worker that stops a job within TOLD seconds learnt it by NOTIFY.
TOLD = 4.0


def slow_renewals(workers: Workers, app: str = APP) -> subprocess.Popen[bytes]:
    """A worker that renews every 10 s (a 30 s visibility timeout), once it listens for
    cancels (so a test's cancel cannot come before it can hear it)."""
    proc = workers.start(app=app, visibility_timeout=30.0, renew_interval=10.0)
    wait_for(lambda: listening(workers.dsn, "pgqueue_cancel"), 30, "the worker to listen")
    return proc


def gone(q: pgqueue.Queue, job_id: int) -> bool:
    return q.job(job_id) is None


def cancel_by_cli(dsn: str, job_id: int) -> float:
    """`pgqueue jobs cancel ID` on a running job; returns when it was asked (monotonic)."""
    asked = time.monotonic()
    out = ok(dsn, "jobs", "cancel", str(job_id)).stdout
    assert f"cancel of job {job_id} requested" in out
    return asked


def ended_cancelled(q: pgqueue.Queue, job_id: int, by: str) -> None:
    last = ops(q, job_id)[-1]
    assert (last.op, last.body.get("by")) == ("Cancel", by), op_names(q, job_id)
    history = q.history(job_id)
    assert history is not None and (history.state, history.cancel) == ("cancelled", "cancelled")


@pytest.mark.parametrize("app", [APP, ASYNC_APP], ids=["threads", "async"])
def test_a_running_step_job_stops_at_its_next_advance(
        dsn: str, q: pgqueue.Queue, workers: Workers, ledger: Ledger, app: str) -> None:
    job_id = q.enqueue({"items": 5000, "sleep": 0.02}, kind="pipeline", schema_version=1)
    proc = slow_renewals(workers, app)
    wait_for(lambda: ledger.count(job_id, "transform") >= 10, 30, "progress in transform")
    asked = cancel_by_cli(dsn, job_id)
    wait_for(lambda: gone(q, job_id), 20, "the job to end")
    assert time.monotonic() - asked < TOLD, "the worker was not told at once"
    ended_cancelled(q, job_id, "handler")
    done = ledger.count(job_id, "transform")
    assert done < 5000 and ledger.count(job_id, "upload") == 0  # no later step ran
    # the worker goes on: the next job runs and is acked
    after = q.enqueue({"sleep": 0}, kind="quick")
    wait_for(lambda: gone(q, after), 20, "the next job")
    assert op_names(q, after)[-1] == "Ack"
    assert ledger.count(job_id, "transform") == done and proc.poll() is None
    json_out = as_json(dsn, "jobs", "show", str(job_id))
    assert json_out["history"]["cancel"] == "cancelled"


def test_a_plain_handler_sees_cancelled_and_stops(dsn: str, q: pgqueue.Queue, workers: Workers,
                                                  ledger: Ledger) -> None:
    job_id = q.enqueue({"sleep": 120}, kind="patient")
    slow_renewals(workers)
    wait_for(lambda: ledger.count(job_id, "patient:start") == 1, 30, "the handler to start")
    asked = cancel_by_cli(dsn, job_id)
    wait_for(lambda: gone(q, job_id), 20, "the job to end")
    assert time.monotonic() - asked < TOLD
    assert ledger.count(job_id, "patient:stopped") == 1
    assert ledger.count(job_id, "patient:end") == 0
    ended_cancelled(q, job_id, "handler")


def test_an_async_handler_is_cancelled_where_it_awaits(dsn: str, q: pgqueue.Queue,
                                                       workers: Workers, ledger: Ledger) -> None:
    job_id = q.enqueue({"sleep": 120}, kind="quick")
    slow_renewals(workers, ASYNC_APP)
    wait_for(lambda: ledger.count(job_id, "quick:start") == 1, 30, "the coroutine to start")
    asked = cancel_by_cli(dsn, job_id)
    wait_for(lambda: gone(q, job_id), 20, "the job to end")
    assert time.monotonic() - asked < TOLD
    assert ledger.count(job_id, "quick:end") == 0
    ended_cancelled(q, job_id, "handler")


def test_a_handler_that_finishes_first_is_acked_and_the_history_says_too_late(
        dsn: str, q: pgqueue.Queue, workers: Workers, ledger: Ledger) -> None:
    job_id = q.enqueue({"sleep": 1.5}, kind="quick")  # never looks at the cancel
    slow_renewals(workers)
    wait_for(lambda: ledger.count(job_id, "quick:start") == 1, 30, "the handler to start")
    cancel_by_cli(dsn, job_id)
    wait_for(lambda: gone(q, job_id), 20, "the ack")
    assert ledger.count(job_id, "quick:end") == 1
    history = q.history(job_id)
    assert history is not None and (history.state, history.cancel) == ("acked", "too late")
    shown = ok(dsn, "jobs", "show", str(job_id)).stdout
    assert "too late" in shown


def test_a_job_whose_worker_was_killed_ends_cancelled_at_reclaim(
        dsn: str, q: pgqueue.Queue, workers: Workers, ledger: Ledger) -> None:
    job_id = q.enqueue({"items": 5000, "sleep": 0.02}, kind="pipeline", schema_version=1)
    first = workers.start(visibility_timeout=1.5, renew_interval=0.3)
    wait_for(lambda: ledger.count(job_id, "transform") >= 5, 30, "progress in transform")
    first.kill()
    assert first.wait(timeout=10) == -signal.SIGKILL
    assert cancel_by_cli(dsn, job_id)
    second = workers.start(visibility_timeout=1.5, renew_interval=0.3)
    wait_for(lambda: gone(q, job_id), 30, "the reclaim to end it")
    ended_cancelled(q, job_id, "reclaim")
    info_attempts = [o.body.get("attempts") for o in ops(q, job_id) if o.op == "Reclaim"]
    assert info_attempts == []  # not reclaimed to pending: never charged, never retried
    assert {e.pid for e in ledger.entries(job_id)} == {first.pid}  # it never ran again
    assert second.poll() is None


def test_a_job_whose_worker_stalled_ends_cancelled_and_the_stalled_worker_writes_nothing(
        dsn: str, q: pgqueue.Queue, workers: Workers, ledger: Ledger) -> None:
    job_id = q.enqueue({"items": 5000, "sleep": 0.02}, kind="pipeline", schema_version=1)
    stalled = workers.start(visibility_timeout=1.5, renew_interval=0.3)
    wait_for(lambda: ledger.count(job_id, "transform") >= 5, 30, "progress in transform")
    stalled.send_signal(signal.SIGSTOP)
    try:
        cancel_by_cli(dsn, job_id)  # told by NOTIFY, which it cannot read while stopped
        other = workers.start(visibility_timeout=1.5, renew_interval=0.3)
        wait_for(lambda: gone(q, job_id), 30, "the other worker's reclaim to end it")
        ended_cancelled(q, job_id, "reclaim")
    finally:
        stalled.send_signal(signal.SIGCONT)
    seen = len(ops(q, job_id))
    # the stalled worker wakes: its renewal finds the lease gone and its handler stops (on
    # the lost lease or the cancel, whichever it sees first); nothing it writes changes the
    # job's history
    log = next(path for proc, path in workers.procs if proc is stalled)

    def dropped() -> bool:  # "its lease N was lost", or "stopped on a cancel after its lease
        # was lost": whichever the woken worker saw first, the renewal or the NOTIFY
        return any(f"job {job_id} (" in line and "lost" in line
                   for line in log.read_text(errors="replace").splitlines())

    wait_for(dropped, 20, "the woken worker to let go of the job")
    assert len(ops(q, job_id)) == seen
    assert {e.pid for e in ledger.entries(job_id)} == {stalled.pid}
    assert other.poll() is None and stalled.poll() is None
