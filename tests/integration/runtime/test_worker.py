"""pgqueue.Worker in a thread against a real database: settling handler outcomes, payload
versions and step-list changes (undecodable), lost leases, LISTEN wakeups, maintenance
inside workers, and the worker registry.

A crash is simulated without a process: lease the job with the Queue API, write the dead
worker's checkpoint with a renewal, and reclaim it as if the clock had jumped far ahead.
The process-level versions (SIGKILL, SIGTERM, a Postgres restart) are in
tests/acceptance/test_worker.py.
"""
from __future__ import annotations

import base64
import dataclasses
import json
import os
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any, TypeVar

import pytest
from psycopg.types.json import Jsonb

import pgqueue
from pgqueue.client import lease as client_lease
from pgqueue.db import connection
from pgqueue.runtime import wakeup
from tests.dbhelp import force_reclaim, wait_for

pytestmark = pytest.mark.layouts("single", "citus", "stock")

T = TypeVar("T")


# -- helpers (tests/integration/runtime/test_steps.py uses them too) ----------------------------------




@contextmanager
def running(app: pgqueue.App, dsn: str, **options: Any) -> Iterator[pgqueue.Worker]:
    """A Worker running in a thread until the block ends (then stopped, drained and joined)."""
    settings: dict[str, Any] = {"concurrency": 2, "visibility_timeout": 5.0,
                                "renew_interval": 0.5, "poll_interval": 0.1,
                                "maintenance_interval": 0.2, "grace_period": 2.0, **options}
    worker = pgqueue.Worker(app, dsn, **settings)
    failures: list[BaseException] = []

    def main() -> None:
        try:
            worker.run()
        except BaseException as exc:
            failures.append(exc)
            raise

    thread = threading.Thread(target=main, name="test-worker", daemon=True)
    thread.start()
    wait_for(lambda: worker.worker_id != 0 or not thread.is_alive(), 10, "the worker to start")
    assert thread.is_alive(), failures
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(timeout=settings["grace_period"] + 15)
        assert not thread.is_alive(), "the worker did not stop"
        assert failures == []


def lease_calls(monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """From now on, the job ids each lease call returned, as it returned (every worker's lease
    loops call pgqueue.client.lease.lease): how many polls there were, and what they got."""
    returned: list[list[int]] = []
    real = client_lease.lease

    def counted(*args: Any, **kwargs: Any) -> list[pgqueue.Lease]:
        got = real(*args, **kwargs)
        returned.append([held.job_id for held in got])
        return got

    monkeypatch.setattr(client_lease, "lease", counted)
    return returned


def idle_waits(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """An Event set while a lease loop waits for news (a NOTIFY, a freed slot, its poll
    interval): it does once a round of leases got nothing it had room for."""
    idle = threading.Event()
    real = wakeup.Wakeup.wait

    def waiting(self: wakeup.Wakeup, seen: int, timeout: float) -> None:
        idle.set()
        try:
            real(self, seen, timeout)
        finally:
            idle.clear()

    monkeypatch.setattr(wakeup.Wakeup, "wait", waiting)
    return idle


def register_step_set(dsn: str, job: pgqueue.StepJob) -> None:
    """Record a step job's step list, as a worker running that code would have."""
    with connection.connect(dsn) as conn:
        conn.execute("SELECT pgqueue.register_step_set(%s, %s, %s)",
                     (job.step_set_hash, job.kind, Jsonb(job.step_list)))


def simulate_crash(q: pgqueue.Queue, dsn: str, recorded: pgqueue.StepJob, *,
                   last_completed: str | None, cursor_step: str | None,
                   cursor: bytes | None) -> int:
    """A job of `recorded`'s kind whose worker died with this checkpoint; now pending again."""
    register_step_set(dsn, recorded)
    job_id = q.enqueue({"n": 1}, kind=recorded.kind, schema_version=recorded.schema_version)
    (lease,) = q.lease(visibility_timeout=30)
    q.renew(lease, checkpoint=pgqueue.Checkpoint(
        last_completed_step=last_completed, cursor_step=cursor_step, cursor=cursor,
        schema_version=recorded.schema_version, step_set_hash=recorded.step_set_hash))
    assert force_reclaim(dsn) == 1
    info = job(q, job_id)
    assert (info.state, info.attempts) == ("pending", 1)
    return job_id


def job(q: pgqueue.Queue, job_id: int) -> pgqueue.JobInfo:
    info = q.job(job_id)
    assert info is not None, f"job {job_id} is gone"
    return info


def state(q: pgqueue.Queue, job_id: int) -> str | None:
    info = q.job(job_id)
    return None if info is None else info.state


def ops(q: pgqueue.Queue, job_id: int) -> list[pgqueue.Op]:
    """The job's ops, oldest first."""
    return list(reversed(q.op_log(job_id=job_id, limit=10_000, all_streams=True)))


def op_names(q: pgqueue.Queue, job_id: int) -> list[str]:
    """The job's op names, oldest first, without Promote (a retry's scheduled -> pending)."""
    return [o.op for o in ops(q, job_id) if o.op != "Promote"]


def gone(q: pgqueue.Queue, *job_ids: int) -> bool:
    return all(q.job(j) is None for j in job_ids)


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def scalar(q: pgqueue.Queue, sql: str) -> Any:
    with q.connection() as conn:
        row = conn.execute(sql).fetchone()
    return None if row is None else row[0]


def listeners(q: pgqueue.Queue) -> int:
    """Sessions of this database listening for job notifications."""
    return int(scalar(q, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                         "AND query ILIKE 'LISTEN %'"))


def election_holder(q: pgqueue.Queue) -> Any:
    """The holder of the maintenance runners' claim while it is current (None: nobody's)."""
    return scalar(q, "SELECT (SELECT holder FROM pgqueue.maintenance_runner "
                     "WHERE until > clock_timestamp())")


# -- handler outcomes --------------------------------------------------------------------------


def test_a_handler_that_returns_is_acked(dsn: str, q: pgqueue.Queue) -> None:
    app = pgqueue.App()
    seen: list[tuple[int, str | None, Any, int, bytes]] = []

    @app.job("hello")
    def hello(job: pgqueue.JobContext) -> None:
        seen.append((job.job_id, job.kind, job.json(), job.attempts, job.payload))

    job_id = q.enqueue({"x": 1}, kind="hello")
    # renewals far apart: a quick handler's lease is never renewed (on a loaded Citus bed the
    # time from lease to ack passed the default 0.5 s once, and a Renew came between)
    with running(app, dsn, renew_interval=4.0):
        wait_for(lambda: gone(q, job_id), 10, "the ack")
    assert seen == [(job_id, "hello", {"x": 1}, 0, b'{"x":1}')]
    assert op_names(q, job_id) == ["Enqueue", "Lease", "Ack"]


def test_a_handler_that_raises_is_nacked_with_its_error_kept_and_retried(
        dsn: str, q: pgqueue.Queue) -> None:
    q.configure_stream(retry_base=0.05)
    app = pgqueue.App()
    errors_seen: list[str | None] = []

    @app.job("flaky")
    def flaky(job: pgqueue.JobContext) -> None:
        if job.attempts == 0:
            raise RuntimeError("disk on fire 42")
        errors_seen.append(job_info(job.job_id).last_error)

    def job_info(job_id: int) -> pgqueue.JobInfo:
        return job(q, job_id)

    job_id = q.enqueue("x", kind="flaky")
    with running(app, dsn):
        wait_for(lambda: gone(q, job_id), 10, "the retry to succeed")
    assert len(errors_seen) == 1 and errors_seen[0] is not None
    assert "RuntimeError" in errors_seen[0] and "disk on fire 42" in errors_seen[0]
    assert op_names(q, job_id) == ["Enqueue", "Lease", "Nack", "Lease", "Ack"]
    (nack,) = [o for o in ops(q, job_id) if o.op == "Nack"]
    assert nack.body["attempts"] == 1 and "disk on fire 42" in nack.body["last_error"]


def test_a_handlers_max_attempts_sends_the_job_to_the_dead_letters(
        dsn: str, q: pgqueue.Queue) -> None:
    q.configure_stream(retry_base=0.01)
    app = pgqueue.App()
    runs: list[int] = []

    @app.job("doomed", max_attempts=3)
    def doomed(job: pgqueue.JobContext) -> None:
        runs.append(job.attempts)
        raise ValueError(f"attempt {job.attempts} failed")

    job_id = q.enqueue("x", kind="doomed")  # enqueued with the default 25 attempts
    with running(app, dsn):
        wait_for(lambda: state(q, job_id) == "dead", 10, "the job to die")
    assert runs == [0, 1, 2]
    info = job(q, job_id)
    assert (info.attempts, info.max_attempts) == (3, 3)
    assert info.last_error is not None and "attempt 2 failed" in info.last_error
    assert [d.job_id for d in q.dead_letters()] == [job_id]


def test_a_failing_step_keeps_the_cursor_it_advanced_before_the_failure(
        dsn: str, q: pgqueue.Queue) -> None:
    """sidekiq#6596: the retry resumes at the cursor, not at the start of the step."""
    q.configure_stream(retry_base=0.05)
    app = pgqueue.App()
    walk = app.step_job("walk")
    cursors: list[bytes | None] = []
    done: list[int] = []

    @walk.step("items")
    def items(ctx: pgqueue.StepContext) -> None:
        cursors.append(ctx.cursor)
        start = 0 if ctx.cursor is None else int(ctx.cursor) + 1
        for i in range(start, 10):
            if i == 5 and ctx.attempts == 0:
                raise RuntimeError("item 5 exploded")
            done.append(i)
            ctx.advance(i)

    job_id = q.enqueue({}, kind="walk", schema_version=1)
    # No renewal runs during the test: only the write made on the failure saves the cursor.
    with running(app, dsn, visibility_timeout=60, renew_interval=30):
        wait_for(lambda: gone(q, job_id), 10, "the retry to finish")
    assert cursors == [None, b"4"]
    assert done == list(range(10))
    history = ops(q, job_id)
    nack = next(i for i, o in enumerate(history) if o.op == "Nack")
    before = history[nack - 1]
    assert before.op == "Renew"
    assert before.body["checkpoint"]["cursor"] == b64(b"4")
    assert before.body["checkpoint"]["cursor_step"] == "items"
    assert "item 5 exploded" in history[nack].body["last_error"]


# -- undecodable: unknown kind, payload version ------------------------------------------------


def test_an_unknown_kind_is_undecodable_without_using_an_attempt(
        dsn: str, q: pgqueue.Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    app = pgqueue.App()
    app.job("known")(lambda job: None)
    job_id = q.enqueue("?", kind="mystery")
    polls = lease_calls(monkeypatch)
    with running(app, dsn):
        wait_for(lambda: state(q, job_id) == "undecodable", 10, "the job to be parked")
        parked = len(polls)
        wait_for(lambda: len(polls) >= parked + 3, 10, "three lease polls after the parking")
    assert [p for p in polls[parked:] if job_id in p] == []  # a parked job is not leased again
    info = job(q, job_id)
    assert (info.state_reason, info.attempts, info.last_error) == ("unknown_kind", 0, None)
    assert info.state_detail is not None
    assert info.state_detail["kind"] == "mystery"
    assert info.state_detail["known_kinds"] == ["known"]
    assert op_names(q, job_id) == ["Enqueue", "Lease", "MarkUndecodable"]


@pytest.mark.parametrize(("code_version", "upcasters", "job_version", "message"), [
    (2, [], 3, "newer than the code"),
    (3, [2], 1, "no upcaster from version 1"),
    (2, [], 1, "no upcaster from version 1"),
], ids=["newer than the code", "older, chain incomplete", "older, no upcaster"])
def test_a_payload_version_the_code_cannot_read_is_undecodable(
        dsn: str, q: pgqueue.Queue, code_version: int, upcasters: list[int], job_version: int,
        message: str) -> None:
    app = pgqueue.App()
    doc = app.step_job("doc", schema_version=code_version)
    for v in upcasters:
        doc.upcaster(from_version=v)(lambda payload: payload)
    ran: list[str] = []
    doc.step("only")(lambda ctx: ran.append(ctx.step))
    job_id = q.enqueue({"v": job_version}, kind="doc", schema_version=job_version)
    with running(app, dsn):
        wait_for(lambda: state(q, job_id) == "undecodable", 10, "the job to be parked")
    info = job(q, job_id)
    assert (info.state_reason, info.attempts) == ("payload_version", 0)
    assert info.state_detail is not None and message in info.state_detail["message"]
    assert info.state_detail["job_schema_version"] == job_version
    assert info.state_detail["code_schema_version"] == code_version
    assert json.loads(info.payload) == {"v": job_version}
    assert info.checkpoint.schema_version == job_version
    assert ran == []
    assert op_names(q, job_id) == ["Enqueue", "Lease", "MarkUndecodable"]


def test_an_upcaster_chain_is_applied_and_the_upcast_payload_stored(
        dsn: str, q: pgqueue.Queue) -> None:
    app = pgqueue.App()
    doc = app.step_job("doc", schema_version=3)

    @doc.upcaster(from_version=1)
    def one_to_two(payload: bytes) -> bytes:
        d = json.loads(payload)
        return json.dumps({"title": d["name"], "chain": ["1->2"]}).encode()

    @doc.upcaster(from_version=2)
    def two_to_three(payload: bytes) -> bytes:
        d = json.loads(payload)
        return json.dumps({**d, "chain": [*d["chain"], "2->3"]}).encode()

    seen: list[Any] = []
    entered, proceed = threading.Event(), threading.Event()

    @doc.step("only")
    def only(ctx: pgqueue.StepContext) -> None:
        seen.append(ctx.json())
        entered.set()
        assert proceed.wait(10)

    job_id = q.enqueue({"name": "report"}, kind="doc", schema_version=1)
    expected = {"title": "report", "chain": ["1->2", "2->3"]}
    with running(app, dsn):
        assert entered.wait(10)
        info = job(q, job_id)  # the stored job, while the step runs
        proceed.set()
        wait_for(lambda: gone(q, job_id), 10, "the ack")
    assert seen == [expected]
    assert json.loads(info.payload) == expected
    assert info.checkpoint.schema_version == 3
    names = op_names(q, job_id)
    assert names.count("Upcast") == 1 and names.index("Upcast") < names.index("Ack")
    (upcast,) = [o for o in ops(q, job_id) if o.op == "Upcast"]
    assert json.loads(base64.b64decode(upcast.body["payload"])) == expected
    assert upcast.body["checkpoint"]["schema_version"] == 3


# -- the step list changes between a crash and the resume -------------------------------------

Spec = Sequence[tuple[str, int]]
OLD: Spec = [("a", 1), ("b", 1), ("c", 1)]


def etl(spec: Spec, calls: list[tuple[str, bytes | None]]) -> tuple[pgqueue.App, pgqueue.StepJob]:
    """An App whose step job "etl" declares `spec` and records (step, cursor) per run."""
    app = pgqueue.App()
    steps = app.step_job("etl")

    def record(ctx: pgqueue.StepContext) -> None:
        calls.append((ctx.step, ctx.cursor))

    for name, version in spec:
        steps.step(name, version=version)(record)
    return app, steps


def crashed_in_b(q: pgqueue.Queue, dsn: str) -> tuple[int, pgqueue.StepJob]:
    """An etl job whose worker (running OLD) died in step b with cursor 5."""
    _, old = etl(OLD, [])
    return simulate_crash(q, dsn, old, last_completed="a", cursor_step="b", cursor=b"5"), old


INCOMPATIBLE: dict[str, Spec] = {
    "step inserted before the step in progress": [("a", 1), ("x", 1), ("b", 1), ("c", 1)],
    "step in progress changed version": [("a", 1), ("b", 2), ("c", 1)],
    "step in progress renamed": [("a", 1), ("b2", 1), ("c", 1)],
    "completed step changed version": [("a", 2), ("b", 1), ("c", 1)],
    "completed step removed": [("b", 1), ("c", 1)],
    "completed and in-progress steps swapped": [("b", 1), ("a", 1), ("c", 1)],
}

COMPATIBLE: dict[str, tuple[Spec, list[tuple[str, bytes | None]]]] = {
    "step appended": ([("a", 1), ("b", 1), ("c", 1), ("d", 1)],
                      [("b", b"5"), ("c", None), ("d", None)]),
    "step inserted after the step in progress": ([("a", 1), ("b", 1), ("x", 1), ("c", 1)],
                                                 [("b", b"5"), ("x", None), ("c", None)]),
    "later step changed version": ([("a", 1), ("b", 1), ("c", 2)], [("b", b"5"), ("c", None)]),
    "later step removed": ([("a", 1), ("b", 1)], [("b", b"5")]),
}


@pytest.mark.parametrize("new", list(INCOMPATIBLE.values()), ids=list(INCOMPATIBLE))
def test_an_incompatible_step_list_parks_the_job_with_old_and_new_lists(
        dsn: str, q: pgqueue.Queue, new: Spec) -> None:
    job_id, old = crashed_in_b(q, dsn)
    calls: list[tuple[str, bytes | None]] = []
    app, steps = etl(new, calls)
    with running(app, dsn):
        wait_for(lambda: state(q, job_id) == "undecodable", 10, "the job to be parked")
    assert calls == []
    info = job(q, job_id)
    assert (info.state_reason, info.attempts) == ("step_set_changed", 1)
    detail = info.state_detail
    assert detail is not None
    assert detail["old_steps"] == old.step_list
    assert detail["new_steps"] == steps.step_list
    assert (detail["old_hash"], detail["new_hash"]) == (old.step_set_hash, steps.step_set_hash)
    assert (detail["last_completed_step"], detail["cursor_step"]) == ("a", "b")
    # The checkpoint is kept as the crashed worker left it.
    cp = info.checkpoint
    assert (cp.last_completed_step, cp.cursor_step, cp.cursor) == ("a", "b", b"5")
    assert cp.step_set_hash == old.step_set_hash
    assert op_names(q, job_id)[-2:] == ["Lease", "MarkUndecodable"]


@pytest.mark.parametrize(("new", "expected"), list(COMPATIBLE.values()), ids=list(COMPATIBLE))
def test_a_compatible_step_list_change_resumes_at_the_step_with_its_cursor(
        dsn: str, q: pgqueue.Queue, new: Spec, expected: list[tuple[str, bytes | None]]) -> None:
    job_id, _ = crashed_in_b(q, dsn)
    calls: list[tuple[str, bytes | None]] = []
    app, _steps = etl(new, calls)
    with running(app, dsn):
        wait_for(lambda: gone(q, job_id), 10, "the resumed job to finish")
    assert calls == expected
    assert op_names(q, job_id).count("Ack") == 1


def test_accept_step_set_resumes_a_parked_job_with_the_new_list(
        dsn: str, q: pgqueue.Queue) -> None:
    job_id, _ = crashed_in_b(q, dsn)
    calls: list[tuple[str, bytes | None]] = []
    app, steps = etl(INCOMPATIBLE["step inserted before the step in progress"], calls)
    with running(app, dsn):
        wait_for(lambda: state(q, job_id) == "undecodable", 10, "the job to be parked")
        q.accept_step_set(job_id)
        accepted = job(q, job_id)
        wait_for(lambda: gone(q, job_id), 10, "the accepted job to finish")
    assert accepted.state in ("pending", "leased")
    assert accepted.checkpoint.step_set_hash == steps.step_set_hash
    assert accepted.checkpoint.last_completed_step == "a"
    # It resumes after its last completed step, matched by name in the new list.
    assert calls == [("x", None), ("b", None), ("c", None)]
    names = op_names(q, job_id)
    assert names.count("AcceptStepSet") == 1 and names[-1] == "Ack"


def test_accept_step_set_refuses_when_a_completed_step_is_gone(
        dsn: str, q: pgqueue.Queue) -> None:
    job_id, _ = crashed_in_b(q, dsn)
    app, _steps = etl(INCOMPATIBLE["completed step removed"], [])
    with running(app, dsn):
        wait_for(lambda: state(q, job_id) == "undecodable", 10, "the job to be parked")
    with pytest.raises(pgqueue.InvalidState, match="not in the new list"):
        q.accept_step_set(job_id)
    assert state(q, job_id) == "undecodable"


# -- lost leases -------------------------------------------------------------------------------


def test_a_lost_lease_raises_lease_lost_at_the_next_advance(dsn: str, q: pgqueue.Queue) -> None:
    app = pgqueue.App()
    walk = app.step_job("walk")
    entered = threading.Event()
    raised: list[str] = []
    resumed_with: list[bytes | None] = []

    @walk.step("s")
    def s(ctx: pgqueue.StepContext) -> None:
        if ctx.attempts == 0:
            ctx.advance(1)
            entered.set()
            wait_for(lambda: ctx.lease_lost, 10, "a renewal to find the lease gone")
            try:
                ctx.advance(2)
            except pgqueue.LeaseLost as exc:
                raised.append(str(exc))
                raise
            raise AssertionError("advance() on a lost lease did not raise")
        resumed_with.append(ctx.cursor)

    job_id = q.enqueue({}, kind="walk", schema_version=1)
    with running(app, dsn, visibility_timeout=5, renew_interval=0.2, maintenance=False):
        assert entered.wait(10)
        first = job(q, job_id).lease_id
        wait_for(lambda: job(q, job_id).checkpoint.cursor == b"1", 5, "cursor 1 to be renewed")
        wait_for(lambda: force_reclaim(dsn) == 1, 5, "the reclaim behind the worker's back")
        wait_for(lambda: gone(q, job_id), 10, "the job to finish on a new lease")
    assert len(raised) == 1 and str(first) in raised[0]
    assert resumed_with == [b"1"]  # the lost lease wrote nothing after the reclaim
    history = ops(q, job_id)
    reclaim_at = next(i for i, o in enumerate(history) if o.op == "Reclaim")
    assert [o for o in history[reclaim_at + 1:] if o.lease_id == first] == []
    acks = [o for o in history if o.op == "Ack"]
    assert len(acks) == 1 and acks[0].lease_id != first


def test_a_handler_that_returns_after_its_lease_was_lost_is_not_acked(
        dsn: str, q: pgqueue.Queue) -> None:
    app = pgqueue.App()
    entered = threading.Event()
    lost_leases: list[int] = []
    later_leases: list[int] = []

    @app.job("slow")
    def slow(job: pgqueue.JobContext) -> None:
        if job.attempts == 0:
            entered.set()
            wait_for(lambda: job.lease_lost, 10, "a renewal to find the lease gone")
            lost_leases.append(job.lease.lease_id)
            return  # a result nobody may record
        later_leases.append(job.lease.lease_id)

    job_id = q.enqueue("x", kind="slow")
    with running(app, dsn, visibility_timeout=5, renew_interval=0.2, maintenance=False):
        assert entered.wait(10)
        wait_for(lambda: force_reclaim(dsn) == 1, 5, "the reclaim behind the worker's back")
        wait_for(lambda: gone(q, job_id), 10, "the job to finish on a new lease")
    assert len(lost_leases) == 1 and len(later_leases) == 1
    acks = [o for o in ops(q, job_id) if o.op == "Ack"]
    assert [a.lease_id for a in acks] == later_leases
    assert op_names(q, job_id) == ["Enqueue", "Lease", "Reclaim", "Lease", "Ack"]


def test_a_lost_lease_stops_a_step_job_at_the_next_step_boundary(
        dsn: str, q: pgqueue.Queue) -> None:
    app = pgqueue.App()
    two = app.step_job("two")
    entered = threading.Event()
    runs: list[tuple[str, int]] = []

    @two.step("a")
    def a(ctx: pgqueue.StepContext) -> None:
        runs.append(("a", ctx.lease.lease_id))
        if ctx.attempts == 0:
            entered.set()
            wait_for(lambda: ctx.lease_lost, 10, "a renewal to find the lease gone")
            # returns without calling advance(): the boundary must stop the job

    @two.step("b")
    def b(ctx: pgqueue.StepContext) -> None:
        runs.append(("b", ctx.lease.lease_id))

    job_id = q.enqueue({}, kind="two", schema_version=1)
    with running(app, dsn, visibility_timeout=5, renew_interval=0.2, maintenance=False):
        assert entered.wait(10)
        first = job(q, job_id).lease_id
        assert first is not None
        wait_for(lambda: force_reclaim(dsn) == 1, 5, "the reclaim behind the worker's back")
        wait_for(lambda: gone(q, job_id), 10, "the job to finish on a new lease")
    (second,) = {lease for _, lease in runs} - {first}
    assert runs == [("a", first), ("a", second), ("b", second)]
    history = ops(q, job_id)
    reclaim_at = next(i for i, o in enumerate(history) if o.op == "Reclaim")
    assert [o for o in history[reclaim_at + 1:] if o.lease_id == first] == []


def test_a_prefetched_job_whose_lease_was_lost_is_let_go(dsn: str, q: pgqueue.Queue) -> None:
    """A lost lease of a job still waiting for a handler thread is dropped, not held (and
    renewed, and counted against the worker's capacity) forever; its reclaim charged it
    nothing (its handler never started), while the running job's cost it an attempt."""
    app = pgqueue.App()
    entered = threading.Event()
    runs: list[tuple[int, int]] = []

    @app.job("slow")
    def slow(job: pgqueue.JobContext) -> None:
        runs.append((job.job_id, job.attempts))
        if job.job_id == first and job.attempts == 0:
            entered.set()
            wait_for(lambda: job.lease_lost, 10, "a renewal to find the lease gone")

    first = q.enqueue("first", kind="slow")
    waiting = q.enqueue("waiting", kind="slow")
    with running(app, dsn, concurrency=1, prefetch=1, visibility_timeout=5, renew_interval=0.2,
                 maintenance=False) as worker:
        assert entered.wait(10)
        wait_for(lambda: state(q, waiting) == "leased", 5, "the second job to be prefetched")
        reclaimed = [force_reclaim(dsn)]
        while sum(reclaimed) < 2 and len(reclaimed) < 20:  # a renewal may hold a row a moment
            reclaimed.append(force_reclaim(dsn))
        assert sum(reclaimed) == 2
        wait_for(lambda: gone(q, first, waiting), 10, "both jobs to finish on new leases")
        wait_for(lambda: worker.held_count == 0, 5, "the worker to let go of its lost leases")
    assert sorted(runs) == sorted([(first, 0), (first, 1), (waiting, 0)])


def test_two_lease_loops_share_the_capacity_and_a_drain_returns_every_unstarted_job(
        dsn: str, q: pgqueue.Queue) -> None:
    """A large capacity runs two lease loops: together they never hold more than concurrency +
    prefetch, no job runs twice, and on stop every job not run is back to pending without a
    spent attempt (no lease landed after the drain read what the worker held)."""
    app = pgqueue.App()
    started: list[int] = []
    lock = threading.Lock()

    @app.job("slow")
    def slow(job: pgqueue.JobContext) -> None:
        with lock:
            started.append(job.job_id)
        time.sleep(0.01)

    ids = q.enqueue_many([pgqueue.NewJob(b"x", kind="slow") for _ in range(3000)])
    capacity = 4 + 300
    peaks: list[int] = []
    with running(app, dsn, concurrency=4, prefetch=300, maintenance=False) as worker:
        assert worker.lease_loops == 2
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            peaks.append(worker.held_count)
            peaks.append(int(scalar(q, "SELECT count(*) FROM pgqueue.job WHERE state = 'leased'")))
            time.sleep(0.01)
    assert max(peaks) <= capacity
    assert len(started) == len(set(started)) > 0
    left = {info.job_id: info for info in q.jobs(limit=len(ids) + 1)}  # one read, not 3,000
    assert set(left) <= set(ids)
    run = set(ids) - set(left)
    assert run == set(started), "a job was acked that never started, or one started and stayed"
    waiting = list(left.values())
    assert waiting and all(w.state == "pending" and w.attempts == 0 for w in waiting), (
        {(w.state, w.attempts) for w in waiting})
    assert len(run) + len(waiting) == len(ids)


def test_a_long_handler_keeps_its_lease_alive_by_renewals(dsn: str, q: pgqueue.Queue) -> None:
    """A live job running far past its visibility timeout is renewed, never reclaimed."""
    app = pgqueue.App()
    app.job("long")(lambda job: time.sleep(3.0))
    job_id = q.enqueue("x", kind="long")
    with running(app, dsn, visibility_timeout=1.0, renew_interval=0.25,
                 maintenance_interval=0.1):
        wait_for(lambda: gone(q, job_id), 10, "the ack")
    names = op_names(q, job_id)
    assert "Reclaim" not in names and names.count("Lease") == 1 and names[-1] == "Ack"
    assert names.count("Renew") >= 6


# -- wakeups, maintenance, registry ------------------------------------------------------------


def test_notify_wakes_an_idle_worker_long_before_its_poll_interval(
        dsn: str, q: pgqueue.Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    app = pgqueue.App()
    done = threading.Event()
    app.job("ping")(lambda job: done.set())
    idle = idle_waits(monkeypatch)
    with running(app, dsn, poll_interval=30, maintenance=False):
        wait_for(lambda: listeners(q) == 1, 10, "the worker to LISTEN")
        # its first lease came back empty: it now waits for a NOTIFY or 30 s
        assert idle.wait(10), "the lease loop never waited for news"
        started = time.monotonic()
        q.enqueue("x", kind="ping")
        assert done.wait(10), "the job was not picked up"
        elapsed = time.monotonic() - started
    assert elapsed < 2.0, f"picked up after {elapsed:.2f}s: the NOTIFY did not wake the worker"


def test_an_idle_worker_leases_once_per_poll_interval_not_without_pause(
        dsn: str, q: pgqueue.Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """With nothing to do, each lease loop asks once per poll interval (or per NOTIFY). A
    lease whose jobs start at once used to bump the wake-up when it ended, ending its own
    loop's wait at once: an idle worker called the lease about 1,600 times a second."""
    from pgqueue.client import lease

    calls: list[float] = []
    real = lease.lease

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(time.monotonic())
        return real(*args, **kwargs)

    monkeypatch.setattr(lease, "lease", counted)
    app = pgqueue.App()
    app.job("never")(lambda job: None)
    with running(app, dsn, concurrency=4, poll_interval=0.5, maintenance=False) as worker:
        wait_for(lambda: len(calls) >= 1, 10, "the first lease")
        before = len(calls)
        threading.Event().wait(2.0)  # a measured window, not a wait for something to happen
        seen = len(calls) - before
        loops = worker.lease_loops
    assert seen <= loops * (2.0 / 0.5 + 2), (
        f"{seen} lease calls in about 2 s from {loops} idle lease loop(s) polling every 0.5 s")


def test_a_workers_maintenance_reclaims_an_expired_lease_within_two_seconds(
        dsn: str, q: pgqueue.Queue) -> None:
    with running(pgqueue.App(), dsn, maintenance_interval=1.0), \
            pgqueue.Queue(dsn, stream="orphans") as other:  # a stream the worker does not lease
        job_id = other.enqueue("x")
        (lease,) = other.lease(visibility_timeout=0.5)
        wait_for(lambda: state(other, job_id) == "pending", 10, "the reclaim")
    (reclaimed,) = [o for o in ops(q, job_id) if o.op == "Reclaim"]
    lag = (reclaimed.at - lease.expires_at).total_seconds()
    assert 0 <= lag <= 2.0, f"reclaimed {lag:.2f}s after the lease expired"


def test_one_maintenance_runner_at_a_time_among_three_workers(
        dsn: str, q: pgqueue.Queue) -> None:
    app = pgqueue.App()
    with ExitStack() as stack:
        workers = [stack.enter_context(running(app, dsn, maintenance_interval=0.1))
                   for _ in range(3)]

        def maintainers() -> list[Any]:
            return [w._maintainer for w in workers]

        def elected(among: Sequence[pgqueue.Worker]) -> list[pgqueue.Worker]:
            return [w for w in among if w._maintainer is not None and w._maintainer.elected]

        (runner,) = wait_for(lambda: elected(workers), 5, "a maintenance runner to be elected")
        maintainer = runner._maintainer
        assert maintainer is not None
        start, samples = maintainer.passes, list[Any]()

        def sampled() -> bool:  # the claim, read while the runner passes and the others try
            samples.append(election_holder(q))
            return maintainer.passes >= start + 5

        wait_for(sampled, 10, "five more passes of the runner")
        assert samples == [maintainer._holder] * len(samples)  # one claim, held throughout
        assert elected(workers) == [runner]
        others = [w for w in workers if w is not runner]
        assert all(m is not None for m in maintainers())
        # (a pass takes longer on a loaded Citus bed: waited for, not assumed from the samples)
        wait_for(lambda: runner._maintainer is not None and runner._maintainer.passes > 1, 10,
                 "the runner's second pass")
        assert [w._maintainer.passes for w in others if w._maintainer is not None] == [0, 0]

        # When the runner stops, another worker takes over the election.
        runner.stop()
        (successor,) = wait_for(lambda: elected(others), 5, "another runner to be elected")
        assert successor._maintainer is not None
        wait_for(lambda: successor._maintainer is not None and successor._maintainer.passes > 0,
                 5, "the successor's first pass")
        assert successor._maintainer is not None
        assert election_holder(q) == successor._maintainer._holder


def test_a_worker_registers_itself_and_its_handlers_and_deregisters_on_stop(
        dsn: str, q: pgqueue.Queue) -> None:
    app = pgqueue.App()
    entered, proceed = threading.Event(), threading.Event()

    @app.job("hold", quarantine_after=2)
    def hold(job: pgqueue.JobContext) -> None:
        entered.set()
        assert proceed.wait(10)

    multi = app.step_job("multi", quarantine_after=5)
    multi.step("one")(lambda ctx: None)
    multi.step("two", version=3)(lambda ctx: None)

    with running(app, dsn, concurrency=2, streams=["default", "other"], node=7) as worker:
        job_id = q.enqueue("x", kind="hold")
        assert entered.wait(10)
        (row,) = q.workers()
        assert isinstance(row, pgqueue.WorkerInfo) and row.id == worker.worker_id
        assert (row.host, row.pid, row.node) == (socket.gethostname(), os.getpid(), 7)
        assert (row.streams, row.concurrency, row.leases) == (["default", "other"], 2, 1)
        assert row.started_at <= row.heartbeat_at and row.heartbeat_age_seconds >= 0
        # read as the dict workers() returned before it had a model: the same values
        assert dict(row) == {f.name: getattr(row, f.name) for f in dataclasses.fields(row)}
        assert (row["id"], row["leases"], row.get("nothing"), "pid" in row) == (
            worker.worker_id, 1, None, True)
        assert job(q, job_id).worker_instance == worker.worker_id
        with q.connection() as conn:
            kinds = conn.execute("SELECT stream, kind, quarantine_after FROM pgqueue.kind_config "
                                 "ORDER BY stream, kind").fetchall()
        assert kinds == [("default", "hold", 2), ("default", "multi", 5),
                         ("other", "hold", 2), ("other", "multi", 5)]
        assert q.step_list(multi.step_set_hash) == [{"name": "one", "version": 1},
                                                    {"name": "two", "version": 3}]
        proceed.set()
        wait_for(lambda: gone(q, job_id), 10, "the ack")
    assert q.workers() == []


def test_a_handler_thread_survives_an_error_outside_the_handler(
        dsn: str, q: pgqueue.Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """An unexpected error while settling a job (here: the first nack's write fails) must not
    kill the handler thread: the worker keeps its concurrency and runs the next job."""
    app = pgqueue.App()
    done: list[int] = []

    @app.job("flaky")
    def flaky(job: pgqueue.JobContext) -> None:
        if job.json()["n"] == 0:
            raise RuntimeError("boom")
        done.append(job.job_id)

    q.enqueue({"n": 0}, kind="flaky")
    worker = pgqueue.Worker(app, dsn, concurrency=1, poll_interval=0.05, maintenance=False)
    settler = worker._settler
    write = settler.write
    broken = threading.Event()

    def write_but_break_the_first_nack(held: Any, what: str, fn: Any, ends: Any = None) -> Any:
        if what == "nack" and not broken.is_set():
            broken.set()
            raise RuntimeError("the nack could not be written")
        return write(held, what, fn, ends)

    monkeypatch.setattr(settler, "write", write_but_break_the_first_nack)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 5
        while not broken.is_set() and time.monotonic() < deadline:
            time.sleep(0.02)
        second = q.enqueue({"n": 1}, kind="flaky")
        while second not in done and time.monotonic() < deadline + 5:
            time.sleep(0.02)
        assert broken.is_set(), "the first nack was never attempted"
        assert second in done  # the only handler thread is still alive
    finally:
        worker.stop()
        thread.join(10)
