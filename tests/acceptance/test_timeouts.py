"""Per-job time limits, in real worker processes (tests/acceptance/timeout_app.py): a plain
handler is told at its limit and fails with JobTimeout; one that does not stop is given up on
after the grace period (its job retried by its policy, a new thread in its place, the drain not
waiting for it); an async handler is cancelled; a step's own limit fails only that step, and
the completed steps stay completed; a limit given at enqueue overrides the handler's."""
from __future__ import annotations

import functools
import signal
import time

import pgqueue
from tests.acceptance.test_worker import Ledger, Workers, ops
from tests.dbhelp import wait_for

APP = "tests.acceptance.timeout_app:app"


def dead(q: pgqueue.Queue, job_id: int) -> pgqueue.JobInfo | None:
    info = q.job(job_id)
    return info if info is not None and info.state == "dead" else None


def seconds_between(ledger: Ledger, job_id: int, first: str, then: str) -> float:
    (a,) = ledger.entries(job_id, first)
    (b,) = ledger.entries(job_id, then)
    return (b.at - a.at).total_seconds()


def test_a_plain_handler_is_told_at_its_limit_and_an_enqueued_limit_overrides_the_handlers(
        dsn: str, workers: Workers, ledger: Ledger) -> None:
    with pgqueue.Queue(dsn) as q:
        own = q.enqueue({"seconds": 30}, kind="cooperative")
        shorter = q.enqueue({"seconds": 30}, kind="cooperative", timeout=0.2)
        workers.start(app=APP, concurrency=2)
        infos = [wait_for(functools.partial(dead, q, j), 20, f"job {j} to fail")
                 for j in (own, shorter)]
    for info, limit in zip(infos, ("0.5", "0.2"), strict=True):
        assert info.error_summary == f"JobTimeout: job {info.job_id} ran past its time limit of {limit} s"
        assert ledger.count(info.job_id, "coop:told") == 1
        assert ledger.count(info.job_id, "coop:end") == 0
        assert info.last_error is not None and "in cooperative" in info.last_error
        assert "ctx.check_cancelled()" in info.last_error  # where it was told
        assert "/pgqueue/runtime/handlers.py" not in info.last_error
    assert infos[1].timeout == 0.2 and infos[0].timeout is None
    # told at the limit, not after the 30 s the handler would have taken
    assert seconds_between(ledger, own, "coop:start", "coop:told") < 10


def test_a_handler_that_does_not_stop_is_given_up_on_after_the_grace_period(
        dsn: str, workers: Workers, ledger: Ledger) -> None:
    with pgqueue.Queue(dsn) as q:
        q.configure_stream(retry_base=0.05)
        job_id = q.enqueue({"seconds": 20}, kind="stuck")
        proc = workers.start(app=APP, concurrency=1, grace_period=1.0)
        wait_for(lambda: ledger.count(job_id, "stuck:start") == 1, 20, "the job to start")
        # the one handler thread is stuck in its sleep: a new one runs the next job
        wait_for(lambda: ledger.count(job_id, "stuck:start") == 2,
                 20, "the job's retry (attempt 2), after the worker gave up on attempt 1")
        noted = q.enqueue({}, kind="note")
        wait_for(lambda: ledger.count(noted, "note") == 1, 20, "a job after the stuck ones")
        info = wait_for(lambda: dead(q, job_id), 20, "the job to die after attempt 2")
        assert ledger.count(job_id, "stuck:end") == 0  # both handlers are still sleeping
        assert info.attempts == 2
        assert info.error_summary == (
            f"JobTimeout: job {job_id} ran past its time limit of 0.3 s and did not stop within "
            f"the worker's grace period (1 s): the worker stopped waiting for it")
        assert info.last_error is not None
        assert info.last_error.startswith("Stack of the handler when the worker stopped waiting")
        assert "in stuck" in info.last_error and "time.sleep" in info.last_error
        assert [o.op for o in ops(q, job_id)].count("Ack") == 0
        # the drain does not wait for the threads it gave up on
        began = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        assert time.monotonic() - began < 10  # their sleep has more than 10 s to go
    assert ledger.count(job_id, "stuck:end") == 0
    assert "the worker stopped waiting for it and a new handler thread took its place" \
        in workers.logs()


def test_an_async_handler_is_cancelled_at_its_limit(dsn: str, workers: Workers,
                                                    ledger: Ledger) -> None:
    with pgqueue.Queue(dsn) as q:
        job_id = q.enqueue({}, kind="slow")
        workers.start(app=APP, concurrency=1)
        info = wait_for(lambda: dead(q, job_id), 20, "the job to fail")
    assert info.error_summary == f"JobTimeout: job {job_id} ran past its time limit of 0.5 s"
    assert ledger.count(job_id, "slow:cancelled") == 1
    assert info.last_error is not None and "in slow" in info.last_error
    assert "CancelledError" in info.last_error  # where it was awaiting when cancelled
    assert seconds_between(ledger, job_id, "slow:start", "slow:cancelled") < 10


def test_a_steps_own_limit_fails_only_that_step_and_completed_steps_stay_completed(
        dsn: str, workers: Workers, ledger: Ledger) -> None:
    with pgqueue.Queue(dsn) as q:
        q.configure_stream(retry_base=0.05)
        job_id = q.enqueue({}, kind="stepped")
        workers.start(app=APP, concurrency=1)
        wait_for(lambda: q.job(job_id) is None, 30, "the job to finish on its retry")
        history = ops(q, job_id)
    (nack,) = [o for o in history if o.op == "Nack"]
    assert nack.body["error_summary"] == (
        f"JobTimeout: job {job_id} ran past the time limit of its step 'two' (0.5 s)")
    assert history[-1].op == "Ack"
    assert ledger.count(job_id, "one") == 1  # completed: never run again
    assert [e.item for e in ledger.entries(job_id, "two:start")] == [0, 1]
    assert [e.item for e in ledger.entries(job_id, "two:end")] == [1]
