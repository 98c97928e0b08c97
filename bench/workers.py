"""Worker benchmarks: renewals with checkpoints, and no-op vs three-step job throughput (and
no-op jobs under a time limit that never fires: what arming a limit costs).

    python bench/workers.py [--dsn DSN] [--jobs N] [--leases N] [--concurrency N]

With no DSN it starts its own embedded Postgres (fsync on, default settings) in a temporary
directory and stops it afterwards. Prints figures only; nothing here is asserted.
"""
from __future__ import annotations

import argparse
import threading
import time

from rich.console import Console

import pgqueue
from pgqueue.client import enqueue, lease, settle
from pgqueue.client.benchmark import fresh_database, print_figures, server
from pgqueue.db import connection, queries


def _table_stats(conn: queries.Conn) -> tuple[int, int]:
    """Updates and HOT updates of pgqueue.job, including this connection's own (flushed)."""
    conn.execute("SELECT pg_stat_force_next_flush()")  # flushed when that statement ends
    row = conn.execute(
        "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
        "WHERE schemaname = 'pgqueue' AND relname = 'job'").fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def bench_renewals(dsn: str, leases: int, rounds: int) -> dict[str, float]:
    """Renew `leases` held leases with checkpoints, one statement per round, all on one
    connection so the table statistics read around the rounds count exactly them."""
    with connection.connect(dsn) as conn:
        enqueue.enqueue_many(conn, "renew", [pgqueue.NewJob(b"x" * 64) for _ in range(leases)])
        held = lease.lease(conn, "renew", leases, 300.0, 0, 0)
        upd0, hot0 = _table_stats(conn)
        t0 = time.perf_counter()
        for r in range(rounds):
            items: list[tuple[pgqueue.Lease, float | None, pgqueue.Checkpoint | None]] = [
                (one, None, pgqueue.Checkpoint(
                    last_completed_step="download", cursor_step="transform",
                    cursor=str(r * 1000 + i).encode(), schema_version=2, step_set_hash="h" * 32))
                for i, one in enumerate(held)]
            renewed = lease.renew_many(conn, items)
            assert len(renewed) == len(held)
        elapsed = time.perf_counter() - t0
        upd1, hot1 = _table_stats(conn)
        settle.ack_many(conn, held)
    updates = upd1 - upd0
    return {
        "leases": float(leases), "rounds": float(rounds),
        "round_ms": elapsed / rounds * 1000, "renewals_per_s": leases * rounds / elapsed,
        "hot_pct": 100.0 * (hot1 - hot0) / updates if updates else 0.0,
    }


def _drain(dsn: str, app: pgqueue.App, stream: str, jobs: int, concurrency: int) -> float:
    worker = pgqueue.Worker(app, dsn, streams=[stream], concurrency=concurrency,
                            visibility_timeout=30, poll_interval=0.05, maintenance=False,
                            prefetch=0)  # the figure the README quotes: no prefetch
    with pgqueue.Queue(dsn, stream=stream) as q:
        thread = threading.Thread(target=worker.run, daemon=True)
        t0 = time.perf_counter()
        thread.start()
        while worker.processed < jobs:
            time.sleep(0.005)
        elapsed = time.perf_counter() - t0
        worker.stop()
        thread.join()
        left = sum(s.count for s in q.stats() if s.stream == stream)
        assert left == 0, f"{left} jobs left in {stream}"
    return jobs / elapsed


def bench_throughput(dsn: str, jobs: int, concurrency: int) -> dict[str, float]:
    """Jobs/s of one worker on no-op jobs and on three-step no-op jobs."""
    app = pgqueue.App()

    @app.job("noop")
    def noop(job: pgqueue.JobContext) -> None:
        return None

    @app.job("limited", timeout=3600)
    def limited(job: pgqueue.JobContext) -> None:
        return None

    three = app.step_job("three")

    @three.step("a")
    def a(ctx: pgqueue.StepContext) -> None:
        return None

    @three.step("b")
    def b(ctx: pgqueue.StepContext) -> None:
        ctx.advance(1)

    @three.step("c")
    def c(ctx: pgqueue.StepContext) -> None:
        return None

    results: dict[str, float] = {}
    for kind, stream in (("noop", "plain"), ("limited", "limits"), ("three", "steps")):
        with pgqueue.Queue(dsn, stream=stream) as q:
            for start in range(0, jobs, 1000):
                q.enqueue_many([app.new_job(kind, b"{}") for _ in range(min(1000, jobs - start))])
        results[kind] = _drain(dsn, app, stream, jobs, concurrency)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="a server DSN (a scratch database is created on it)")
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--leases", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    with server(args.dsn, "bench") as (server_dsn, embedded):
        dsn = fresh_database(server_dsn, "pgqueue_bench_workers")
        r = bench_renewals(dsn, args.leases, args.rounds)
        t = bench_throughput(dsn, args.jobs, args.concurrency)
        c = args.concurrency
        print_figures(Console(), "pgqueue workers" + (" (fsync on)" if embedded else ""), [
            (f"renew {args.leases} leases with checkpoints, one statement: ms/round",
             f"{r['round_ms']:.1f}"),
            ("renewals/s", f"{r['renewals_per_s']:,.0f}"),
            ("HOT updates during renewals", f"{r['hot_pct']:.1f} %"),
            (f"no-op jobs/s (one worker, concurrency {c})", f"{t['noop']:,.0f}"),
            ("no-op jobs/s with a time limit (timeout=3600)", f"{t['limited']:,.0f}"),
            (f"three-step jobs/s (one worker, concurrency {c})", f"{t['three']:,.0f}"),
        ])


if __name__ == "__main__":
    main()
