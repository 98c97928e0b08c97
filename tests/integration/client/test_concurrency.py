"""Concurrency: many worker processes drain one stream; every job is acked exactly once and no
job is ever held by two live leases.

Each worker is a separate process (multiprocessing, 'spawn') with its own connection. The
verdict comes from the op log, which records every transition of every job in the order the
job's row lock serialised them, and from what each worker says it did: the two must agree
exactly, so a write that raised LeaseLost is one the log never saw.
"""
from __future__ import annotations

import json
import multiprocessing as mp
import random
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from multiprocessing.synchronize import Barrier, Event
from pathlib import Path
from typing import Any

import pytest

import pgqueue
from pgqueue.db import connection

JOBS = 10_000
ENQUEUE_BATCH = 500
WORKERS = 8
TIME_LIMIT = 50.0  # seconds a test's workers may run before they give up (and the test fails)

Pair = tuple[int, int]  # (job_id, lease_id)
#: (seq, op, job_id, lease_id, ms): ms is the new expiry of a Lease or Renew, the time of a
#: Reclaim (epoch milliseconds), else None.
OpRow = tuple[int, str, int, int | None, int | None]


@dataclass(frozen=True)
class Plan:
    """What one worker process does; picklable, so it crosses the spawn boundary."""

    dsn: str
    stream: str
    seed: int
    out: str                      # where the worker writes its Report as JSON
    deadline: float               # time.time() after which it gives up
    visibility: float = 30.0      # lease visibility timeout, seconds
    nack_rate: float = 0.0        # chance a leased job is nacked (retry_in=0) instead of acked
    renew_rate: float = 0.0       # chance a leased job is renewed (with a checkpoint) first
    slow_rate: float = 0.0        # chance a batch sleeps past its visibility timeout first


@dataclass
class Report:
    """What one worker did, as (job_id, lease_id) pairs; lost = writes that raised LeaseLost
    (or, for batch acks, were left out of the acked set)."""

    acked: list[Pair] = field(default_factory=list)
    nacked: list[Pair] = field(default_factory=list)
    renewed: list[Pair] = field(default_factory=list)
    lost: list[tuple[str, int, int]] = field(default_factory=list)  # (write, job_id, lease_id)
    reclaimed: int = 0
    batches: int = 0


def jobs_left(q: pgqueue.Queue) -> int:
    """Jobs of the queue's stream in any set (live, parked or dead)."""
    return sum(s.count for s in q.stats() if s.stream == q.stream)


def finished(q: pgqueue.Queue, enqueued: Event) -> bool:
    return enqueued.is_set() and jobs_left(q) == 0


def worker(plan: Plan, start: Barrier, enqueued: Event) -> None:
    """Lease batches of random size and settle them until the stream is drained."""
    rng = random.Random(plan.seed)
    report = Report()
    checkpoint = pgqueue.Checkpoint(cursor_step="work", cursor=b"\x01")
    with pgqueue.Queue(plan.dsn, plan.stream, pool_size=1) as q:
        start.wait(TIME_LIMIT)  # every process connected before the first job arrives
        while time.time() < plan.deadline:
            leases = q.lease(rng.randint(1, 50), visibility_timeout=plan.visibility,
                             worker_instance=plan.seed)
            if not leases:
                if finished(q, enqueued):
                    break
                time.sleep(0.005)
                continue
            report.batches += 1
            slow = rng.random() < plan.slow_rate
            if slow:  # a stalled worker: its leases expire and the reclaimer takes them
                time.sleep(plan.visibility * 1.75)
            to_ack: list[pgqueue.Lease] = []
            for held in leases:
                if rng.random() < plan.renew_rate:
                    try:
                        q.renew(held, checkpoint=checkpoint)
                        report.renewed.append((held.job_id, held.lease_id))
                    except pgqueue.LeaseLost:
                        report.lost.append(("renew", held.job_id, held.lease_id))
                        continue  # the job is someone else's now
                if rng.random() < plan.nack_rate:
                    try:
                        q.nack(held, error="transient", retry_in=0)
                        report.nacked.append((held.job_id, held.lease_id))
                    except pgqueue.LeaseLost:
                        report.lost.append(("nack", held.job_id, held.lease_id))
                else:
                    to_ack.append(held)
            if slow:  # one at a time, so a lost lease raises
                for held in to_ack:
                    try:
                        q.ack(held)
                        report.acked.append((held.job_id, held.lease_id))
                    except pgqueue.LeaseLost:
                        report.lost.append(("ack", held.job_id, held.lease_id))
            else:
                done = q.ack_many(to_ack)
                for held in to_ack:
                    if held.job_id in done:
                        report.acked.append((held.job_id, held.lease_id))
                    else:
                        report.lost.append(("ack", held.job_id, held.lease_id))
    Path(plan.out).write_text(json.dumps(asdict(report)))


def reclaimer(plan: Plan, start: Barrier, enqueued: Event) -> None:
    """Reclaim expired leases every few milliseconds until the stream is drained."""
    report = Report()
    with pgqueue.Queue(plan.dsn, plan.stream, pool_size=1) as q:
        start.wait(TIME_LIMIT)  # every process connected before the first job arrives
        while time.time() < plan.deadline and not finished(q, enqueued):
            report.reclaimed += q.reclaim_expired()
            time.sleep(0.02)
    Path(plan.out).write_text(json.dumps(asdict(report)))


# -------------------------------------------------------------------------------------------
# Running a drain and reading the verdict from the op log
# -------------------------------------------------------------------------------------------

@dataclass
class Outcome:
    job_ids: list[int]
    reports: list[Report]
    ops: list[OpRow]
    left: int
    seconds: float


def load(path: Path) -> Report:
    raw: dict[str, Any] = json.loads(path.read_text())
    return Report(
        acked=[(j, le) for j, le in raw["acked"]],
        nacked=[(j, le) for j, le in raw["nacked"]],
        renewed=[(j, le) for j, le in raw["renewed"]],
        lost=[(w, j, le) for w, j, le in raw["lost"]],
        reclaimed=raw["reclaimed"], batches=raw["batches"],
    )


def drain(dsn: str, tmp: Path, *, with_reclaimer: bool = False, **knobs: float) -> Outcome:
    """Start the workers (and a reclaimer), enqueue JOBS in batches while they run, wait."""
    stream = "work"
    with pgqueue.Queue(dsn, stream) as q:
        # Unlimited attempts and no crash quarantine: every job must end acked.
        q.configure_stream(quarantine_after=1_000_000)
    ctx = mp.get_context("spawn")
    start = ctx.Barrier(WORKERS + int(with_reclaimer) + 1)
    enqueued = ctx.Event()
    deadline = time.time() + TIME_LIMIT
    plans = [Plan(dsn, stream, seed=i, out=str(tmp / f"worker-{i}.json"), deadline=deadline,
                  **knobs) for i in range(WORKERS)]
    procs = [ctx.Process(target=worker, args=(p, start, enqueued), name=f"worker-{p.seed}")
             for p in plans]
    if with_reclaimer:
        rp = Plan(dsn, stream, seed=99, out=str(tmp / "reclaimer.json"), deadline=deadline)
        procs.append(ctx.Process(target=reclaimer, args=(rp, start, enqueued), name="reclaimer"))
    for p in procs:
        p.start()
    began = time.monotonic()
    job_ids: list[int] = []
    try:
        start.wait(TIME_LIMIT)
        with pgqueue.Queue(dsn, stream) as q:
            for b in range(JOBS // ENQUEUE_BATCH):
                job_ids += q.enqueue_many([
                    pgqueue.NewJob({"n": b * ENQUEUE_BATCH + i}, max_attempts=0)
                    for i in range(ENQUEUE_BATCH)])
        enqueued.set()
        for p in procs:
            p.join(TIME_LIMIT + 10)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    seconds = time.monotonic() - began
    assert [p.exitcode for p in procs] == [0] * len(procs), "a worker process failed"
    reports = [load(Path(p.out)) for p in plans]
    if with_reclaimer:
        reports.append(load(tmp / "reclaimer.json"))
    with connection.connect(dsn) as conn:
        ops: list[OpRow] = [
            (int(s), str(o), int(j), None if le is None else int(le),
             None if ms is None else int(ms))
            for s, o, j, le, ms in conn.execute(
                "SELECT seq, op, job_id, lease_id,"
                " coalesce(body ->> 'expires_at_ms', body ->> 'at_ms') FROM pgqueue.op_log"
                " WHERE job_id IS NOT NULL ORDER BY seq").fetchall()]
        row = conn.execute("SELECT (SELECT count(*) FROM pgqueue.job)"
                           " + (SELECT count(*) FROM pgqueue.dead_letter)").fetchone()
    assert row is not None
    return Outcome(job_ids, reports, ops, int(row[0]), seconds)


def lease_violations(ops: Iterable[OpRow]) -> list[str]:
    """Replays each job's ops in seq order through the lease rules: a job is leased only when
    free; only its current lease may renew, ack or nack it; and it is reclaimed only by a
    reclaim that ran after the lease's latest expiry."""
    holder: dict[int, int | None] = {}
    expiry: dict[int, int] = {}
    gone: set[int] = set()
    bad: list[str] = []
    for seq, op, job, lease_id, ms in ops:
        if job in gone:
            bad.append(f"seq {seq}: {op} of job {job} after it was acked")
        elif op == "Enqueue":
            if job in holder:
                bad.append(f"seq {seq}: job {job} enqueued twice")
            holder[job] = None
        elif job not in holder:
            bad.append(f"seq {seq}: {op} of job {job} before its Enqueue")
        elif op == "Lease":
            if holder[job] is not None:
                bad.append(f"seq {seq}: job {job} leased as {lease_id} while lease "
                           f"{holder[job]} was live")
            holder[job] = lease_id
            expiry[job] = ms if ms is not None else 0
        elif op in ("Renew", "Ack", "Nack", "Reclaim"):
            if holder[job] is None or holder[job] != lease_id:
                bad.append(f"seq {seq}: {op} of job {job} with lease {lease_id}, "
                           f"current lease {holder[job]}")
            if op == "Renew":
                expiry[job] = ms if ms is not None else 0
            elif op == "Reclaim" and (ms is None or ms <= expiry[job]):
                bad.append(f"seq {seq}: job {job} reclaimed at {ms} before its lease "
                           f"{lease_id} expired at {expiry[job]}")
            if op == "Ack":
                gone.add(job)
            elif op != "Renew":
                holder[job] = None
        else:
            bad.append(f"seq {seq}: unexpected op {op} of job {job}")
    return bad


def check(outcome: Outcome) -> dict[str, int]:
    """The assertions both tests share; returns op counts for the test's own checks."""
    ids = outcome.job_ids
    assert len(ids) == JOBS and len(set(ids)) == JOBS
    assert outcome.left == 0, f"{outcome.left} jobs left in job/dead_letter"

    by_op: dict[str, list[Pair]] = defaultdict(list)
    for _seq, op, job, lease_id, _ms in outcome.ops:
        by_op[op].append((job, -1 if lease_id is None else lease_id))

    # Every job acked exactly once, by the op log.
    acks_per_job = Counter(job for job, _ in by_op["Ack"])
    assert set(acks_per_job) == set(ids)
    assert [j for j, n in acks_per_job.items() if n != 1] == []

    # No job ever held by two live leases; no write by a lease that was not current.
    bad = lease_violations(outcome.ops)
    assert bad == [], "\n".join(bad[:20])

    # What the workers say they did is exactly what the log holds, write for write.
    reported_acks = [p for r in outcome.reports for p in r.acked]
    assert Counter(reported_acks) == Counter(by_op["Ack"])
    assert Counter(p for r in outcome.reports for p in r.nacked) == Counter(by_op["Nack"])
    assert Counter(p for r in outcome.reports for p in r.renewed) == Counter(by_op["Renew"])
    assert sum(r.reclaimed for r in outcome.reports) == len(by_op["Reclaim"])

    # A write with a lost lease changed nothing: the log has no Ack or Nack by that lease,
    # and the lease was lost because it was reclaimed (nothing else takes a lease away here).
    settled = {le for _, le in by_op["Ack"]} | {le for _, le in by_op["Nack"]}
    reclaimed = {le for _, le in by_op["Reclaim"]}
    for write, job, lease_id in (x for r in outcome.reports for x in r.lost):
        assert lease_id not in settled, f"lost {write} of job {job} by lease {lease_id} landed"
        assert lease_id in reclaimed, f"lease {lease_id} of job {job} was lost but not reclaimed"
    return {op: len(pairs) for op, pairs in by_op.items()} | {
        "lost": sum(len(r.lost) for r in outcome.reports),
        "batches": sum(r.batches for r in outcome.reports),
    }


@pytest.mark.slow
def test_workers_drain_ten_thousand_jobs_each_acked_once(dsn: str, tmp_path: Path) -> None:
    outcome = drain(dsn, tmp_path)
    counts = check(outcome)
    assert counts["Lease"] == JOBS  # nothing was leased twice: no lease was lost
    assert counts["lost"] == 0
    assert counts.get("Reclaim", 0) == 0
    busy = [r.batches for r in outcome.reports]
    assert sum(1 for b in busy if b > 0) > WORKERS // 2, f"most workers idle: {busy}"
    assert outcome.seconds < 60, f"drain took {outcome.seconds:.1f} s"


@pytest.mark.slow
def test_drain_with_nacks_stalls_and_a_concurrent_reclaimer(dsn: str, tmp_path: Path) -> None:
    outcome = drain(dsn, tmp_path, with_reclaimer=True, visibility=0.2, nack_rate=0.1,
                    renew_rate=0.1, slow_rate=0.08)
    counts = check(outcome)
    # The run exercised what it is about: retries, stalls, reclaims and fenced writes.
    assert counts.get("Nack", 0) > 0
    assert counts.get("Reclaim", 0) > 0
    assert counts["lost"] > 0
    lost_kinds = {w for r in outcome.reports for w, _, _ in r.lost}
    assert "ack" in lost_kinds, lost_kinds
    assert counts["Lease"] == JOBS + counts["Nack"] + counts["Reclaim"]
    assert outcome.seconds < 60, f"drain took {outcome.seconds:.1f} s"
