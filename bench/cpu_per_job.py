"""CPU per processed job: what the worker process and the Postgres server each spend on one
job, enqueue excluded, through one pgqueue.Worker.

    python bench/cpu_per_job.py [--dsn DSN] [--jobs 20000] [--runs 3] [--work-ms 0]
                                [--setting concurrency=16,prefetch=0] [--setting ...]

Enqueues `--jobs` jobs (batches of 1,000), then runs a Worker in this process until every
ack is written (the handler does nothing, or sleeps `--work-ms`: `--work-ms 1 --setting
concurrency=16 --setting concurrency=64` is the 16 / 64 workers comparison of issue 26),
and reads CPU time around the processing only: this process's (user + system, every
thread: the handlers, the lease loops, the renewer, the settler, maintenance) and the
server's (every `postgres` process on this machine, from /proc: the backends, the
WAL writer, the checkpointer, autovacuum), so run it against a server doing nothing else.
Each `--setting` is a set of Worker options (default: the Worker's defaults, and concurrency
64 beside 16 without prefetch); prints per setting the medians of the runs: jobs/s, worker
and server CPU microseconds per job, and the server's share. Linux only (/proc). With no DSN it
starts its own embedded Postgres (fsync on). Figures only: nothing here is asserted.

To see where the worker's time goes, sample it while it runs: `py-spy top --pid PID` (the
script prints its PID).
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

import pgqueue
from pgqueue.client.benchmark import fresh_database, server

STREAM = "cpu"
TICK = os.sysconf("SC_CLK_TCK")


def server_cpu() -> dict[int, float]:
    """CPU seconds (user + system) of every `postgres` process now, by pid."""
    found: dict[int, float] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # gone meanwhile
        name = text[text.index("(") + 1:text.rindex(")")]
        if name != "postgres" and not name.startswith("postgres:"):
            continue
        fields = text[text.rindex(")") + 2:].split()
        found[int(stat.parent.name)] = (int(fields[11]) + int(fields[12])) / TICK
    return found


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def parse_setting(text: str) -> dict[str, Any]:
    """'concurrency=16,prefetch=0' -> Worker options (ints where they parse)."""
    options: dict[str, Any] = {}
    for item in (i for i in text.split(",") if i):
        key, _, value = item.partition("=")
        try:
            options[key] = int(value)
        except ValueError:
            options[key] = float(value)
    return options


def one_run(dsn: str, jobs: int, options: dict[str, Any],
            work_ms: float = 0.0) -> tuple[float, float, float]:
    """(jobs/s, worker CPU s, server CPU s) of processing `jobs` jobs that each sleep
    `work_ms` (none: no-op)."""
    with pgqueue.Queue(dsn, stream=STREAM) as q:
        for start in range(0, jobs, 1000):
            q.enqueue_many([pgqueue.NewJob(b"{}", kind="noop")
                            for _ in range(min(1000, jobs - start))])
    app = pgqueue.App()

    @app.job("noop")
    def noop(job: pgqueue.JobContext) -> None:
        if work_ms:
            time.sleep(work_ms / 1000)

    worker = pgqueue.Worker(app, dsn, streams=[STREAM], **{"poll_interval": 1.0, **options})
    srv0, own0, t0 = server_cpu(), own_cpu(), time.perf_counter()
    thread = threading.Thread(target=worker.run, name="bench-worker", daemon=True)
    thread.start()
    deadline = t0 + 600
    while worker.processed < jobs and time.perf_counter() < deadline:
        time.sleep(0.01)
    seconds = time.perf_counter() - t0
    srv1, own1 = server_cpu(), own_cpu()
    worker.stop()
    thread.join(timeout=60)
    if worker.processed < jobs:
        raise SystemExit(f"only {worker.processed} of {jobs} jobs were processed in 600 s")
    srv = sum(v - srv0.get(pid, 0.0) for pid, v in srv1.items())
    return jobs / seconds, own1 - own0, srv


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="a server DSN (a scratch database is created on it)")
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--setting", action="append", type=parse_setting,
                        help="Worker options, e.g. concurrency=16,prefetch=0 (repeatable)")
    parser.add_argument("--work-ms", type=float, default=0.0,
                        help="each job's handler sleeps this long (default: a no-op)")
    args = parser.parse_args(argv)
    settings: list[dict[str, Any]] = args.setting or [
        {}, {"concurrency": 16, "prefetch": 0}, {"concurrency": 64, "prefetch": 0}]
    console = Console(width=max(Console().width, 120))
    console.print(f"pid {os.getpid()}")
    figures: dict[int, list[tuple[float, float, float]]] = {i: [] for i in range(len(settings))}
    with server(args.dsn, "cpu") as (server_dsn, _embedded):
        for run in range(args.runs):
            for i, options in enumerate(settings):  # interleaved: drift hits every setting
                dsn = fresh_database(server_dsn, "pgqueue_bench_cpu")
                rate, own, srv = one_run(dsn, args.jobs, options, args.work_ms)
                figures[i].append((rate, own, srv))
                console.print(f"  run {run + 1} {options or 'defaults'}: {rate:,.0f} jobs/s, "
                              f"worker {own / args.jobs * 1e6:,.0f} µs/job, "
                              f"server {srv / args.jobs * 1e6:,.0f} µs/job")
    work = f"{args.work_ms:g} ms" if args.work_ms else "no-op"
    table = Table(title=f"CPU per processed job ({args.jobs:,} {work} jobs, medians of "
                        f"{args.runs} run(s))")
    for column in ("Worker options", "jobs/s", "worker µs/job", "server µs/job", "server share"):
        table.add_column(column, justify="left" if column == "Worker options" else "right")
    for i, options in enumerate(settings):
        rate = statistics.median(f[0] for f in figures[i])
        own = statistics.median(f[1] for f in figures[i]) / args.jobs * 1e6
        srv = statistics.median(f[2] for f in figures[i]) / args.jobs * 1e6
        table.add_row(", ".join(f"{k}={v}" for k, v in options.items()) or "defaults",
                      f"{rate:,.0f}", f"{own:,.0f}", f"{srv:,.0f}", f"{srv / (own + srv):.0%}")
    console.print(table)
    console.print(f"{os.cpu_count()} CPUs; the server's CPU is every postgres process's on "
                  "this machine")


if __name__ == "__main__":
    main()
