"""Step replay (pgqueue/runtime/steps.py): the cursor codec, what StepContext keeps in memory and
what reaches the database when, and where a resumed job starts.

The first tests drive steps.run with a recording Settler (no database); the rest run a
pgqueue.Worker in a thread and read the job row and its ops while steps block.
"""
from __future__ import annotations

import base64
import datetime as dt
import threading
import time
from typing import Any

import pytest

import pgqueue
from pgqueue.models import Checkpoint, Lease
from pgqueue.runtime import steps
from pgqueue.runtime.jobdefs import StepJob
from pgqueue.runtime.running import Held, encode_cursor
from pgqueue.runtime.steps import StepContext
from tests.dbhelp import wait_for
from tests.integration.runtime.test_worker import b64, gone, job, ops, running, simulate_crash

pytestmark = pytest.mark.layouts("single", "citus", "stock")

NOW = dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc)


def a_lease(checkpoint: Checkpoint | None = None, payload: bytes = b"{}") -> Lease:
    return Lease(lease_id=11, job_id=7, stream="default", kind="k", payload=payload, priority=0,
                 attempts=0, max_attempts=25, enqueued_at=NOW, expires_at=NOW,
                 checkpoint=checkpoint or Checkpoint())


class RecordingSettler:
    """A Settler that records the checkpoint of every write instead of writing it."""

    def __init__(self, step_lists: dict[str, list[dict[str, Any]]] | None = None) -> None:
        self.writes: list[Checkpoint] = []
        self.acked = False
        self.undecodable: list[tuple[str, dict[str, Any]]] = []
        self.step_lists = step_lists or {}

    def write_checkpoint(self, held: Held) -> None:
        checkpoint, version = held.snapshot()
        self.writes.append(checkpoint)
        held.mark_flushed(version)

    def ack(self, held: Held) -> None:
        self.acked = True

    def mark_undecodable(self, held: Held, reason: str, detail: dict[str, Any]) -> None:
        self.undecodable.append((reason, detail))

    def upcast(self, held: Held, payload: bytes, schema_version: int) -> None:
        held.payload = payload

    def step_list(self, step_set_hash: str) -> list[dict[str, Any]] | None:
        return self.step_lists.get(step_set_hash)


def where(cp: Checkpoint) -> tuple[str | None, str | None, bytes | None]:
    return cp.last_completed_step, cp.cursor_step, cp.cursor


# -- the cursor codec and StepContext, without a database -------------------------------------


@pytest.mark.parametrize(("cursor", "stored"), [
    (b"", b""),
    (b"\x00\xff\x80raw", b"\x00\xff\x80raw"),
    (bytearray(b"ba"), b"ba"),
    (memoryview(b"mv"), b"mv"),
    ("", b""),
    ("page-17", b"page-17"),
    ("snowman \u2603", "snowman \u2603".encode()),
    (0, b"0"),
    (42, b"42"),
    (-5, b"-5"),
    (2**70, str(2**70).encode()),
])
def test_cursors_are_encoded_bytes_as_is_str_as_utf8_int_as_digits(
        cursor: Any, stored: bytes) -> None:
    encoded = encode_cursor(cursor)
    assert encoded == stored and type(encoded) is bytes


@pytest.mark.parametrize("cursor", [True, 1.5, None, ["a"], {"k": 1}])
def test_other_cursor_types_are_refused(cursor: Any) -> None:
    with pytest.raises(TypeError, match="cursor must be bytes, str or int"):
        encode_cursor(cursor)


def test_advance_keeps_the_cursor_in_memory_and_checkpoint_now_writes_it() -> None:
    held = Held(a_lease(Checkpoint(cursor_step="s")), 30.0)
    settler = RecordingSettler()
    ctx = StepContext(held, "s", settler)
    assert ctx.cursor is None and not held.dirty
    ctx.advance("\u00e9t\u00e9")
    assert ctx.cursor == "\u00e9t\u00e9".encode() and held.checkpoint.cursor == ctx.cursor
    assert held.dirty and settler.writes == []  # only in memory until a renewal
    ctx.advance(7)
    ctx.advance(b"\x00k")
    assert ctx.cursor == b"\x00k"
    ctx.checkpoint_now()
    assert [w.cursor for w in settler.writes] == [b"\x00k"]
    assert not held.dirty
    assert (ctx.step, ctx.job_id, ctx.attempts) == ("s", 7, 0)


def test_advance_on_a_lost_lease_raises_and_keeps_the_cursor() -> None:
    held = Held(a_lease(Checkpoint(cursor_step="s")), 30.0)
    ctx = StepContext(held, "s", RecordingSettler())
    ctx.advance(1)
    held.lost.set()
    assert ctx.lease_lost
    with pytest.raises(pgqueue.LeaseLost):
        ctx.advance(2)
    with pytest.raises(pgqueue.LeaseLost):
        ctx.checkpoint_now()
    assert ctx.cursor == b"1"


def test_run_writes_each_step_boundary_once_and_clears_the_cursor() -> None:
    job_ = StepJob(kind="k")
    job_.step("a")(lambda ctx: ctx.advance("a-done"))
    job_.step("b")(lambda ctx: ctx.advance(2))
    held = Held(a_lease(), 30.0)
    settler = RecordingSettler()
    steps.run(job_, held, settler)
    # Entering a; finishing a and entering b in one write; finishing b. The step-local cursor
    # advanced in a never leaks into b, and the final write clears it.
    assert [where(w) for w in settler.writes] == [
        (None, "a", None), ("a", "b", None), ("b", None, None)]
    assert all(w.step_set_hash == job_.step_set_hash for w in settler.writes)
    assert all(w.schema_version == 1 for w in settler.writes)
    assert settler.acked


def test_a_raising_step_writes_its_cursor_before_the_error_propagates() -> None:
    job_ = StepJob(kind="k")

    @job_.step("a")
    def a(ctx: StepContext) -> None:
        ctx.advance(3)
        raise RuntimeError("boom")

    held = Held(a_lease(), 30.0)
    settler = RecordingSettler()
    with pytest.raises(RuntimeError, match="boom"):
        steps.run(job_, held, settler)
    assert [where(w) for w in settler.writes] == [(None, "a", None), (None, "a", b"3")]
    assert not settler.acked


# -- through the database ----------------------------------------------------------------------

CURSORS: list[bytes | str | int] = [
    b"", bytes(range(256)), b"\x00", "snowman \u2603", "x" * 5000, 0, -5, 2**70]


def test_cursors_round_trip_exactly_through_the_database(dsn: str, q: pgqueue.Queue) -> None:
    q.configure_stream(retry_base=0.01)
    app = pgqueue.App()
    rt = app.step_job("rt")
    resumed: dict[int, bytes | None] = {}

    @rt.step("s")
    def s(ctx: StepContext) -> None:
        i = ctx.json()["i"]
        if ctx.attempts == 0:
            ctx.advance(CURSORS[i])
            ctx.checkpoint_now()
            raise RuntimeError("fail after the checkpoint")
        resumed[i] = ctx.cursor

    ids = [q.enqueue({"i": i}, kind="rt", schema_version=1) for i in range(len(CURSORS))]
    with running(app, dsn, concurrency=4):
        wait_for(lambda: gone(q, *ids), 20, "every job to be retried and acked")
    expected = {i: c if isinstance(c, bytes) else str(c).encode() for i, c in enumerate(CURSORS)}
    assert resumed == expected
    assert all(type(c) is bytes for c in resumed.values())


def test_entering_a_step_writes_cursor_step_at_once_and_finishing_writes_last_completed(
        dsn: str, q: pgqueue.Queue) -> None:
    app = pgqueue.App()
    three = app.step_job("three")
    entered = {n: threading.Event() for n in "abc"}
    proceed = {n: threading.Event() for n in "abc"}

    def block(ctx: StepContext) -> None:
        ctx.advance(f"{ctx.step}-9")  # in memory only: no renewal runs during this test
        entered[ctx.step].set()
        assert proceed[ctx.step].wait(10)

    for name in "abc":
        three.step(name)(block)

    job_id = q.enqueue({}, kind="three", schema_version=1)
    with running(app, dsn, visibility_timeout=60, renew_interval=30):
        seen = []
        for name in "abc":
            assert entered[name].wait(10)
            seen.append(job(q, job_id).checkpoint)
            proceed[name].set()
        wait_for(lambda: gone(q, job_id), 10, "the ack")
    assert [where(cp) for cp in seen] == [
        (None, "a", None), ("a", "b", None), ("b", "c", None)]
    assert all(cp.step_set_hash == three.step_set_hash for cp in seen)
    assert all(cp.schema_version == 1 for cp in seen)
    # One write per boundary, the last one finishing c and clearing the cursor, then the ack.
    history = [o for o in ops(q, job_id) if o.op != "Promote"]
    assert [o.op for o in history] == ["Enqueue", "Lease"] + ["Renew"] * 4 + ["Ack"]
    last = history[-2].body["checkpoint"]
    assert (last["last_completed_step"], last["cursor_step"], last["cursor"]) == ("c", None, None)


def test_advance_is_written_by_the_next_renewal(dsn: str, q: pgqueue.Queue) -> None:
    app = pgqueue.App()
    one = app.step_job("one")
    advanced, proceed = threading.Event(), threading.Event()

    @one.step("s")
    def s(ctx: StepContext) -> None:
        ctx.advance("k1")
        advanced.set()
        assert proceed.wait(10)

    job_id = q.enqueue({}, kind="one", schema_version=1)
    with running(app, dsn, visibility_timeout=3, renew_interval=0.2):
        assert advanced.wait(10)
        started = time.monotonic()
        wait_for(lambda: job(q, job_id).checkpoint.cursor == b"k1", 5, "the renewal")
        assert time.monotonic() - started < 1.5
        proceed.set()
        wait_for(lambda: gone(q, job_id), 10, "the ack")


def test_checkpoint_now_writes_at_once_without_waiting_for_a_renewal(
        dsn: str, q: pgqueue.Queue) -> None:
    app = pgqueue.App()
    one = app.step_job("one")
    advanced, flushed = threading.Event(), threading.Event()
    proceed, finish = threading.Event(), threading.Event()

    @one.step("s")
    def s(ctx: StepContext) -> None:
        ctx.advance("k1")
        advanced.set()
        assert proceed.wait(10)
        ctx.advance("k2")
        ctx.checkpoint_now()
        flushed.set()
        assert finish.wait(10)

    job_id = q.enqueue({}, kind="one", schema_version=1)
    with running(app, dsn, visibility_timeout=60, renew_interval=30) as worker:
        assert advanced.wait(10)
        (held,) = worker._leases.snapshot()
        assert held.dirty  # advance() left its cursor in memory for the renewal, 30 s away,
        assert job(q, job_id).checkpoint.cursor is None  # and wrote nothing
        proceed.set()
        assert flushed.wait(10)
        assert job(q, job_id).checkpoint.cursor == b"k2"
        finish.set()
        wait_for(lambda: gone(q, job_id), 10, "the ack")
    written = [o.body["checkpoint"]["cursor"] for o in ops(q, job_id)
               if isinstance(o.body.get("checkpoint"), dict)]
    # the step's entry, checkpoint_now, the step's end: no write ever carried k1
    assert written == [None, b64(b"k2"), None], written


@pytest.mark.parametrize(("last_completed", "cursor_step", "cursor", "expected"), [
    ("a", "b", b"\x00\xffraw", [("b", b"\x00\xffraw"), ("c", None)]),
    (None, "a", b"7", [("a", b"7"), ("b", None), ("c", None)]),
    ("a", "b", None, [("b", None), ("c", None)]),
    ("a", None, None, [("b", None), ("c", None)]),
    ("c", None, None, []),
], ids=["in b with a cursor", "in a with a cursor", "in b without a cursor",
        "between a and b", "all steps done"])
def test_a_resumed_job_skips_completed_steps_and_gets_its_cursor_only_in_its_step(
        dsn: str, q: pgqueue.Queue, last_completed: str | None, cursor_step: str | None,
        cursor: bytes | None, expected: list[tuple[str, bytes | None]]) -> None:
    app = pgqueue.App()
    three = app.step_job("three")
    calls: list[tuple[str, bytes | None]] = []
    for name in "abc":
        three.step(name)(lambda ctx: calls.append((ctx.step, ctx.cursor)))
    job_id = simulate_crash(q, dsn, three, last_completed=last_completed,
                            cursor_step=cursor_step, cursor=cursor)
    with running(app, dsn):
        wait_for(lambda: gone(q, job_id), 10, "the resumed job to finish")
    assert calls == expected


def test_rewind_runs_a_completed_step_again(dsn: str, q: pgqueue.Queue) -> None:
    app = pgqueue.App()
    three = app.step_job("three")
    calls: list[tuple[str, bytes | None]] = []
    for name in "abc":
        three.step(name)(lambda ctx: calls.append((ctx.step, ctx.cursor)))
    job_id = simulate_crash(q, dsn, three, last_completed="b", cursor_step="c", cursor=b"3")
    q.rewind(job_id, "b")
    cp = job(q, job_id).checkpoint
    assert where(cp) == ("a", None, None)
    with running(app, dsn):
        wait_for(lambda: gone(q, job_id), 10, "the rewound job to finish")
    assert calls == [("b", None), ("c", None)]
    rewinds = [o for o in ops(q, job_id) if o.op == "Rewind"]
    assert len(rewinds) == 1 and rewinds[0].body["checkpoint"]["cursor"] is None
    assert base64.b64encode(b"3").decode() not in str(rewinds[0].body)
