"""Cancelling a running job (pgqueue.cancel on a leased job, and how its lease then ends),
against a real database: the request and its op, the NOTIFY and the renewal that tell the
worker, every end of such a lease (handler stop, ack too late, nack, reclaim, give-back,
parking), and the worker's handlers (plain, step, async) stopping on it in a Worker thread.

The process-level versions (a worker process alive, SIGKILLed, SIGSTOPped) are in
tests/acceptance/test_cancel.py; replication of the ops is in the random workloads of
test_oplog.py (replay) and test_replica.py (both replica paths).
"""
from __future__ import annotations

import asyncio
import datetime as dt
import logging
import threading
import time
from typing import Any

import pytest
from psycopg.types.json import Jsonb

import pgqueue
from pgqueue.client import lease, settle
from pgqueue.db import connection, queries
from pgqueue.runtime.capacity import Lane
from pgqueue.runtime.held import HeldLeases
from pgqueue.runtime.renewer import Renewer
from pgqueue.runtime.running import Held
from pgqueue.telemetry.outage import Outage
from tests.dbhelp import (
    force_reclaim,
    listening,
    on_citus,
    op_counts,
    state_snapshot,
    wait_for,
)
from tests.integration.runtime.test_worker import gone, op_names, ops, running

pytestmark = pytest.mark.layouts("single", "citus")


def leased(q: pgqueue.Queue, **enqueue: Any) -> pgqueue.Lease:
    job_id = q.enqueue(b"x", **enqueue)
    (got,) = q.lease(visibility_timeout=30)
    assert got.job_id == job_id
    return got


def last_op(q: pgqueue.Queue, job_id: int) -> pgqueue.Op:
    return ops(q, job_id)[-1]


# -- the request ---------------------------------------------------------------------------------


def test_cancel_of_a_leased_job_is_requested_once_and_notified(q: pgqueue.Queue,
                                                               dsn: str) -> None:
    held = leased(q)
    with connection.connect(dsn) as listener:
        listener.execute("LISTEN pgqueue_cancel")
        assert q.cancel(held.job_id) == "requested"
        notes = list(listener.notifies(timeout=5.0, stop_after=1))
        assert [(n.channel, n.payload) for n in notes] == [("pgqueue_cancel", str(held.lease_id))]
        info = q.job(held.job_id)
        assert info is not None and info.state == "leased" and info.lease_id == held.lease_id
        assert info.cancel_requested_at is not None
        op = last_op(q, held.job_id)
        assert (op.op, op.lease_id) == ("RequestCancel", held.lease_id)
        assert op.body["job_id"] == held.job_id and op.body["lease_id"] == held.lease_id
        # asked again: nothing changes, no op, no second notification
        before = state_snapshot(dsn), op_counts(dsn)
        assert q.cancel(held.job_id) == "requested"
        assert (state_snapshot(dsn), op_counts(dsn)) == before
        assert list(listener.notifies(timeout=0.3)) == []
    history = q.history(held.job_id)
    assert history is not None and history.cancel == "requested"
    assert history.cancel_requested_at == info.cancel_requested_at


def test_cancel_of_a_job_not_leased_removes_it_at_once(q: pgqueue.Queue) -> None:
    job_id = q.enqueue(b"x")
    assert q.cancel(job_id) == "cancelled"
    assert q.job(job_id) is None
    history = q.history(job_id)
    assert history is not None and history.state == "cancelled" and history.cancel is None


def test_a_bulk_cancel_says_which_leased_jobs_it_only_asked_to_stop(q: pgqueue.Queue,
                                                                   dsn: str) -> None:
    """A bulk cancel counts the leased jobs it asked to stop apart from those it removed; the
    previous release's SQL call (pgqueue.apply_to_jobs, kept for it) still lists only the
    refused, so it goes on counting a requested cancel as done."""
    waiting = q.enqueue(b"w", kind="bulk")
    held = leased(q, kind="bulk", priority=5)
    result = q.act_on_jobs("cancel", kind="bulk")
    assert (result.done, result.requested, result.refused) == (1, 1, 0)
    assert q.job(waiting) is None
    asked = q.job(held.job_id)
    assert asked is not None and asked.state == "leased" and asked.cancel_requested_at
    assert last_op(q, held.job_id).op == "RequestCancel"
    other = leased(q, kind="old", priority=5)
    with connection.connect(dsn) as conn:
        # (on Citus the call names the stream: without it, it is refused, as the verbs are)
        rows = conn.execute("SELECT job_id, refused FROM pgqueue.apply_to_jobs("
                            "'cancel', %s, NULL, %s, NULL, NULL)",
                            [[other.job_id, 10**12],
                             "default" if on_citus(conn) else None]).fetchall()
    assert rows == [(10**12, f"job {10**12} no longer matches the filter (it changed or is gone)")]
    asked = q.job(other.job_id)
    assert asked is not None and asked.cancel_requested_at is not None


@pytest.mark.parametrize(("job_id", "error"), [
    (0, ValueError), (-3, ValueError), ("7", TypeError), (True, TypeError),
    (987654321, pgqueue.JobNotFound)])
def test_cancel_refuses_bad_ids_writing_nothing(q: pgqueue.Queue, dsn: str, job_id: Any,
                                                error: type[Exception]) -> None:
    leased(q)
    before = state_snapshot(dsn), op_counts(dsn)
    with pytest.raises(error, match=r"job_id|987654321"):
        q.cancel(job_id)
    assert (state_snapshot(dsn), op_counts(dsn)) == before


def test_a_renewal_says_the_cancel_was_requested(q: pgqueue.Queue) -> None:
    held = leased(q)
    with q.connection() as conn:
        (before,) = lease.renew_leases(conn, [(held, None, None)]).values()
        assert before.cancel_requested is False
        q.cancel(held.job_id)
        (after,) = lease.renew_leases(conn, [(held, None, None)]).values()
        assert after.cancel_requested is True
    # the public renew is unchanged: the lease is still current
    assert q.renew(held) > before.expires_at - dt.timedelta(seconds=1)


# -- how such a lease ends -----------------------------------------------------------------------


def test_an_ack_after_the_request_is_too_late(q: pgqueue.Queue) -> None:
    held = leased(q)
    q.cancel(held.job_id)
    q.ack(held)
    assert q.job(held.job_id) is None
    history = q.history(held.job_id)
    assert history is not None
    assert (history.state, history.cancel) == ("acked", "too late")
    assert [o.op for o in history.ops] == ["Enqueue", "Lease", "RequestCancel", "Ack"]


def test_a_nack_after_the_request_ends_it_cancelled_never_retried(q: pgqueue.Queue) -> None:
    held = leased(q, max_attempts=1)  # a plain failure would make it dead
    q.cancel(held.job_id)
    assert q.nack(held, error="boom", retry_in=0) is False
    assert q.job(held.job_id) is None and q.dead_letters() == []
    op = last_op(q, held.job_id)
    assert op.op == "Cancel" and op.lease_id == held.lease_id
    assert (op.body["was"], op.body["by"], op.body["error"]) == ("leased", "nack", "boom")
    history = q.history(held.job_id)
    assert history is not None and (history.state, history.cancel) == ("cancelled", "cancelled")
    assert q.lease(visibility_timeout=30) == []


def test_a_reclaimed_lease_of_a_cancelled_job_ends_it_cancelled_charging_nothing(
        q: pgqueue.Queue, dsn: str) -> None:
    held = leased(q)
    q.cancel(held.job_id)
    assert force_reclaim(dsn) == 1
    assert q.job(held.job_id) is None
    op = last_op(q, held.job_id)
    assert (op.op, op.body["by"], op.lease_id) == ("Cancel", "reclaim", held.lease_id)
    assert "expired" in op.body["error"]
    assert q.lease(visibility_timeout=30) == []


def test_a_lease_given_back_after_the_request_ends_it_cancelled(q: pgqueue.Queue) -> None:
    held = leased(q)
    q.cancel(held.job_id)
    q.return_lease(held)
    assert q.job(held.job_id) is None
    assert last_op(q, held.job_id).body["by"] == "return"
    other = leased(q)
    with q.connection() as conn:  # the worker's drain learns which state each went to
        q.cancel(other.job_id)
        assert queries.fetch(conn, "return_leases", {
            "stream": other.stream, "job_ids": [other.job_id],
            "lease_ids": [other.lease_id]}) == [
            {"id": other.job_id, "state": "cancelled"}]


def test_a_re_sent_end_after_a_lost_reply_says_it_was_done(q: pgqueue.Queue) -> None:
    held = leased(q)
    q.cancel(held.job_id)
    with q.connection() as conn:
        assert settle.end_cancelled(conn, held) is True
        assert settle.end_cancelled(conn, held) is False  # the second call changes nothing
        assert queries.scalar(conn, "cancelled_before", {
            "stream": held.stream, "job_id": held.job_id, "lease_id": held.lease_id}) is True


def test_parking_a_cancelled_job_ends_it_cancelled(q: pgqueue.Queue) -> None:
    held = leased(q, kind="unknown")
    q.cancel(held.job_id)
    with q.connection() as conn:
        assert queries.scalar(conn, "mark_undecodable", {
            "stream": held.stream, "job_id": held.job_id, "lease_id": held.lease_id, "reason": "unknown_kind",
            "detail": Jsonb({})}) == "cancelled"
    assert q.job(held.job_id) is None
    assert (last_op(q, held.job_id).op, last_op(q, held.job_id).body["by"]) == ("Cancel", "undecodable")


def test_ending_a_job_as_cancelled_is_fenced_by_its_lease(q: pgqueue.Queue, dsn: str) -> None:
    held = leased(q)
    assert force_reclaim(dsn) == 1  # the lease expired: its job is pending again
    before = state_snapshot(dsn), op_counts(dsn)
    with q.connection() as conn:
        assert settle.end_cancelled(conn, held) is False
    assert (state_snapshot(dsn), op_counts(dsn)) == before
    (again,) = q.lease(visibility_timeout=30)
    with q.connection() as conn:
        assert settle.end_cancelled(conn, again) is True  # a handler raising Cancelled itself
    assert q.job(held.job_id) is None
    assert last_op(q, held.job_id).body["by"] == "handler"


def test_a_replay_reproduces_a_requested_cancel_and_its_end(q: pgqueue.Queue, dsn: str,
                                                            bed: Any) -> None:
    running_job = leased(q)
    q.cancel(running_job.job_id)  # still held: the copy must say so
    ended = leased(q)
    q.cancel(ended.job_id)
    q.nack(ended, error="x")
    target = bed.new_database()
    try:
        pgqueue.replay(dsn, target)
        assert state_snapshot(target) == state_snapshot(dsn)
        with pgqueue.Queue(target) as copy:
            info = copy.job(running_job.job_id)
            assert info is not None and info.cancel_requested_at is not None
            assert copy.job(ended.job_id) is None
    finally:
        bed.drop(target)


# -- the worker's side ---------------------------------------------------------------------------


def test_the_renewer_marks_a_held_job_cancelled(q: pgqueue.Queue, dsn: str) -> None:
    """The fallback when a NOTIFY is missed: the renewal round that already runs says so."""
    held = Held(leased(q), 30.0)
    table = HeldLeases(lanes=[Lane("all", 1)], prefetch=0, lease_loops=1,
                       db=lambda fn: q_call(q, fn), retry_db=lambda fn, what, **kw: q_call(q, fn),
                       freed=lambda: None, worker_id=lambda: 1)
    table.admit(table.reserve(), [held], lambda h: None)
    stopped = threading.Event()
    held.on_cancel = stopped.set
    renewer = Renewer(table, lambda fn: q_call(q, fn), lambda: 1,
                      Outage(logging.getLogger("test"), lambda: "test"))
    renewer.round()
    assert not held.cancelled.is_set()
    q.cancel(held.lease.job_id)
    renewer.round()
    assert held.cancelled.is_set() and stopped.is_set()
    with pytest.raises(pgqueue.Cancelled):
        held.check_cancelled()


def q_call(q: pgqueue.Queue, fn: Any) -> Any:
    with q.connection() as conn:
        return fn(conn)


def test_a_plain_handler_sees_cancelled_and_stops(dsn: str, q: pgqueue.Queue) -> None:
    app = pgqueue.App()
    started = threading.Event()
    saw: list[bool] = []

    @app.job("poll")
    def poll(ctx: pgqueue.JobContext) -> None:
        started.set()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if ctx.cancelled:
                saw.append(True)
                ctx.check_cancelled()
            time.sleep(0.01)

    job_id = q.enqueue(b"x", kind="poll")
    # a long renewal interval: the worker learns it by NOTIFY
    with running(app, dsn, renew_interval=30.0, visibility_timeout=90.0):
        wait_for(lambda: listening(dsn, "pgqueue_cancel"), 10, "the listener")
        assert started.wait(10)
        asked = time.monotonic()
        assert q.cancel(job_id) == "requested"
        wait_for(lambda: gone(q, job_id), 10, "the job to end")
        assert time.monotonic() - asked < 5.0, "not told at once"
    assert saw == [True]
    # the notification made the worker look at once: the job's row told the handler (a read,
    # so no Renew op between the request and the cancel)
    assert op_names(q, job_id) == ["Enqueue", "Lease", "RequestCancel", "Cancel"]
    assert last_op(q, job_id).body["by"] == "handler"
    history = q.history(job_id)
    assert history is not None and history.cancel == "cancelled"


def test_a_notification_alone_stops_nothing_and_writes_nothing(
        dsn: str, q: pgqueue.Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """Anyone may NOTIFY pgqueue_cancel: the worker looks up the job's row at once, which
    says no cancel was asked, so its handler runs on. The look is a read: a flood of
    notifications writes no op (each once made a renewal, 1,930 Renew ops in 10 s)."""
    from pgqueue.client import lease

    looks: list[int] = []
    real = lease.cancel_requested

    def counted(conn: Any, leases: Any) -> set[int]:
        looks.append(len(leases))
        return real(conn, leases)

    monkeypatch.setattr(lease, "cancel_requested", counted)
    app = pgqueue.App()
    release = threading.Event()
    saw: list[bool] = []

    @app.job("work")
    def work(ctx: pgqueue.JobContext) -> None:
        assert release.wait(20)
        saw.append(ctx.cancelled)

    job_id = q.enqueue(b"x", kind="work")
    with running(app, dsn, renew_interval=30.0, visibility_timeout=90.0):
        wait_for(lambda: listening(dsn, "pgqueue_cancel"), 10, "the listener")
        def leased_info() -> pgqueue.JobInfo | None:
            j = q.job(job_id)
            return j if j is not None and j.state == "leased" else None

        info = wait_for(leased_info, 10, "the lease")
        assert info.lease_id is not None
        with connection.connect(dsn) as conn:
            for _ in range(50):
                conn.execute("SELECT pg_notify('pgqueue_cancel', %s)", [str(info.lease_id)])
        wait_for(lambda: looks, 10, "the look it caused")
        release.set()
        wait_for(lambda: gone(q, job_id), 10, "the ack")
    assert saw == [False]
    assert op_names(q, job_id) == ["Enqueue", "Lease", "Ack"]


def test_a_step_job_stops_at_advance_and_runs_no_further_step(dsn: str,
                                                               q: pgqueue.Queue) -> None:
    app = pgqueue.App()
    started = threading.Event()
    ran: list[str] = []
    swallowed: list[str] = []

    job = app.step_job("crawl")

    @job.step("crawl")
    def crawl(ctx: pgqueue.StepContext) -> None:
        ran.append("crawl")
        started.set()
        for i in range(2000):
            try:
                ctx.advance(i)
            except Exception as exc:  # a broad except does not swallow the cancel
                swallowed.append(type(exc).__name__)
            time.sleep(0.01)

    @job.step("store")
    def store(ctx: pgqueue.StepContext) -> None:
        ran.append("store")

    job_id = q.enqueue(b"x", kind="crawl")
    with running(app, dsn, renew_interval=30.0, visibility_timeout=90.0):
        wait_for(lambda: listening(dsn, "pgqueue_cancel"), 10, "the listener")
        assert started.wait(10)
        q.cancel(job_id)
        wait_for(lambda: gone(q, job_id), 10, "the job to end")
    assert ran == ["crawl"] and swallowed == []
    assert last_op(q, job_id).op == "Cancel"


def test_a_step_that_returns_after_the_request_stops_at_the_boundary(dsn: str,
                                                                      q: pgqueue.Queue) -> None:
    app = pgqueue.App()
    ran: list[str] = []

    job = app.step_job("two")

    @job.step("first")
    def first(ctx: pgqueue.StepContext) -> None:
        ran.append("first")
        wait_for(lambda: ctx.cancelled, 10, "the cancel to reach the step")  # then returns

    @job.step("second")
    def second(ctx: pgqueue.StepContext) -> None:
        ran.append("second")

    job_id = q.enqueue(b"x", kind="two")
    with running(app, dsn, renew_interval=30.0, visibility_timeout=90.0):
        wait_for(lambda: listening(dsn, "pgqueue_cancel"), 10, "the listener")
        wait_for(lambda: ran == ["first"], 10, "the first step")
        q.cancel(job_id)
        wait_for(lambda: gone(q, job_id), 10, "the job to end")
    assert ran == ["first"]
    assert (last_op(q, job_id).op, last_op(q, job_id).body["by"]) == ("Cancel", "handler")


def test_a_handler_that_finishes_before_it_notices_is_acked(dsn: str, q: pgqueue.Queue) -> None:
    app = pgqueue.App()
    release = threading.Event()

    @app.job("deaf")
    def deaf(ctx: pgqueue.JobContext) -> None:
        assert release.wait(20)

    job_id = q.enqueue(b"x", kind="deaf")
    with running(app, dsn, renew_interval=30.0, visibility_timeout=90.0):
        wait_for(lambda: listening(dsn, "pgqueue_cancel"), 10, "the listener")
        wait_for(lambda: (j := q.job(job_id)) is not None and j.state == "leased", 10, "the lease")
        q.cancel(job_id)
        release.set()
        wait_for(lambda: gone(q, job_id), 10, "the ack")
    history = q.history(job_id)
    assert history is not None and (history.state, history.cancel) == ("acked", "too late")


def test_a_failure_after_the_request_ends_it_cancelled(dsn: str, q: pgqueue.Queue) -> None:
    app = pgqueue.App()
    go = threading.Event()

    @app.job("fails")
    def fails(ctx: pgqueue.JobContext) -> None:
        assert go.wait(20)
        raise RuntimeError("gave up")

    job_id = q.enqueue(b"x", kind="fails", max_attempts=5)
    with running(app, dsn, renew_interval=30.0, visibility_timeout=90.0):
        wait_for(lambda: listening(dsn, "pgqueue_cancel"), 10, "the listener")
        wait_for(lambda: (j := q.job(job_id)) is not None and j.state == "leased", 10, "the lease")
        q.cancel(job_id)
        go.set()
        wait_for(lambda: gone(q, job_id), 10, "the end")
    op = last_op(q, job_id)
    assert (op.op, op.body["by"]) == ("Cancel", "nack") and "gave up" in op.body["error"]


def test_an_async_handler_is_cancelled_at_once(dsn: str, q: pgqueue.Queue) -> None:
    app = pgqueue.App()
    started = threading.Event()
    seen: list[str] = []

    @app.job("waits")
    async def waits(ctx: pgqueue.JobContext) -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    @app.job("after")
    async def after(ctx: pgqueue.JobContext) -> None:
        await asyncio.sleep(0)
        seen.append("after")

    job_id = q.enqueue(b"x", kind="waits")
    with running(app, dsn, renew_interval=30.0, visibility_timeout=90.0,
                 async_concurrency=1):
        wait_for(lambda: listening(dsn, "pgqueue_cancel"), 10, "the listener")
        assert started.wait(10)
        asked = time.monotonic()
        q.cancel(job_id)
        wait_for(lambda: gone(q, job_id), 10, "the job to end")
        assert time.monotonic() - asked < 5.0
        # the runner goes on with the next job (its task was cancelled, not ended)
        next_id = q.enqueue(b"y", kind="after")
        wait_for(lambda: gone(q, next_id), 10, "the next job")
    assert seen == ["cancelled", "after"]
    assert (last_op(q, job_id).op, last_op(q, job_id).body["by"]) == ("Cancel", "handler")
    assert op_names(q, next_id)[-1] == "Ack"


def test_an_async_step_job_stops_at_advance(dsn: str, q: pgqueue.Queue) -> None:
    app = pgqueue.App()
    ran: list[str] = []

    job = app.step_job("aloop")

    @job.step("loop")
    async def loop(ctx: pgqueue.AsyncStepContext) -> None:
        ran.append("loop")
        for i in range(2000):
            ctx.advance(i)
            await asyncio.sleep(0.01)

    @job.step("tail")
    async def tail(ctx: pgqueue.AsyncStepContext) -> None:
        ran.append("tail")

    job_id = q.enqueue(b"x", kind="aloop")
    with running(app, dsn, renew_interval=0.2, visibility_timeout=30.0):
        wait_for(lambda: ran == ["loop"], 10, "the step to start")
        q.cancel(job_id)
        wait_for(lambda: gone(q, job_id), 10, "the job to end")
    assert ran == ["loop"]
    assert last_op(q, job_id).op == "Cancel"


def _cancel_before_write(monkeypatch: pytest.MonkeyPatch, q: pgqueue.Queue, job: list[int],
                         when: Any) -> None:
    """Cancel the job (a real cancel, through the queue) just before the worker's checkpoint
    write whose checkpoint matches `when`: that write is the one to bring the news."""
    from pgqueue.runtime import settler as settler_module

    write = settler_module.JobSettler.write_checkpoint
    done: list[bool] = []

    def cancel_then_write(self: Any, held: Held) -> None:
        if not done and when(held.checkpoint):
            done.append(True)
            q.cancel(job[0])
        write(self, held)

    monkeypatch.setattr(settler_module.JobSettler, "write_checkpoint", cancel_then_write)


def test_a_boundary_write_that_brings_the_cancel_runs_no_further_step(
        dsn: str, q: pgqueue.Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    app = pgqueue.App()
    ran: list[str] = []
    job = app.step_job("pair")

    @job.step("a")
    def a(ctx: pgqueue.StepContext) -> None:
        ran.append("a")

    @job.step("b")
    def b(ctx: pgqueue.StepContext) -> None:
        ran.append("b")

    box: list[int] = []
    _cancel_before_write(monkeypatch, q, box, lambda cp: cp.cursor_step == "b")
    box.append(q.enqueue(b"x", kind="pair"))
    with running(app, dsn, renew_interval=30.0, visibility_timeout=90.0):
        wait_for(lambda: listening(dsn, "pgqueue_cancel"), 10, "the listener")
        wait_for(lambda: gone(q, box[0]), 10, "the job to end")
    assert ran == ["a"]
    history = q.history(box[0])
    assert history is not None and history.cancel == "cancelled"


def test_an_async_step_job_whose_steps_all_ran_is_acked_however_late_the_cancel(
        dsn: str, q: pgqueue.Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    app = pgqueue.App()
    ran: list[str] = []
    job = app.step_job("apair")

    @job.step("a")
    async def a(ctx: pgqueue.AsyncStepContext) -> None:
        ran.append("a")

    @job.step("b")
    async def b(ctx: pgqueue.AsyncStepContext) -> None:
        ran.append("b")

    box: list[int] = []  # cancelled as the last write (every step done) is about to go out
    _cancel_before_write(monkeypatch, q, box,
                         lambda cp: cp.last_completed_step == "b" and cp.cursor_step is None)
    box.append(q.enqueue(b"x", kind="apair"))
    with running(app, dsn, renew_interval=30.0, visibility_timeout=90.0):
        wait_for(lambda: listening(dsn, "pgqueue_cancel"), 10, "the listener")
        wait_for(lambda: gone(q, box[0]), 10, "the job to end")
    assert ran == ["a", "b"]
    history = q.history(box[0])
    assert history is not None and (history.state, history.cancel) == ("acked", "too late")


# -- a rate-limited kind's jobs leased ahead count when they start -------------------------------


def test_a_rate_limited_job_leased_ahead_counts_when_it_starts(q: pgqueue.Queue) -> None:
    q.configure_kind("api", rate_limit=(3, 60))
    q.enqueue_many([pgqueue.NewJob(b"x", kind="api") for _ in range(6)])
    with q.connection() as conn:
        def start(held: pgqueue.Lease) -> Any:
            return queries.scalar(conn, "start_rated", {"stream": held.stream, "job_id": held.job_id,
                                                         "lease_id": held.lease_id})

        got = lease.lease(conn, "default", 2, 30.0, 0, 0, start=1)
        # the first starts at once (counted now), the second is leased ahead (counted later)
        assert [(g.started, g.rate_at_start) for g in got] == [(True, False), (False, True)]
        assert start(got[1]) == "started"
        assert q.job(got[1].job_id) is not None
        assert last_op(q, got[1].job_id).body["started"] is True
        (ahead,) = lease.lease(conn, "default", 1, 30.0, 0, 0, start=0)  # room for one more
        assert ahead.rate_at_start
        (now,) = lease.lease(conn, "default", 1, 30.0, 0, 0, start=1)  # ...taken at once
        assert not now.rate_at_start
        assert lease.lease(conn, "default", 4, 30.0, 0, 0, start=1) == []  # the window is full
        assert start(ahead) == "deferred"  # so the one leased ahead waits, charged nothing
    info = q.job(ahead.job_id)
    assert info is not None and (info.state, info.attempts) == ("scheduled", 0)
    assert info.not_before is not None and info.enqueued_at is not None
    assert info.not_before > info.enqueued_at
    assert last_op(q, ahead.job_id).op == "ReturnLease"


def test_a_rate_limited_kind_is_not_held_back_by_a_workers_prefetched_backlog(
        dsn: str, q: pgqueue.Queue) -> None:
    """A worker whose handlers are busy with jobs leased ahead still takes a high-priority job
    of a rate-limited kind at its next lease (leased ahead too, counted when it starts)."""
    q.configure_kind("rated", rate_limit=(1000, 1.0))
    app = pgqueue.App()

    @app.job("fast")
    def fast(ctx: pgqueue.JobContext) -> None:
        time.sleep(0.005)

    @app.job("rated")
    def rated(ctx: pgqueue.JobContext) -> None:
        pass

    backlog = 1500
    q.enqueue_many([pgqueue.NewJob(b"f", kind="fast") for _ in range(backlog)])
    with running(app, dsn, concurrency=2, prefetch=20, renew_interval=5.0,
                 visibility_timeout=30.0) as worker:
        wait_for(lambda: worker.held_count >= 20, 10, "the worker to lease ahead")
        job_id = q.enqueue(b"r", kind="rated", priority=200)
        wait_for(lambda: gone(q, job_id), 30, "the rate-limited job to run")
        left = q.stats()
    fast_left = sum(s.count for s in left if s.state in ("pending", "leased"))
    # it ran long before the backlog drained (held back, it would find none left): a quarter
    # of it at least, as the CI run under load on the Citus bed left 619 of 1,500 (more than
    # half in a quiet run)
    assert fast_left > backlog // 4, f"it waited for the backlog: {fast_left} left"
