"""The same workload on one server and on a Citus cluster (a coordinator and two workers).

    python bench/citus.py [--streams 8] [--jobs 20000] [--threads 4] [--batch 100]

Both run here, on this machine, with fsync on: one embedded server, and a coordinator with two
workers (Citus 14 built from tests/citus/ on first use, as the test suite builds it). On each,
`--threads` clients enqueue `--jobs` jobs in batches of `--batch` into `--streams` streams
(each client its own streams), then lease and ack them in batches of `--batch` until every
stream is empty, each through `pgqueue.Queue` against one DSN (the coordinator's on Citus).
It prints jobs/s for both phases, the CPU each server (and the client) spent per job in each
(/proc: a postmaster and its children), what one enqueue call of `--batch` jobs takes, and on
Citus where each transition ran: the calls every node executed (pg_stat_user_functions), the
streams each worker holds, the two-phase commits (pg_dist_transaction), and what the same
enqueue takes sent to the worker holding the stream directly (the coordinator's share is the
difference). Every call is one statement; on Citus it runs on the node that
holds its stream when the coordinator ran none of them.

What two cores cannot show: three servers and the clients share two cores, so the cluster's
jobs/s here is a lower bound, not what more machines give (docs/guides/citus.md says how it
should grow). Figures only.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
from rich.console import Console

import pgqueue
from pgqueue.client import enqueue
from pgqueue.client.benchmark import fresh_database, print_figures, server
from pgqueue.db import connection

# the repository's root, for the suite's Citus build and cluster (tests/citusbed.py)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.citusbed import function_calls, start_cluster, stream_group, two_phase_commits

CALLS = ("enqueue", "lease", "ack")
TICK = os.sysconf("SC_CLK_TCK")


def server_cpu(pgdata: Path) -> float:
    """CPU seconds a server has spent so far: its postmaster's own and its exited children's
    (reaped into the postmaster's cutime/cstime), plus its live children's (/proc, Linux)."""
    postmaster = int((pgdata / "postmaster.pid").read_text().split()[0])
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # exited while we looked
            continue
        pid, ppid = int(entry.name), int(fields[1])
        if pid == postmaster:
            total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
        elif ppid == postmaster:
            total += int(fields[11]) + int(fields[12])
    return total / TICK


def run_threads(threads: int, work: Callable[[int], int]) -> float:
    """Run work(i) on `threads` threads at once; jobs/s of the jobs they report."""
    done = [0] * threads

    def one(i: int) -> None:
        done[i] = work(i)

    pool = [threading.Thread(target=one, args=(i,)) for i in range(threads)]
    t0 = time.perf_counter()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return sum(done) / (time.perf_counter() - t0)


def data_directory(dsn: str) -> Path:
    """The server's data directory (a server on this machine)."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SHOW data_directory").fetchone()
    assert row is not None
    return Path(row[0])


def workload(dsn: str, streams: list[str], jobs: int, threads: int, batch: int,
             nodes: list[Path]) -> tuple[float, float, list[float], list[float]]:
    """(enqueue jobs/s, lease+ack jobs/s, CPU µs per job of each node while enqueueing, and
    while leasing and acking) of the workload against `dsn`; `nodes` are the servers' data
    directories, the client's own process last in the CPU lists."""
    mine = [streams[i::threads] for i in range(threads)]
    per_stream = jobs // len(streams)
    total = per_stream * len(streams)

    def produce(i: int) -> int:
        n = 0
        for stream in mine[i]:
            with pgqueue.Queue(dsn, stream=stream) as q:
                for start in range(0, per_stream, batch):
                    n += len(q.enqueue_many([pgqueue.NewJob(b"x" * 64)
                                             for _ in range(min(batch, per_stream - start))]))
        return n

    def consume(i: int) -> int:
        n = 0
        for stream in mine[i]:
            with pgqueue.Queue(dsn, stream=stream) as q:
                while held := q.lease(limit=batch):
                    n += len(q.ack_many(held))
        return n

    def cpu() -> list[float]:
        return [*(server_cpu(d) for d in nodes), time.process_time()]

    def per_job(before: list[float], after: list[float]) -> list[float]:
        return [(a - b) / total * 1e6 for a, b in zip(after, before, strict=True)]

    t0 = cpu()
    enq = run_threads(threads, produce)
    t1 = cpu()
    proc = run_threads(threads, consume)
    t2 = cpu()
    return enq, proc, per_job(t0, t1), per_job(t1, t2)


def cpu_row(names: list[str], enqueue_us: list[float], lease_ack_us: list[float]) -> str:
    """One figure per process: 'coordinator 120 + 80' (enqueue + lease+ack µs per job)."""
    return ", ".join(f"{n} {e:,.0f} + {p:,.0f}"
                     for n, e, p in zip([*names, "client"], enqueue_us, lease_ack_us, strict=True))


def settled_calls(dsns: list[str], before: list[dict[str, int]],
                  expected_enqueues: int) -> list[dict[str, int]]:
    """Each node's function calls once all the enqueue calls are counted and the counts stopped
    moving (a backend reports its calls when it goes idle, up to ten seconds later), or after
    20 s."""
    deadline = time.monotonic() + 20
    last: list[dict[str, int]] = []
    while True:
        now = [function_calls(d) for d in dsns]
        enqueues = sum(now[i].get("enqueue", 0) - before[i].get("enqueue", 0)
                       for i in range(len(dsns)))
        if (enqueues >= expected_enqueues and now == last) or time.monotonic() > deadline:
            return now
        last = now
        time.sleep(0.5)  # polling the statistics views


def call_ms(dsn: str, stream: str, batch: int, calls: int = 20) -> float:
    """Milliseconds one enqueue of `batch` jobs takes: the statement Queue.enqueue_many sends,
    on one connection (after three to warm up)."""
    jobs = [pgqueue.NewJob(b"x" * 64) for _ in range(batch)]
    with connection.connect(dsn) as conn:
        for _ in range(3):
            enqueue.enqueue_many(conn, stream, jobs)
        t0 = time.perf_counter()
        for _ in range(calls):
            enqueue.enqueue_many(conn, stream, jobs)
    return (time.perf_counter() - t0) / calls * 1000


def wake_ms(dsn: str, stream: str, times: int = 30) -> tuple[float, float]:
    """Milliseconds from an enqueue's call to its notification reaching a session listening
    where workers listen (the DSN given: the coordinator on Citus): the median and the worst of
    `times`, one at a time."""
    took: list[float] = []
    with connection.connect(dsn) as listener, connection.connect(dsn) as producer:
        listener.execute("LISTEN pgqueue_jobs")
        for _ in range(times):
            t0 = time.perf_counter()
            enqueue.enqueue_many(producer, stream, [pgqueue.NewJob(b"w")])
            for note in listener.notifies(timeout=5.0):
                if note.payload == stream:
                    took.append((time.perf_counter() - t0) * 1000)
                    break
            else:
                raise RuntimeError("no notification within 5 s")
    return statistics.median(took), max(took)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()
    console = Console()
    streams = [f"tenant-{i}" for i in range(args.streams)]
    rows: list[tuple[str, str]] = []
    with server(None, "citus-bench") as (server_dsn, _):
        dsn = fresh_database(server_dsn, "pgqueue_bench_citus")
        enq, proc, cpu_enq, cpu_proc = workload(dsn, streams, args.jobs, args.threads,
                                                args.batch, [data_directory(dsn)])
        rows += [("one server: enqueue (jobs/s)", f"{enq:,.0f}"),
                 ("one server: lease+ack (jobs/s)", f"{proc:,.0f}"),
                 ("one server: CPU µs per job, enqueue + lease+ack",
                  cpu_row(["server"], cpu_enq, cpu_proc)),
                 (f"one server: one enqueue of {args.batch} (ms)",
                  f"{call_ms(dsn, streams[0], args.batch):.1f}"),
                 ("one server: enqueue to wake-up, median / worst of 30 (ms)",
                  "{:.1f} / {:.1f}".format(*wake_ms(dsn, streams[0])))]
    cluster = start_cluster(durable=True)
    try:
        db = cluster.new_database()
        pgqueue.migrate(db.dsn)
        before = [function_calls(d) for d in [db.dsn, *db.worker_dsns]]
        twopc = two_phase_commits(db)
        enq, proc, cpu_enq, cpu_proc = workload(
            db.dsn, streams, args.jobs, args.threads, args.batch,
            [data_directory(d) for d in [db.dsn, *db.worker_dsns]])
        rows += [("Citus, coordinator + 2 workers: enqueue (jobs/s)", f"{enq:,.0f}"),
                 ("Citus, coordinator + 2 workers: lease+ack (jobs/s)", f"{proc:,.0f}"),
                 ("Citus: CPU µs per job, enqueue + lease+ack",
                  cpu_row(["coordinator", "worker 1", "worker 2"], cpu_enq, cpu_proc)),
                 ("Citus: two-phase commits", f"{two_phase_commits(db) - twopc:,}")]
        groups = {s: stream_group(db, s) for s in streams}
        after = settled_calls([db.dsn, *db.worker_dsns], before,
                              expected_enqueues=len(streams) * -(-(args.jobs // len(streams))
                                                                 // args.batch))
        holder = db.worker_dsns[groups[streams[0]] - 1]
        rows += [(f"Citus: one enqueue of {args.batch}, through the coordinator (ms)",
                  f"{call_ms(db.dsn, streams[0], args.batch):.1f}"),
                 (f"Citus: one enqueue of {args.batch}, on the worker holding the stream (ms)",
                  f"{call_ms(holder, streams[0], args.batch):.1f}"),
                 ("Citus: enqueue to wake-up on the coordinator, median / worst of 30 (ms)",
                  "{:.1f} / {:.1f}".format(*wake_ms(db.dsn, streams[0])))]
        for node, name in enumerate(["coordinator", "worker 1", "worker 2"]):
            calls = ", ".join(f"{c} {after[node].get(c, 0) - before[node].get(c, 0):,}"
                              for c in CALLS)
            held = sum(1 for g in groups.values() if g == node)
            rows.append((f"Citus {name}: calls it ran ({held} of the streams)", calls))
        with psycopg.connect(db.dsn) as conn:
            row = conn.execute("SELECT citus_version()").fetchone()
        console.print(row[0] if row else "")
    finally:
        cluster.stop()
    print_figures(console, f"{args.jobs:,} jobs in {args.streams} streams, {args.threads} "
                  f"clients, batches of {args.batch}", rows)


if __name__ == "__main__":
    main()
