"""pgqueue on the server users run: Debian's PostgreSQL 15 as packaged, JIT on at its default
thresholds, before and after revision 0021 (no hot statement JIT-compiled), and with JIT off.

    python bench/stock_server.py [--bin /usr/lib/postgresql/15/bin] [--seconds 60]
                                 [--lease-acks 200] [--rounds 1]

A server of its own from `--bin` in a temporary directory, with the package's settings
(fsync on; only a port and the embedded bed's base settings added). Three variants, each on a
fresh database, in turn:

- before: the current schema with the four functions that turn plan methods off stripped of
  their `jit = off` (what revision 0020 had: the only difference on the hot path), JIT on;
- after: the current schema, JIT on;
- jit off: the current schema with `jit = off` for the database.

For each: the library's lease of one job and its ack behind 20,000 pending jobs (median and
p99 of `--lease-acks` pairs, after 20 of warm-up); then claim latency at a fixed 400 jobs/s:
four producer threads enqueue one job per call (each its own transaction, the time taken just
before the call carried in the payload) for `--seconds`, and a `pgqueue worker` process at
concurrency 16 (bench/stock_app.py) records when each handler starts; claim latency is the
start less the enqueue (p50 / p95 / p99, after 5 s of warm-up), with the jobs done within the
phase. Figures only: nothing is asserted.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

import pgqueue
from pgqueue.client.benchmark import fresh_database, percentile
from pgqueue.db import connection
from pgqueue.db.embedded import EmbeddedServer

REPO = Path(__file__).resolve().parents[1]
#: The functions revision 0021 gave `jit = off` (they turn plan methods off).
GUARDED = ("pgqueue.lease(text,int,bigint,int,int,uuid,boolean,int,smallint,bigint)",
           "pgqueue.pick_within_limits(text,int,text[],int[],int[],bigint[],int[],int)",
           "pgqueue.reclaim_due_jobs(int,text)",
           "pgqueue.expiry_unfinished(regclass,timestamptz,regclass)")
VARIANTS = ("before (0020), jit on", "after (0021), jit on", "after, jit off")
PENDING = 20_000


def prepare(server_dsn: str, variant: str) -> str:
    dsn = fresh_database(server_dsn, "pgqueue_bench_stock")
    db = "pgqueue_bench_stock"
    with connection.connect(dsn) as conn:
        if variant.startswith("before"):
            for fn in GUARDED:
                conn.execute(f"ALTER FUNCTION {fn} RESET jit")
        if variant.endswith("jit off"):
            conn.execute(f"ALTER DATABASE {db} SET jit = off")
    return dsn


def lease_acks(dsn: str, n: int) -> tuple[float, float]:
    """Median and p99 (ms) of one lease of 1 and its ack, behind PENDING pending jobs."""
    with pgqueue.Queue(dsn, "stock") as q:
        for _ in range(0, PENDING, 1000):
            q.enqueue_many([pgqueue.NewJob(b"x" * 256) for _ in range(1000)])
        took: list[float] = []
        for i in range(n + 20):
            t0 = time.perf_counter()
            for held in q.lease(1):
                q.ack(held)
            if i >= 20:
                took.append((time.perf_counter() - t0) * 1000)
    return statistics.median(took), percentile(took, 99)


def claims(dsn: str, seconds: float, rate: float = 400.0, producers: int = 4,
           concurrency: int = 16) -> dict[str, tuple[float, float, float]]:
    """At `rate` jobs/s, p50 / p95 / p99 (ms) of: the enqueue call, a handler's start less
    its enqueue's commit (the call's return: when the job became visible), and less the
    call's start."""
    starts = Path(tempfile.mkstemp(prefix="pgqueue-bench-starts-")[1])
    worker = subprocess.Popen(
        [sys.executable, "-m", "pgqueue", "worker", "--app", "bench.stock_app:app",
         "--stream", "stock", "--concurrency", str(concurrency)],
        cwd=REPO, env={**os.environ, "PGQUEUE_DSN": dsn, "PGQUEUE_BENCH_STARTS": str(starts)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    stop = threading.Event()
    calls: dict[int, tuple[float, float]] = {}  # job id: (call began, call returned)
    lock = threading.Lock()

    def produce() -> None:
        with pgqueue.Queue(dsn, "stock", pool_size=1) as q:
            began, gap, sent = time.monotonic(), producers / rate, 0
            while not stop.is_set():
                t0 = time.time()
                job = q.enqueue(b"{}", kind="timed")
                t1 = time.time()
                with lock:
                    calls[job] = (t0, t1)
                sent += 1
                stop.wait(max(0.0, began + sent * gap - time.monotonic()))

    try:
        time.sleep(3.0)  # the worker starts (imports, connects)
        threads = [threading.Thread(target=produce) for _ in range(producers)]
        for t in threads:
            t.start()
        warm = time.time() + 5.0
        time.sleep(seconds)
        stop.set()
        for t in threads:
            t.join()
        time.sleep(2.0)  # the last jobs start
    finally:
        worker.terminate()
        worker.wait(timeout=60)
    started = {int(j): float(at) for j, at in
               (line.split() for line in starts.read_text().splitlines())}
    starts.unlink()
    timed = [(calls[j], at) for j, at in started.items() if j in calls and calls[j][0] >= warm]

    def pcts(values: list[float]) -> tuple[float, float, float]:
        return percentile(values, 50), percentile(values, 95), percentile(values, 99)

    return {"enqueue call": pcts([(t1 - t0) * 1000 for (t0, t1), _ in timed]),
            "commit to start": pcts([(at - t1) * 1000 for (_, t1), at in timed]),
            "call to start": pcts([(at - t0) * 1000 for (t0, _), at in timed]),
            "not started": (float(len(calls) - len(started)), 0.0, 0.0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", default="/usr/lib/postgresql/15/bin", type=Path)
    parser.add_argument("--seconds", type=float, default=60.0, help="seconds at 400 jobs/s")
    parser.add_argument("--lease-acks", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=1, help="the variants, this many times")
    args = parser.parse_args()
    console = Console(width=150)
    root = Path(tempfile.mkdtemp(prefix="pgqueue-bench-stock-"))
    server = EmbeddedServer(root, bin_dir=args.bin)
    try:
        server_dsn = server.start()
        with connection.connect(server_dsn) as conn:
            row = conn.execute("SELECT version(), pg_jit_available(), current_setting('jit'),"
                               " current_setting('jit_above_cost')").fetchone()
        console.print(f"{row}")
        table = Table(title="pgqueue on a stock PostgreSQL 15 (JIT on at its defaults)")
        columns = ("lease+ack ms median / p99", "enqueue call", "commit to start",
                   "call to start")
        table.add_column("variant")
        for column in columns:
            table.add_column(column + ("" if column.startswith("lease") else
                                       " ms p50 / p95 / p99"), justify="right")
        table.add_column("not started", justify="right")
        for _ in range(args.rounds):
            for variant in VARIANTS:
                console.print(f"{variant} ...")
                dsn = prepare(server_dsn, variant)
                median, p99 = lease_acks(dsn, args.lease_acks)
                found = claims(prepare(server_dsn, variant), args.seconds)
                table.add_row(variant, f"{median:.1f} / {p99:.1f}",
                              *(" / ".join(f"{v:.1f}" for v in found[c]) for c in columns[1:]),
                              f"{found['not started'][0]:.0f}")
        console.print(table)
    finally:
        server.stop("fast")
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
