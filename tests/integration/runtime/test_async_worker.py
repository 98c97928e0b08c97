"""Async handlers in pgqueue.Worker, in a thread against a real database.

`async def` jobs run as coroutines on the worker's event loop beside plain handlers on
threads. Everything the sync path guarantees is checked here the same way as in
tests/integration/runtime/test_worker.py: acks and nacks, renewals carrying checkpoints, exact step
boundaries, `await ctx.checkpoint_now()`, resume from a crash's cursor, lost leases seen at the
next advance or boundary, and the drain. The process-level versions (SIGKILL mid-step, SIGTERM)
are in tests/acceptance/test_worker.py (async_app.py).
"""
from __future__ import annotations

import asyncio
import threading
import time

import pytest

import pgqueue
from tests.dbhelp import force_reclaim, wait_for
from tests.integration.runtime.test_worker import (
    gone,
    job,
    op_names,
    ops,
    running,
    simulate_crash,
    state,
)


class Gauge:
    """Counts coroutines (or threads) inside a block, keeping the most seen at once."""

    def __init__(self) -> None:
        self.now = 0
        self.most = 0
        self.lock = threading.Lock()

    def enter(self) -> None:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)

    def leave(self) -> None:
        with self.lock:
            self.now -= 1


def test_an_async_handler_is_awaited_on_the_event_loop_and_acked(
        dsn: str, q: pgqueue.Queue) -> None:
    app = pgqueue.App()
    seen: list[tuple[str, str, int]] = []

    @app.job("fetch")
    async def fetch(job: pgqueue.JobContext) -> None:
        await asyncio.sleep(0.05)  # really awaited: the job is acked only after this
        seen.append((threading.current_thread().name, "fetch", int(job.json()["n"])))

    @app.job("plain")
    def plain(job: pgqueue.JobContext) -> None:
        seen.append((threading.current_thread().name, "plain", int(job.json()["n"])))

    ids = [q.enqueue({"n": i}, kind="fetch" if i % 2 else "plain") for i in range(10)]
    with running(app, dsn, concurrency=2, async_concurrency=3):
        wait_for(lambda: gone(q, *ids), 15, "every job to be acked")
    assert sorted(n for _, kind, n in seen if kind == "fetch") == [1, 3, 5, 7, 9]
    assert sorted(n for _, kind, n in seen if kind == "plain") == [0, 2, 4, 6, 8]
    assert {t for t, kind, _ in seen if kind == "fetch"} == {"pgqueue-event-loop"}
    assert all(t.startswith("pgqueue-handler-") for t, kind, _ in seen if kind == "plain")
    for job_id in ids:
        assert op_names(q, job_id) == ["Enqueue", "Lease", "Ack"]


def test_async_concurrency_limits_coroutines_in_flight_apart_from_the_threads(
        dsn: str, q: pgqueue.Queue) -> None:
    app = pgqueue.App()
    coroutines, threads = Gauge(), Gauge()
    release = threading.Event()

    @app.job("io")
    async def io(job: pgqueue.JobContext) -> None:
        coroutines.enter()
        try:
            while not release.is_set():
                await asyncio.sleep(0.01)
        finally:
            coroutines.leave()

    @app.job("cpu")
    def cpu(job: pgqueue.JobContext) -> None:
        threads.enter()
        try:
            release.wait(20)
        finally:
            threads.leave()

    ids = [q.enqueue({}, kind="io") for _ in range(12)] + [q.enqueue({}, kind="cpu")
                                                         for _ in range(4)]
    with running(app, dsn, concurrency=2, async_concurrency=5, prefetch=20) as worker:
        wait_for(lambda: coroutines.now == 5 and threads.now == 2, 15,
                 "five coroutines and two threads to be busy")
        # held: every job (prefetch); running: no more than the slots of each kind
        wait_for(lambda: worker.held_count == 16, 10, "the rest to be leased ahead")
        assert (coroutines.most, threads.most) == (5, 2)
        release.set()
        wait_for(lambda: gone(q, *ids), 20, "every job to be acked")
    assert (coroutines.most, threads.most) == (5, 2)


def test_an_async_handler_that_raises_is_nacked_with_its_traceback_and_retried(
        dsn: str, q: pgqueue.Queue) -> None:
    q.configure_stream(retry_base=0.05)
    app = pgqueue.App()
    runs: list[int] = []

    @app.job("flaky", max_attempts=3)
    async def flaky(job: pgqueue.JobContext) -> None:
        runs.append(job.attempts)
        await asyncio.sleep(0)
        if job.attempts == 0:
            raise RuntimeError("upstream said 503")

    job_id = q.enqueue({}, kind="flaky")
    with running(app, dsn, async_concurrency=2):
        wait_for(lambda: gone(q, job_id), 15, "the retry to succeed")
    assert runs == [0, 1]
    assert op_names(q, job_id) == ["Enqueue", "Lease", "Nack", "Lease", "Ack"]
    (nack,) = [o for o in ops(q, job_id) if o.op == "Nack"]
    error = nack.body["last_error"]
    assert "RuntimeError: upstream said 503" in error
    assert "in flaky" in error  # the traceback, not only the message


def test_an_async_handler_past_its_max_attempts_goes_to_the_dead_letters(
        dsn: str, q: pgqueue.Queue) -> None:
    app = pgqueue.App()

    @app.job("doomed", max_attempts=1)
    async def doomed(job: pgqueue.JobContext) -> None:
        raise ValueError("never works")

    job_id = q.enqueue({}, kind="doomed")
    with running(app, dsn, async_concurrency=2):
        wait_for(lambda: state(q, job_id) == "dead", 10, "the job to die")
    assert "ValueError: never works" in (job(q, job_id).last_error or "")
    assert [d.job_id for d in q.dead_letters()] == [job_id]


def test_a_cancelled_error_raised_by_the_handler_itself_is_a_failure_and_the_slot_lives_on(
        dsn: str, q: pgqueue.Queue) -> None:
    """A handler awaiting a task that was cancelled sees CancelledError: its job is nacked
    like any failure, and the runner goes on taking jobs (the worker keeps its slots)."""
    app = pgqueue.App()
    done: list[int] = []

    @app.job("cancelled", max_attempts=5)
    async def cancelled(job: pgqueue.JobContext) -> None:
        if job.attempts == 0:
            task = asyncio.ensure_future(asyncio.sleep(10))
            task.cancel()
            await task
        done.append(job.job_id)

    first = q.enqueue({}, kind="cancelled")
    with running(app, dsn, async_concurrency=1):
        wait_for(lambda: (info := q.job(first)) is not None and info.attempts == 1, 10,
                 "the failure to be recorded")
        assert "CancelledError" in (job(q, first).last_error or "")
        later = q.enqueue({}, kind="cancelled")
        wait_for(lambda: later in done, 10, "the single runner to take the next job")


def test_a_wrapped_coroutine_or_an_unawaited_one_fails_the_job_instead_of_acking_it(
        dsn: str, q: pgqueue.Queue) -> None:
    """A plain def returning a coroutine (a wrapper that hid the async def), or an async def
    returning one it forgot to await: the work would never run, so the job fails, named."""
    app = pgqueue.App()
    ran: list[str] = []

    async def work() -> None:
        ran.append("work")

    @app.job("wrapped", max_attempts=1)
    def wrapped(job: pgqueue.JobContext) -> object:
        return work()

    @app.job("forgot", max_attempts=1)
    async def forgot(job: pgqueue.JobContext) -> object:
        return work()

    ids = [q.enqueue({}, kind="wrapped"), q.enqueue({}, kind="forgot")]
    with running(app, dsn, async_concurrency=2):
        wait_for(lambda: all(state(q, j) == "dead" for j in ids), 10, "both jobs to fail")
    errors = {kind: job(q, j).last_error or "" for kind, j in zip(("wrapped", "forgot"), ids, strict=True)}
    assert "the handler of 'wrapped' returned coroutine, an awaitable nobody awaits" in errors[
        "wrapped"]
    assert "the handler of 'forgot' returned coroutine" in errors["forgot"]
    assert ran == []


def test_an_async_only_app_parks_a_job_of_an_unknown_kind_as_undecodable(
        dsn: str, q: pgqueue.Queue) -> None:
    app = pgqueue.App()

    @app.job("known")
    async def known(job: pgqueue.JobContext) -> None:
        pass

    job_id = q.enqueue({}, kind="stranger")
    with running(app, dsn, async_concurrency=2):
        wait_for(lambda: state(q, job_id) == "undecodable", 10, "the job to be parked")
    info = job(q, job_id)
    assert (info.state_reason, info.attempts) == ("unknown_kind", 0)
    assert op_names(q, job_id) == ["Enqueue", "Lease", "MarkUndecodable"]


def test_worker_settings_for_async_handlers_are_checked(dsn: str) -> None:
    app = pgqueue.App()

    @app.job("io")
    async def io(job: pgqueue.JobContext) -> None:
        pass

    with pytest.raises(ValueError, match=r"async_concurrency must be at least 1: the app's "
                                         r"handlers of 'io' are async def"):
        pgqueue.Worker(app, dsn, async_concurrency=0)
    with pytest.raises(ValueError, match="async_concurrency"):
        pgqueue.Worker(app, dsn, async_concurrency=-1)
    with pytest.raises(TypeError, match="async_concurrency"):
        pgqueue.Worker(app, dsn, async_concurrency="8")  # type: ignore[arg-type]
    assert pgqueue.Worker(app, dsn).async_concurrency == 100
    assert pgqueue.Worker(pgqueue.App(), dsn).async_concurrency == 0


# -- async step jobs -----------------------------------------------------------------------------


def test_an_async_step_job_writes_each_boundary_and_renewals_carry_its_cursor(
        dsn: str, q: pgqueue.Queue) -> None:
    app = pgqueue.App()
    walk = app.step_job("walk")
    at_b = threading.Event()
    advanced = threading.Event()
    go_on = threading.Event()

    @walk.step("a")
    async def a(ctx: pgqueue.AsyncStepContext) -> None:
        await asyncio.sleep(0)

    @walk.step("b")
    async def b(ctx: pgqueue.AsyncStepContext) -> None:
        at_b.set()
        while not go_on.is_set():
            await asyncio.sleep(0.01)
        ctx.advance(7)
        advanced.set()
        while not go_on.is_set() or advanced.is_set():
            await asyncio.sleep(0.01)

    job_id = q.enqueue({}, kind="walk", schema_version=1)
    with running(app, dsn, async_concurrency=2, visibility_timeout=5, renew_interval=0.2):
        assert at_b.wait(10)
        # entering b wrote "a done, b in progress" at once (no renewal needed for a boundary)
        cp = job(q, job_id).checkpoint
        assert (cp.last_completed_step, cp.cursor_step, cp.cursor) == ("a", "b", None)
        assert cp.step_set_hash == walk.step_set_hash
        go_on.set()
        assert advanced.wait(10)
        # advance() only moved the in-memory cursor: the next renewal writes it
        wait_for(lambda: job(q, job_id).checkpoint.cursor == b"7", 5, "a renewal to write it")
        advanced.clear()
        wait_for(lambda: gone(q, job_id), 10, "the job to be acked")
    assert op_names(q, job_id)[-1] == "Ack"


def test_await_checkpoint_now_writes_the_cursor_at_once(dsn: str, q: pgqueue.Queue) -> None:
    app = pgqueue.App()
    walk = app.step_job("walk")
    written = threading.Event()
    finish = threading.Event()

    @walk.step("s")
    async def s(ctx: pgqueue.AsyncStepContext) -> None:
        ctx.advance("page-2")
        await ctx.checkpoint_now()
        written.set()
        while not finish.is_set():
            await asyncio.sleep(0.01)

    job_id = q.enqueue({}, kind="walk", schema_version=1)
    # renewals 20 s apart: only checkpoint_now can have written the cursor this soon
    with running(app, dsn, async_concurrency=1, visibility_timeout=60, renew_interval=20):
        assert written.wait(10)
        assert job(q, job_id).checkpoint.cursor == b"page-2"
        finish.set()
        wait_for(lambda: gone(q, job_id), 10, "the job to be acked")


def test_an_async_step_job_resumes_at_the_crashed_step_from_its_cursor(
        dsn: str, q: pgqueue.Queue) -> None:
    app = pgqueue.App()
    pipeline = app.step_job("pipeline")
    calls: list[tuple[str, bytes | None]] = []

    for name in ("download", "transform", "upload"):
        async def step(ctx: pgqueue.AsyncStepContext, name: str = name) -> None:
            calls.append((name, ctx.cursor))
            await asyncio.sleep(0)

        pipeline.step(name)(step)

    job_id = simulate_crash(q, dsn, pipeline, last_completed="download",
                            cursor_step="transform", cursor=b"41")
    with running(app, dsn, async_concurrency=2):
        wait_for(lambda: gone(q, job_id), 10, "the resumed job to be acked")
    assert calls == [("transform", b"41"), ("upload", None)]


def test_an_async_step_job_whose_payload_version_is_too_new_is_undecodable(
        dsn: str, q: pgqueue.Queue) -> None:
    app = pgqueue.App()
    walk = app.step_job("walk", schema_version=1)

    @walk.step("s")
    async def s(ctx: pgqueue.AsyncStepContext) -> None:
        raise AssertionError("must not run")

    job_id = q.enqueue({}, kind="walk", schema_version=3)
    with running(app, dsn, async_concurrency=1):
        wait_for(lambda: state(q, job_id) == "undecodable", 10, "the job to be parked")
    info = job(q, job_id)
    assert (info.state_reason, info.attempts) == ("payload_version", 0)


def test_a_lost_lease_raises_lease_lost_at_the_next_advance_of_an_async_step(
        dsn: str, q: pgqueue.Queue) -> None:
    app = pgqueue.App()
    walk = app.step_job("walk")
    entered = threading.Event()
    raised: list[str] = []
    resumed_with: list[bytes | None] = []

    @walk.step("s")
    async def s(ctx: pgqueue.AsyncStepContext) -> None:
        if ctx.attempts == 0:
            ctx.advance(1)
            entered.set()
            deadline = time.monotonic() + 10
            while not ctx.lease_lost and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            try:
                ctx.advance(2)
            except pgqueue.LeaseLost as exc:
                raised.append(str(exc))
                raise
            raise AssertionError("advance() on a lost lease did not raise")
        resumed_with.append(ctx.cursor)

    job_id = q.enqueue({}, kind="walk", schema_version=1)
    with running(app, dsn, async_concurrency=2, visibility_timeout=5, renew_interval=0.2,
                 maintenance=False):
        assert entered.wait(10)
        first = job(q, job_id).lease_id
        wait_for(lambda: job(q, job_id).checkpoint.cursor == b"1", 5, "cursor 1 to be renewed")
        wait_for(lambda: force_reclaim(dsn) == 1, 5, "the reclaim behind the worker's back")
        wait_for(lambda: gone(q, job_id), 10, "the job to finish on a new lease")
    assert len(raised) == 1 and str(first) in raised[0]
    assert resumed_with == [b"1"]
    history = ops(q, job_id)
    reclaim_at = next(i for i, o in enumerate(history) if o.op == "Reclaim")
    assert [o for o in history[reclaim_at + 1:] if o.lease_id == first] == []


def test_a_lost_lease_stops_an_async_step_job_at_the_next_boundary_and_is_not_acked(
        dsn: str, q: pgqueue.Queue) -> None:
    app = pgqueue.App()
    two = app.step_job("two")
    entered = threading.Event()
    runs: list[tuple[str, int]] = []

    @two.step("a")
    async def a(ctx: pgqueue.AsyncStepContext) -> None:
        runs.append(("a", ctx.lease.lease_id))
        if ctx.attempts == 0:
            entered.set()
            deadline = time.monotonic() + 10
            while not ctx.lease_lost and time.monotonic() < deadline:
                await asyncio.sleep(0.01)

    @two.step("b")
    async def b(ctx: pgqueue.AsyncStepContext) -> None:
        runs.append(("b", ctx.lease.lease_id))

    job_id = q.enqueue({}, kind="two", schema_version=1)
    with running(app, dsn, async_concurrency=2, visibility_timeout=5, renew_interval=0.2,
                 maintenance=False):
        assert entered.wait(10)
        first = job(q, job_id).lease_id
        wait_for(lambda: force_reclaim(dsn) == 1, 5, "the reclaim behind the worker's back")
        wait_for(lambda: gone(q, job_id), 10, "the job to finish on a new lease")
    (second,) = {lease for _, lease in runs} - {first}
    assert runs == [("a", first), ("a", second), ("b", second)]
    acks = [o for o in ops(q, job_id) if o.op == "Ack"]
    assert [a.lease_id for a in acks] == [second]


# -- the drain -----------------------------------------------------------------------------------


def test_the_drain_lets_running_coroutines_finish_and_returns_queued_jobs_without_an_attempt(
        dsn: str, q: pgqueue.Queue) -> None:
    app = pgqueue.App()
    started: list[int] = []
    finished: list[int] = []

    @app.job("io")
    async def io(job: pgqueue.JobContext) -> None:
        started.append(job.job_id)
        await asyncio.sleep(0.5)
        finished.append(job.job_id)

    ids = [q.enqueue({}, kind="io") for _ in range(6)]
    with running(app, dsn, async_concurrency=2, prefetch=4, grace_period=10) as worker:
        wait_for(lambda: len(started) == 2 and worker.held_count == 6, 10,
                 "two running, four leased ahead")
        worker.stop()  # leaving the block waits for the drain to end
    assert sorted(finished) == sorted(started) and len(started) == 2
    for job_id in ids:
        if job_id in started:
            assert q.job(job_id) is None and op_names(q, job_id)[-1] == "Ack"
        else:
            info = job(q, job_id)
            assert (info.state, info.attempts) == ("pending", 0)
            assert op_names(q, job_id)[-1] == "ReturnLease"


def test_a_coroutine_still_running_after_the_grace_period_is_cancelled_and_its_lease_returned(
        dsn: str, q: pgqueue.Queue) -> None:
    app = pgqueue.App()
    walk = app.step_job("walk")
    entered = threading.Event()
    outcome: list[str] = []

    @walk.step("s")
    async def s(ctx: pgqueue.AsyncStepContext) -> None:
        ctx.advance(3)
        entered.set()
        try:
            await asyncio.sleep(60)
            outcome.append("slept on")
        except asyncio.CancelledError:
            outcome.append("cancelled")
            raise

    job_id = q.enqueue({}, kind="walk", schema_version=1)
    began = time.monotonic()
    with running(app, dsn, async_concurrency=1, grace_period=0.5) as worker:
        assert entered.wait(10)
        worker.stop()
        wait_for(lambda: outcome != [], 10, "the coroutine to be cancelled")
    assert outcome == ["cancelled"] and time.monotonic() - began < 15
    info = job(q, job_id)
    assert (info.state, info.attempts) == ("pending", 0)
    assert (info.checkpoint.cursor_step, info.checkpoint.cursor) == ("s", b"3")
    names = op_names(q, job_id)
    assert names[-1] == "ReturnLease" and "Nack" not in names


# -- what a lease says started -------------------------------------------------------------------


def lease_started(q: pgqueue.Queue, job_id: int) -> bool:
    with q.connection() as conn:
        row = conn.execute("SELECT lease_started FROM pgqueue.job WHERE id = %s",
                           (job_id,)).fetchone()
    assert row is not None
    return bool(row[0])


def lease_op_says_started(q: pgqueue.Queue, job_id: int) -> bool:
    (lease_op,) = [o for o in ops(q, job_id) if o.op == "Lease"]
    return bool(lease_op.body.get("started", True))


@pytest.mark.parametrize("mixed", [False, True], ids=["async only", "async and plain"])
def test_which_leased_jobs_count_as_started_with_coroutine_slots(
        dsn: str, q: pgqueue.Queue, mixed: bool) -> None:
    """A worker's lease says its jobs start at once when coroutines are free, as threads do;
    with slots of both sorts too: each lane leases only its own kinds (capacity.py), so the
    loop's lease knows its jobs find a free coroutine whatever the threads are doing."""
    app = pgqueue.App()
    running_now: list[int] = []
    finish = threading.Event()

    @app.job("io")
    async def io(job: pgqueue.JobContext) -> None:
        running_now.append(job.job_id)
        while not finish.is_set():
            await asyncio.sleep(0.01)

    if mixed:
        app.job("plain")(lambda job: None)
    first = q.enqueue({}, kind="io")
    with running(app, dsn, concurrency=1, async_concurrency=2, prefetch=0,
                 renew_interval=0.2):
        wait_for(lambda: running_now == [first], 10, "the first job to run")
        second = q.enqueue({}, kind="io")
        wait_for(lambda: running_now == [first, second], 10, "the second job to run")
        assert lease_op_says_started(q, first) is True  # nothing was busy
        # one job busy: a coroutine is free, mixed or not
        assert lease_op_says_started(q, second) is True
        assert lease_started(q, second)
        finish.set()
        wait_for(lambda: gone(q, first, second), 10, "the jobs to be acked")
    renews = [o for o in ops(q, second) if o.op == "Renew" and o.body.get("started")]
    assert not renews  # only a job leased ahead needs a renewal to say so


def test_an_async_worker_runs_inside_an_event_loop_and_drains_on_exit(
        dsn: str, q: pgqueue.Queue) -> None:
    """pgqueue.AsyncWorker from asyncio code: the caller's loop stays free (its own ticks go
    on while jobs run), `async with` drains on exit, and a cancelled run() drains too."""
    app = pgqueue.App()
    done: list[int] = []

    @app.job("slow")
    def slow(job: pgqueue.JobContext) -> None:
        time.sleep(0.05)  # a plain handler blocking its thread, never the caller's loop
        done.append(int(job.json()["n"]))

    ids = q.enqueue_many([pgqueue.NewJob({"n": i}, kind="slow") for i in range(6)])
    settings = pgqueue.WorkerSettings(concurrency=2, poll_interval=0.1, grace_period=2.0,
                                      maintenance=False)

    async def main() -> int:
        ticks = 0
        async with pgqueue.AsyncWorker(app, dsn, settings) as worker:
            assert worker.settings.concurrency == 2
            deadline = time.monotonic() + 30
            while len(done) < len(ids):
                assert time.monotonic() < deadline, f"only {len(done)} of {len(ids)} ran"
                ticks += 1
                await asyncio.sleep(0.01)
        assert worker.worker.processed == len(ids)
        # cancelling the task that runs it drains as well, and the cancellation propagates
        runner = pgqueue.AsyncWorker(app, dsn, settings)
        task = asyncio.create_task(runner.run())
        await asyncio.to_thread(wait_for, lambda: runner.worker.worker_id, 30, "registered")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return ticks

    ticks = asyncio.run(main())
    assert sorted(done) == list(range(6)) and ticks > 5
    assert gone(q, *ids)
    with q.connection() as conn:
        left = conn.execute("SELECT count(*) FROM pgqueue.worker").fetchone()
    assert left is not None and left[0] == 0  # both deregistered: drained, not abandoned
