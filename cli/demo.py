"""`pgqueue demo`: a whole queue life in a few seconds, on any database (the embedded one by
default): migrate, enqueue a few hundred jobs, work them off with threads, print the stats.

The workload shows each transition once a newcomer would ask about it: priorities, dedup
keys collapsing duplicates, a failure retried at once (nack with retry_in=0), and jobs with
max_attempts=1 that go to the dead letters on their first failure.
"""
from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import click

import pgqueue

from .common import EXIT_FAILED, console, dsn, fail, print_json, shown_dsn
from .oplog import counts_table, op_counts
from .queue_cmds import stats_json, stats_table

KINDS = ("send_email", "resize_image", "refresh_report")
PRIORITIES = (0, 0, 0, 0, 10, 10, 50, 200)


def plan(n: int, seed: int = 7) -> list[pgqueue.NewJob]:
    """n jobs: mixed kinds and priorities; every 20th carries one of 5 dedup keys; every 25th
    (from the 8th) fails once; the 14th and the 114th fail for good with max_attempts=1."""
    rng = random.Random(seed)
    jobs: list[pgqueue.NewJob] = []
    for i in range(n):
        fail_mode = "never"
        max_attempts = 25
        if i % 25 == 7:
            fail_mode = "once"
        if i in (13, 113):
            fail_mode, max_attempts = "always", 1
        dedup = f"refresh-{(i // 20) % 5}" if i % 20 == 0 else None
        jobs.append(pgqueue.NewJob(
            {"n": i, "fail": fail_mode},
            kind="refresh_report" if dedup else rng.choice(KINDS),
            priority=rng.choice(PRIORITIES),
            dedup_key=dedup,
            max_attempts=max_attempts,
        ))
    return jobs


@dataclass
class Tally:
    """What the worker threads did, under one lock."""

    expected: set[int]
    settled: set[int] = field(default_factory=set)
    acked: int = 0
    retried: int = 0
    dead: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    done: threading.Event = field(default_factory=threading.Event)

    def settle(self, job_id: int, *, acked: int = 0, retried: int = 0, dead: int = 0) -> None:
        with self.lock:
            self.acked += acked
            self.retried += retried
            self.dead += dead
            if acked or dead:
                self.settled.add(job_id)
            if self.expected <= self.settled:
                self.done.set()


def handle(q: pgqueue.Queue, lease: pgqueue.Lease, tally: Tally, rng: random.Random) -> None:
    """Run one job: fail it as its payload says, else do a millisecond of work and ack."""
    try:
        body: Any = json.loads(lease.payload)
    except ValueError:
        body = {}
    mode = body.get("fail") if isinstance(body, dict) else None
    if mode == "always" or (mode == "once" and lease.attempts == 0):
        went_dead = q.nack(lease, error=f"demo: failing on purpose ({mode})", retry_in=0)
        tally.settle(lease.job_id, dead=int(went_dead), retried=int(not went_dead))
        return
    time.sleep(rng.uniform(0, 0.002))
    q.ack(lease)
    tally.settle(lease.job_id, acked=1)


def work(q: pgqueue.Queue, tally: Tally, index: int, deadline: float,
         errors: list[BaseException]) -> None:
    """One worker thread: lease a few, settle each, until every demo job is settled."""
    rng = random.Random(index)
    try:
        while not tally.done.is_set() and time.monotonic() < deadline:
            leases = q.lease(limit=8, visibility_timeout=30.0, worker_instance=index)
            if not leases:
                tally.done.wait(0.02)
                continue
            for lease in leases:
                handle(q, lease, tally, rng)
    except BaseException as exc:  # reported by the main thread, which owns the exit code
        errors.append(exc)
        tally.done.set()


def run(q: pgqueue.Queue, jobs: Sequence[pgqueue.NewJob], threads: int,
        timeout: float) -> tuple[Tally, list[int], float]:
    """Enqueue `jobs` and work them off with `threads` threads; (tally, ids, seconds)."""
    started = time.monotonic()
    ids = q.enqueue_many(jobs)
    tally = Tally(expected=set(ids))
    errors: list[BaseException] = []
    workers = [
        threading.Thread(target=work, args=(q, tally, i + 1, started + timeout, errors),
                         name=f"pgqueue-demo-{i + 1}", daemon=True)
        for i in range(threads)
    ]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    if errors:
        raise errors[0]
    return tally, ids, time.monotonic() - started


@click.command()
@click.option("--jobs", "n_jobs", type=click.IntRange(1, 100_000), default=300,
              show_default=True, help="How many jobs to enqueue.")
@click.option("--threads", type=click.IntRange(1, 64), default=4, show_default=True,
              help="Worker threads, each with its own lease/ack loop.")
@click.option("--stream", default="demo", show_default=True, help="The stream to use.")
@click.option("--timeout", type=click.FloatRange(min=1), default=60.0, show_default=True,
              metavar="SECONDS", help="Give up (exit 1) when the jobs are not done by then.")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
def demo(n_jobs: int, threads: int, stream: str, timeout: float, as_json: bool) -> None:
    """Enqueue a few hundred jobs, work them off with threads, print stats and op counts.

    Migrates the database first, so it runs on a brand-new embedded server. Safe to run
    again: each run adds its dead letters to the stream.
    """
    target = dsn()
    pgqueue.migrate(target)
    jobs = plan(n_jobs)
    with pgqueue.Queue(target, stream=stream, pool_size=threads + 1) as q:
        tally, ids, seconds = run(q, jobs, threads, timeout)
        rows = q.stats()
        ops = op_counts(q)
    distinct = len(set(ids))
    outcome = {
        "database": shown_dsn(target), "stream": stream, "enqueued": len(jobs),
        "distinct_jobs": distinct, "deduplicated": len(jobs) - distinct,
        "acked": tally.acked, "retried": tally.retried, "dead": tally.dead,
        "seconds": round(seconds, 3), "stats": stats_json(rows), "op_counts": ops,
    }
    if as_json:
        print_json(outcome)
    else:
        out = console()
        out.print(f"pgqueue demo on {shown_dsn(target)}, stream {stream!r}: enqueued "
                  f"{len(jobs)} jobs ({distinct} after dedup), {threads} threads; "
                  f"acked {tally.acked}, retried {tally.retried}, dead {tally.dead} in "
                  f"{seconds:.2f}s", soft_wrap=True)
        out.print(stats_table(rows))
        out.print(counts_table(ops))
    if not tally.done.is_set():
        fail(f"demo: {len(tally.expected - tally.settled)} jobs not done after {timeout}s",
             EXIT_FAILED)
