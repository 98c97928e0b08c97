"""The operator's commands on one job: inspect, release, rewind, restart, skip-step,
accept-step-set, cancel, set-threshold. Each is checked through the library (state, checkpoint,
op log), and each refusal exits 1 with a message naming why and changes nothing."""
from __future__ import annotations

import json
import time
from typing import Any

from psycopg.types.json import Jsonb

import pgqueue
from pgqueue.db import connection, queries
from pgqueue.runtime.running import Held
from pgqueue.runtime.steps import _run_steps
from tests.acceptance.clihelp import ok, run
from tests.dbhelp import lease_long_ago

STEPS = [{"name": "download", "version": 1}, {"name": "transform", "version": 1},
         {"name": "upload", "version": 1}]




def refused(dsn: str, *args: str, needle: str) -> None:
    result = run(dsn, *args)
    assert result.exit_code == 1, (result.exit_code, result.stdout, result.stderr)
    assert needle in result.stderr, result.stderr


def ops(q: pgqueue.Queue, job_id: int) -> list[str]:
    return [o.op for o in reversed(q.op_log(job_id=job_id, limit=1000))]


def step_app() -> pgqueue.App:
    app = pgqueue.App()
    job = app.step_job("resize")
    for name in ("download", "transform", "upload"):
        job.step(name)(lambda ctx: None)
    return app


def quarantined_step_job(q: pgqueue.Queue, dsn: str) -> int:
    """A step job whose 'transform' step crashed three times (quarantined), by the real
    worker code path for the checkpoint and by lease expiry for the crashes."""
    app = step_app()
    job_id = app.enqueue(q, "resize", b"img")
    handler = app.handlers["resize"]
    assert isinstance(handler, pgqueue.StepJob) and handler.step_list == STEPS
    with q.connection() as conn:  # what a worker does when it starts
        queries.fetch(conn, "register_step_set", {
            "hash": handler.step_set_hash, "kind": "resize", "steps": Jsonb(handler.step_list)})
    cp = pgqueue.Checkpoint(last_completed_step="download", cursor_step="transform",
                            cursor=b"7", schema_version=1, step_set_hash=handler.step_set_hash)
    for _ in range(3):
        assert len(lease_long_ago(dsn, q.stream, checkpoint=cp)) == 1  # long expired now
        assert q.reclaim_expired() == 1
    info = q.job(job_id)
    assert info is not None and info.state == "quarantined"
    return job_id


def test_inspect_shows_checkpoint_steps_and_crashes(q: pgqueue.Queue, dsn: str) -> None:
    job_id = quarantined_step_job(q, dsn)
    data = json.loads(ok(dsn, "jobs", "inspect", str(job_id), "--json").stdout)
    assert data["state"] == "quarantined" and data["state_reason"] == "crashed"
    assert data["state_detail"]["step"] == "transform" and data["state_detail"]["crashes"] == 3
    assert [s["name"] for s in data["steps"]] == ["download", "transform", "upload"]
    assert data["checkpoint"]["crashes_by_step"] == {"transform": 3}
    assert data["checkpoint"]["last_completed_step"] == "download"
    people = ok(dsn, "jobs", "inspect", str(job_id)).stdout
    assert "in progress" in people and "completed" in people and "crashed" in people
    assert run(dsn, "jobs", "inspect", "999999").exit_code == 1


def test_release_with_and_without_resetting_crashes(q: pgqueue.Queue, dsn: str) -> None:
    job_id = quarantined_step_job(q, dsn)
    ok(dsn, "jobs", "release", str(job_id))
    info = q.job(job_id)
    assert info is not None and info.state == "pending" and info.state_reason is None
    assert info.checkpoint.crashes_by_step == {"transform": 3}
    assert info.checkpoint.cursor == b"7"  # the checkpoint is kept
    refused(dsn, "jobs", "release", str(job_id), needle="quarantined or undecodable")
    assert len(lease_long_ago(dsn, q.stream)) == 1
    q.reclaim_expired()  # one more crash: back to quarantine at once (4 >= 3)
    assert q.job(job_id).state == "quarantined"  # type: ignore[union-attr]
    data = json.loads(ok(dsn, "jobs", "release", str(job_id), "--reset-crashes", "--json").stdout)
    assert data["state"] == "pending" and data["checkpoint"]["crashes_by_step"] == {}
    assert ops(q, job_id).count("Release") == 2


def test_rewind_restart_and_skip_step(q: pgqueue.Queue, dsn: str) -> None:
    job_id = quarantined_step_job(q, dsn)
    ok(dsn, "jobs", "skip-step", str(job_id))
    info = q.job(job_id)
    assert info is not None and info.state == "pending"
    assert info.checkpoint.last_completed_step == "transform" and info.checkpoint.cursor is None
    ok(dsn, "jobs", "rewind", str(job_id), "--to-step", "download")
    info = q.job(job_id)
    assert info is not None and info.checkpoint.last_completed_step is None
    refused(dsn, "jobs", "rewind", str(job_id), "--to-step", "nope", needle="download, transform")
    ok(dsn, "jobs", "rewind", str(job_id), "--to-step", "upload")
    assert q.job(job_id).checkpoint.last_completed_step == "transform"  # type: ignore[union-attr]
    ok(dsn, "jobs", "restart", str(job_id))
    info = q.job(job_id)
    assert info is not None and info.checkpoint.step_set_hash is None
    assert info.checkpoint.last_completed_step is None and info.checkpoint.crashes_by_step == {}
    refused(dsn, "jobs", "skip-step", str(job_id), needle="no recorded step list")
    assert [o for o in ops(q, job_id) if o in ("SkipStep", "Rewind", "Restart")] == [
        "SkipStep", "Rewind", "Rewind", "Restart"]


def test_operator_commands_refuse_a_leased_job_and_cancel_asks_its_worker(
        q: pgqueue.Queue, dsn: str) -> None:
    job_id = q.enqueue(b"x")
    (lease,) = q.lease(1)
    before = ops(q, job_id)
    for args in (["release", str(job_id)], ["restart", str(job_id)],
                 ["skip-step", str(job_id)], ["rewind", str(job_id), "--to-step", "a"],
                 ["accept-step-set", str(job_id)]):
        refused(dsn, "jobs", *args, needle="leased")
    assert ops(q, job_id) == before
    # cancel is the one verb a leased job takes: its worker is asked to stop it
    out = ok(dsn, "jobs", "cancel", str(job_id)).stdout
    assert f"cancel of job {job_id} requested" in out
    assert json.loads(ok(dsn, "jobs", "cancel", str(job_id), "--json").stdout) == {
        "job_id": job_id, "cancelled": False, "outcome": "requested"}
    assert ops(q, job_id) == [*before, "RequestCancel"]
    q.ack(lease)  # its handler finished first: too late
    history = q.history(job_id)
    assert history is not None and history.cancel == "too late"


def test_cancel_removes_pending_and_dead_jobs_for_good(q: pgqueue.Queue, dsn: str) -> None:
    pending = q.enqueue(b"p")
    dead = q.enqueue(b"d", max_attempts=1, priority=9)
    (lease,) = q.lease(1)
    assert lease.job_id == dead
    q.nack(lease, error="boom")
    assert q.job(dead).state == "dead"  # type: ignore[union-attr]
    for job_id in (pending, dead):
        ok(dsn, "jobs", "cancel", str(job_id))
        assert q.job(job_id) is None
        assert ops(q, job_id)[-1] == "Cancel"
    refused(dsn, "jobs", "cancel", str(pending), needle="no job")


def test_accept_step_set_only_for_step_set_changed(q: pgqueue.Queue, dsn: str) -> None:
    job_id = quarantined_step_job(q, dsn)
    refused(dsn, "jobs", "accept-step-set", str(job_id), needle="undecodable")


def test_set_threshold_records_a_kind_override_reclaim_uses(q: pgqueue.Queue, dsn: str) -> None:
    ok(dsn, "jobs", "set-threshold", "fragile", "--quarantine-after", "1")
    job_id = q.enqueue(b"x", kind="fragile")
    assert len(lease_long_ago(dsn, q.stream)) == 1
    q.reclaim_expired()
    info = q.job(job_id)
    assert info is not None and info.state == "quarantined"
    ok(dsn, "jobs", "set-threshold", "fragile")  # removes the override
    with connection.connect(dsn) as conn:
        rows: list[Any] = conn.execute("SELECT * FROM pgqueue.kind_config").fetchall()
    assert rows == []


def test_a_step_job_resumes_after_release_at_its_step(q: pgqueue.Queue, dsn: str) -> None:
    """After release the real step runner resumes at 'transform' with the saved cursor."""
    job_id = quarantined_step_job(q, dsn)
    ok(dsn, "jobs", "release", str(job_id), "--reset-crashes")
    seen: list[tuple[str, bytes | None]] = []
    app = pgqueue.App()
    job = app.step_job("resize")
    for name in ("download", "transform", "upload"):
        job.step(name)(lambda ctx, n=name: seen.append((n, ctx.cursor)))

    class Direct:
        def write_checkpoint(self, held: Held) -> None:
            cp, version = held.snapshot()
            q.renew(held.lease, checkpoint=cp)
            held.mark_flushed(version)

        def ack(self, held: Held) -> None:
            q.ack(held.lease)

        def mark_undecodable(self, held: Held, reason: str, detail: dict[str, Any]) -> None:
            raise AssertionError(reason)

        def upcast(self, held: Held, payload: bytes, schema_version: int) -> None:
            raise AssertionError("no upcast expected")

        def step_list(self, step_set_hash: str) -> list[dict[str, Any]] | None:
            return q.step_list(step_set_hash)

    (lease,) = q.lease(1)
    _run_steps(job, Held(lease, 30.0), Direct())
    assert seen == [("transform", b"7"), ("upload", None)]
    assert q.job(job_id) is None


def test_bench_reports_every_phase_and_leaves_no_job_behind(q: pgqueue.Queue, dsn: str) -> None:
    data = json.loads(ok(dsn, "bench", "--jobs", "1000", "--single", "20", "--json").stdout)
    names = [f["name"] for f in data["figures"]]
    assert names == ["enqueue, one per call", "enqueue, batches of 500",
                     "lease+ack, batches of 1", "lease+ack, batches of 100"]
    assert all(f["value"] > 0 for f in data["figures"])
    assert [s for s in q.stats() if s.stream == "pgqueue-bench"] == []
    with connection.connect(dsn) as conn:
        acks = conn.execute("SELECT count(*) FROM pgqueue.op_log WHERE op = 'Ack' "
                            "AND stream = 'pgqueue-bench'").fetchone()
    assert acks is not None and acks[0] == 1020


def test_the_example_app_runs_its_jobs_in_a_worker(q: pgqueue.Queue, dsn: str) -> None:
    import threading

    from examples.demo_app import app

    ids = [app.enqueue(q, "hello", b"hi"), app.enqueue(q, "resize", b"{}")]
    worker = pgqueue.Worker(app, dsn, poll_interval=0.05, maintenance=False)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while any(q.job(i) is not None for i in ids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [q.job(i) for i in ids] == [None, None]  # both acked
        assert ops(q, ids[1]).count("Renew") == 4  # three step entries and the last completion
    finally:
        worker.stop()
        thread.join(10)


def _dead(q: pgqueue.Queue, n: int, kind: str = "mail") -> list[int]:
    ids = [q.enqueue({"i": i}, kind=kind, max_attempts=1) for i in range(n)]
    for lease in q.lease(limit=n):
        q.nack(lease, error="boom")
    return ids


def test_bulk_acts_on_the_jobs_counted_and_lists_the_refused(dsn: str, q: pgqueue.Queue) -> None:
    dead = _dead(q, 3)
    other = _dead(q, 1, kind="report")
    result = run(dsn, "jobs", "bulk", "requeue", "--state", "dead", "--kind", "mail",
                 input="n\n")
    assert result.exit_code == 1 and "requeue 3 jobs?" in result.stderr
    assert all(q.job(i).state == "dead" for i in dead)  # type: ignore[union-attr]
    out = json.loads(ok(dsn, "jobs", "bulk", "requeue", "--state", "dead", "--kind", "mail",
                        "--yes", "--json").stdout)
    assert out == {"action": "requeue", "done": 3, "refused": 0, "requested": 0, "reasons": []}
    assert [q.job(i).state for i in dead] == ["pending"] * 3  # type: ignore[union-attr]
    assert [ops(q, i)[-1] for i in dead] == ["RequeueDeadLetter"] * 3
    assert q.job(other[0]).state == "dead"  # type: ignore[union-attr]  # not of the filter
    # release fits none of the pending jobs: each is refused with why, nothing changes
    out = json.loads(ok(dsn, "jobs", "bulk", "release", "--kind", "mail", "--yes", "--json").stdout)
    assert out["done"] == 0 and out["refused"] == 3
    assert all("cannot release" in r["why"] for r in out["reasons"])
    # cancel: a pending job goes at once, a leased one is asked to stop (not counted as done)
    pending = q.enqueue(b"p", kind="cancel-me")
    q.enqueue(b"l", kind="cancel-me", priority=10)  # leased first
    (held,) = q.lease(limit=1)
    out = json.loads(ok(dsn, "jobs", "bulk", "cancel", "--kind", "cancel-me", "--yes",
                        "--json").stdout)
    assert (out["done"], out["requested"], out["refused"]) == (1, 1, 0)
    assert q.job(pending) is None
    asked = q.job(held.job_id)
    assert asked is not None and asked.state == "leased" and asked.cancel_requested_at
    said = ok(dsn, "jobs", "bulk", "cancel", "--kind", "cancel-me", "--yes").stdout
    assert "cancel: 0 jobs done, 0 refused, 1 leased jobs asked to stop" in said
    nothing = ok(dsn, "jobs", "bulk", "cancel", "--state", "quarantined", "--yes")
    assert "no job matches" in nothing.stdout
    bad = run(dsn, "jobs", "bulk", "rewind", "--state", "dead", "--yes")
    assert bad.exit_code == 2 and "--to-step" in bad.stderr
