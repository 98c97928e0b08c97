"""The worker where it used to go quiet or die (issue 11): what it logs when a job fails, is
lost or is undecodable; background threads that survive an unexpected error; acks in flight
that keep their leases; and a job the shutdown drain and a starting handler both wanted.

Faults are injected by monkeypatching one call (a renewal round, a lease call, the acker's
statement, a handler thread's start) and the evidence is the op log and the log records.
"""
from __future__ import annotations

import datetime as dt
import logging
import re
import threading
import time
from typing import Any

import pytest

import pgqueue
from pgqueue.client import lease, reclaim, settle
from pgqueue.runtime.handlers import HandlerThreads
from pgqueue.runtime.held import HeldLeases
from pgqueue.runtime.leasing import LeaseLoops
from pgqueue.runtime.renewer import Renewer
from pgqueue.runtime.running import Held
from tests.dbhelp import force_reclaim, pinned, wait_for
from tests.integration.runtime.test_worker import gone, job, op_names, running, state

WORKER_LOG = "pgqueue.worker"


def lines(caplog: pytest.LogCaptureFixture, *needles: str,
          level: int = logging.WARNING) -> list[logging.LogRecord]:
    """The worker's records at `level` whose message contains every needle."""
    return [r for r in caplog.records
            if r.name == WORKER_LOG and r.levelno == level
            and all(n in r.getMessage() for n in needles)]


# -- 1. what a failure, a lost lease and an undecodable job log ---------------------------------


def test_a_failed_job_is_logged_with_kind_attempt_error_and_when_it_retries(
        dsn: str, q: pgqueue.Queue, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=WORKER_LOG)
    q.configure_stream(retry_base=2.0)  # first retry after 4 s +-25 %
    app = pgqueue.App()

    @app.job("flaky")
    def flaky(job: pgqueue.JobContext) -> None:
        raise RuntimeError("disk on fire 42 at postgresql://bob:s3cret@db.example/app "
                           "(password=hunter2)\n" + "x" * 5000)

    job_id = q.enqueue({"card": "PAYLOAD-SECRET-4111"}, kind="flaky")
    with running(app, dsn):
        (record,) = wait_for(lambda: lines(caplog, f"job {job_id} "), 10, "the failure's log line")
    message = record.getMessage()
    assert f"job {job_id} (kind flaky, attempt 1 of 25)" in message
    assert "RuntimeError: disk on fire 42" in message
    match = re.search(r"retry at (\S+) \(in (\d+\.\d)s\)", message)
    assert match, message
    assert 2.5 <= float(match[2]) <= 5.5, message
    assert dt.datetime.fromisoformat(match[1]) == job(q, job_id).not_before
    for secret in ("s3cret", "hunter2", "PAYLOAD-SECRET", "card"):
        assert secret not in message
    assert len(message) < 600 and "\n" not in message


def test_a_job_that_goes_dead_is_logged_as_dead_with_the_limit_that_applied(
        dsn: str, q: pgqueue.Queue, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=WORKER_LOG)
    q.configure_stream(retry_base=60.0)
    app = pgqueue.App()

    @app.job("doomed", max_attempts=1)
    def doomed(job: pgqueue.JobContext) -> None:
        raise ValueError("no such customer")

    job_id = q.enqueue("x", kind="doomed")  # no limit of its own: the handler's applies
    own = q.enqueue("y", kind="doomed", max_attempts=5)  # its own limit wins
    with running(app, dsn):
        (record,) = wait_for(lambda: lines(caplog, f"job {job_id} "), 10, "the failure's log line")
        (other,) = wait_for(lambda: lines(caplog, f"job {own} "), 10, "the other failure's line")
    message = record.getMessage()
    assert state(q, job_id) == "dead"
    assert f"job {job_id} (kind doomed, attempt 1 of 1)" in message
    assert "ValueError: no such customer" in message
    assert "dead" in message and "retry" not in message
    assert f"job {own} (kind doomed, attempt 1 of 5)" in other.getMessage()
    assert "retry at" in other.getMessage() and state(q, own) == "scheduled"


def test_a_lost_lease_is_logged_with_kind_and_attempt(
        dsn: str, q: pgqueue.Queue, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=WORKER_LOG)
    app = pgqueue.App()
    entered = threading.Event()

    @app.job("slow")
    def slow(job: pgqueue.JobContext) -> None:
        if job.attempts == 0:
            entered.set()
            wait_for(lambda: job.lease_lost, 10, "a renewal to find the lease gone")

    job_id = q.enqueue("x", kind="slow")
    with running(app, dsn, visibility_timeout=5, renew_interval=0.2, maintenance=False):
        assert entered.wait(10)
        wait_for(lambda: force_reclaim(dsn) == 1, 5, "the reclaim behind the worker's back")
        wait_for(lambda: gone(q, job_id), 10, "the job to finish on a new lease")
    assert lines(caplog, f"job {job_id} (kind slow, attempt 1 of 25)", "lost")


def test_an_undecodable_job_is_logged_with_kind_attempt_and_reason(
        dsn: str, q: pgqueue.Queue, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=WORKER_LOG)
    app = pgqueue.App()
    app.job("known")(lambda job: None)
    job_id = q.enqueue("?", kind="mystery")
    with running(app, dsn):
        wait_for(lambda: state(q, job_id) == "undecodable", 10, "the job to be parked")
    assert lines(caplog, f"job {job_id} (kind mystery, attempt 1 of 25)", "undecodable",
                 "unknown_kind")


def test_a_nack_that_commits_while_a_renewal_waits_for_it_is_no_lost_lease(
        dsn: str, q: pgqueue.Queue, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The race behind false "lease was lost" lines: the renewer's round takes its snapshot of
    the held jobs, a failing job's nack then commits (under the job's write lock, which the
    round waits for), and the round renews a lease the nack has ended. Forced here: the
    round's snapshot waits for the nack. The failure is logged as retried, never as lost."""
    from pgqueue.runtime.settler import JobSettler

    caplog.set_level(logging.WARNING, logger=WORKER_LOG)
    q.configure_stream(retry_base=60.0)
    snapped, nacked = threading.Event(), threading.Event()
    watched: list[int] = []
    real_snapshot, real_nack = HeldLeases.snapshot, JobSettler.nack

    def snapshot(self: HeldLeases) -> list[Held]:
        got = real_snapshot(self)
        if (threading.current_thread().name == "pgqueue-renewer" and not snapped.is_set()
                and any(h.lease.job_id in watched for h in got)):
            snapped.set()
            nacked.wait(10)  # the nack commits between the snapshot and the round's locks
        return got

    def nack(self: JobSettler, held: Held, error: Any, max_attempts: int | None) -> Any:
        snapped.wait(10)
        try:
            return real_nack(self, held, error, max_attempts)
        finally:
            nacked.set()

    monkeypatch.setattr(HeldLeases, "snapshot", snapshot)
    monkeypatch.setattr(JobSettler, "nack", nack)
    app = pgqueue.App()

    @app.job("fails")
    def fails(job: pgqueue.JobContext) -> None:
        raise RuntimeError("failing on purpose")

    watched.append(q.enqueue("x", kind="fails"))
    with running(app, dsn, renew_interval=0.2):
        wait_for(lambda: lines(caplog, f"job {watched[0]} ", "failed"), 15, "the failure's line")
        wait_for(lambda: snapped.is_set() and nacked.is_set(), 15, "the race to be played")
        assert state(q, watched[0]) == "scheduled"  # retried, in a minute
    assert snapped.is_set() and nacked.is_set()
    assert not lines(caplog, "lost"), [r.getMessage() for r in lines(caplog, "lost")]
    assert op_names(q, watched[0]) == ["Enqueue", "Lease", "Nack"]


# -- 2. background threads survive an unexpected error ------------------------------------------


def test_the_renewer_logs_an_unexpected_error_and_keeps_renewing(
        dsn: str, q: pgqueue.Queue, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: the renewer thread died on a non-PgQueueError and every lease then expired."""
    caplog.set_level(logging.WARNING, logger=WORKER_LOG)
    renew_round = Renewer.round
    broken = threading.Event()

    def break_once(self: Renewer) -> None:
        if self._leases.snapshot() and not broken.is_set():
            broken.set()
            raise RuntimeError("a bug in the renewal round")
        renew_round(self)

    monkeypatch.setattr(Renewer, "round", break_once)
    app = pgqueue.App()
    app.job("long")(lambda job: time.sleep(3.0))
    job_id = q.enqueue("x", kind="long")
    with running(app, dsn, visibility_timeout=1.0, renew_interval=0.25, maintenance_interval=0.1):
        wait_for(lambda: gone(q, job_id), 10, "the ack")
    assert broken.is_set()
    names = op_names(q, job_id)
    assert "Reclaim" not in names and names.count("Lease") == 1 and names[-1] == "Ack", names
    assert names.count("Renew") >= 6
    (failed,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert failed.threadName == "pgqueue-renewer" and failed.exc_info is not None
    assert "a bug in the renewal round" in str(failed.exc_info[1])


def test_the_main_lease_loop_logs_an_unexpected_error_and_keeps_leasing(
        dsn: str, q: pgqueue.Queue, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: the error left run() and the worker stopped."""
    caplog.set_level(logging.WARNING, logger=WORKER_LOG)
    lease_call = lease.lease
    broken = threading.Event()

    def break_once(*args: Any, **kwargs: Any) -> list[pgqueue.Lease]:
        if not broken.is_set():
            broken.set()
            raise RuntimeError("a bug in the lease call")
        return lease_call(*args, **kwargs)

    monkeypatch.setattr(lease, "lease", break_once)
    app = pgqueue.App()
    done = threading.Event()
    app.job("ping")(lambda job: done.set())
    with running(app, dsn, prefetch=0, maintenance=False) as worker:  # one lease loop
        assert worker.lease_loops == 1
        wait_for(broken.is_set, 10, "the broken lease call")
        q.enqueue("x", kind="ping")
        assert done.wait(10), "the lease loop did not go on"
    (failed,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "lease loop" in failed.getMessage() and failed.exc_info is not None


class Crash(BaseException):
    """Something no loop catches (as KeyboardInterrupt would be)."""


def test_a_main_lease_loop_that_raises_does_not_leave_the_drain_waiting_forever(
        dsn: str, q: pgqueue.Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: with two lease loops, the drain joined the second one, which only stops once
    `_stopping` is set, and nothing set it."""
    lease_loop = LeaseLoops.loop
    leased = threading.Event()

    def crash_the_main_loop(self: LeaseLoops, turn: int = 0) -> None:
        if turn == 0:
            assert leased.wait(10)
            raise Crash
        lease_loop(self, turn)

    monkeypatch.setattr(LeaseLoops, "loop", crash_the_main_loop)
    app = pgqueue.App()

    @app.job("slow")
    def slow(job: pgqueue.JobContext) -> None:
        leased.set()
        time.sleep(0.05)

    ids = q.enqueue_many([pgqueue.NewJob(b"x", kind="slow") for _ in range(50)])
    worker = pgqueue.Worker(app, dsn, concurrency=4, prefetch=300, poll_interval=0.05,
                            maintenance=False, grace_period=1.0)
    assert worker.lease_loops == 2
    raised: list[BaseException] = []

    def main() -> None:
        try:
            worker.run()
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    thread.join(20)
    assert not thread.is_alive(), "the drain is still waiting for the second lease loop"
    assert len(raised) == 1 and isinstance(raised[0], Crash)
    for job_id in ids:  # acked, or given back without a spent attempt
        info = q.job(job_id)
        assert info is None or (info.state, info.attempts) == ("pending", 0), info


# -- 3. acks in flight keep their leases ------------------------------------------------------


def test_a_finished_job_waiting_for_a_slow_ack_keeps_its_lease(
        dsn: str, q: pgqueue.Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: the renewer skipped jobs handed to the acker, so a stuck acker let them expire,
    be reclaimed and charged a crash although they had finished."""
    ack_many = settle.ack_many
    acking, unblock = threading.Event(), threading.Event()

    def stuck(conn: Any, leases: Any, **kwargs: Any) -> set[int]:
        acking.set()
        assert unblock.wait(20)
        return ack_many(conn, leases, **kwargs)

    monkeypatch.setattr(settle, "ack_many", stuck)
    app = pgqueue.App()
    app.job("quick")(lambda job: None)
    job_id = q.enqueue("x", kind="quick")
    try:
        with running(app, dsn, visibility_timeout=1.0, renew_interval=0.25,
                     maintenance_interval=0.1):
            assert acking.wait(10)
            ran_out = job(q, job_id).lease_expires_at  # unless renewed since the ack began
            assert ran_out is not None
            renewed = op_names(q, job_id).count("Renew")
            wait_for(lambda: op_names(q, job_id).count("Renew") >= renewed + 2, 10,
                     "two renewals of the lease while its ack is stuck")
            # the clock moved past that expiry: nothing for a reclaim to take
            with pinned(dsn, ran_out + dt.timedelta(milliseconds=1)) as conn:
                assert reclaim.reclaim_expired(conn) == 0
            assert state(q, job_id) == "leased"
            unblock.set()
            wait_for(lambda: gone(q, job_id), 10, "the ack")
    finally:
        unblock.set()
    names = op_names(q, job_id)
    assert "Reclaim" not in names, names
    assert names.count("Lease") == 1 and names.count("Ack") == 1 and names[-1] == "Ack", names
    assert names.count("Renew") >= 2


# -- 4. the drain and a starting handler cannot both own a job --------------------------------


@pytest.mark.parametrize("drain_first", [True, False],
                         ids=["the drain returns it first", "the handler starts it first"])
def test_a_job_is_started_by_its_handler_or_returned_by_the_drain_never_both(
        dsn: str, q: pgqueue.Queue, monkeypatch: pytest.MonkeyPatch, drain_first: bool) -> None:
    """A handler thread is paused after it took the job off the work queue (and saw no
    shutdown) but before it starts it, while the drain runs. Before: the drain gave the job
    back after the grace period and the handler then ran it anyway."""
    execute, finish = HandlerThreads._execute, HandlerThreads.finish
    give_back = HeldLeases.give_back
    taken, finishing, returned = threading.Event(), threading.Event(), threading.Event()

    def paused(self: HandlerThreads, held: Held) -> None:
        taken.set()
        if drain_first:
            returned.wait(10)
        else:  # the drain is under way, waiting for busy handlers (well within its grace)
            finishing.wait(10)
        execute(self, held)

    def finish_and_tell(self: HandlerThreads) -> None:
        finish(self)
        finishing.set()

    def give_back_and_tell(self: HeldLeases, remaining: Any) -> None:
        give_back(self, remaining)
        returned.set()

    monkeypatch.setattr(HandlerThreads, "_execute", paused)
    monkeypatch.setattr(HandlerThreads, "finish", finish_and_tell)
    monkeypatch.setattr(HeldLeases, "give_back", give_back_and_tell)
    app = pgqueue.App()
    ran: list[int] = []
    app.job("once")(lambda job: ran.append(job.job_id))
    job_id = q.enqueue("x", kind="once")
    worker = pgqueue.Worker(app, dsn, concurrency=1, poll_interval=0.05, maintenance=False,
                            grace_period=0.2 if drain_first else 5.0)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        assert taken.wait(10)
        worker.stop()
        thread.join(15)
        assert not thread.is_alive()
        wait_for(lambda: not worker._handlers.busy(), 15, "the handler thread to finish")
    finally:
        returned.set()
        worker.stop()
    names = [n for n in op_names(q, job_id) if n != "Renew"]  # the give-back flushes first
    if drain_first:
        assert ran == [] and names == ["Enqueue", "Lease", "ReturnLease"], (ran, names)
        assert (job(q, job_id).state, job(q, job_id).attempts) == ("pending", 0)
    else:
        assert ran == [job_id] and names == ["Enqueue", "Lease", "Ack"], (ran, names)


def test_a_handler_reading_an_empty_payload_as_json_is_told_so(
        dsn: str, q: pgqueue.Queue, caplog: pytest.LogCaptureFixture) -> None:
    """job.json() on a job enqueued with no payload fails with an error that says the payload
    is empty (not json's "Expecting value: line 1 column 1")."""
    caplog.set_level(logging.WARNING, logger=WORKER_LOG)
    app = pgqueue.App()

    @app.job("report", max_attempts=1)
    def report(job: pgqueue.JobContext) -> None:
        job.json()

    job_id = q.enqueue(b"", kind="report")
    with running(app, dsn):
        wait_for(lambda: state(q, job_id) == "dead", 10, "the job to fail")
    dead = {j.job_id: j for j in q.dead_letters()}[job_id]
    assert "has an empty payload, which is not JSON" in (dead.error_summary or ""), dead
