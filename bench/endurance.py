"""Endurance: leasing with a million delayed jobs waiting, and a million jobs through one table.

    python bench/endurance.py [--dsn SERVER_DSN] [--delayed 1000000] [--through 1000000]

With no DSN it starts its own embedded Postgres (fsync on, default settings). Phase 1 measures
lease+ack (batches of 100) of ready jobs with no delayed jobs, then again with `--delayed`
delayed jobs waiting. Phase 2 pushes `--through` jobs through the queue (enqueue in batches of
1,000, lease+ack in batches of 100) with pgqueue's maintenance running as it does inside
workers, and samples table and index sizes and the lease latency per window. Prints figures.
"""
from __future__ import annotations

import argparse
import statistics
import threading
import time

import psycopg
from rich.console import Console

import pgqueue
from pgqueue.client.benchmark import fresh_database, percentile, print_figures, server
from pgqueue.db import connection
from pgqueue.maintenance.maintain import Maintainer


def _drain(q: pgqueue.Queue, n: int) -> list[float]:
    """Lease+ack n ready jobs in batches of 100; the latency of each lease call (s)."""
    latencies: list[float] = []
    done = 0
    while done < n:
        t0 = time.perf_counter()
        leases = q.lease(100)
        latencies.append(time.perf_counter() - t0)
        if not leases:
            break
        q.ack_many(leases)
        done += len(leases)
    return latencies


def _sizes(dsn: str) -> tuple[float, float, int]:
    with connection.connect(dsn) as conn:
        row = conn.execute(
            "SELECT pg_table_size('pgqueue.job'), pg_indexes_size('pgqueue.job'), n_dead_tup "
            "FROM pg_stat_user_tables WHERE schemaname = 'pgqueue' AND relname = 'job'"
        ).fetchone()
    assert row is not None
    return row[0] / 2**20, row[1] / 2**20, int(row[2])


def _settle(dsn: str) -> None:
    """Start a measurement from the same footing: the job table vacuumed (as pgqueue's
    maintenance keeps it) and no checkpoint due from the WAL written while seeding (its full-page
    writes would land in the measurement). CHECKPOINT needs pg_checkpoint; without it, skipped."""
    with connection.connect(dsn) as conn:
        conn.execute("VACUUM pgqueue.job")
        try:
            conn.execute("CHECKPOINT")
        except psycopg.errors.InsufficientPrivilege:
            pass


def delayed_phase(dsn: str, delayed: int, console: Console) -> list[tuple[str, str]]:
    ready = 20_000
    rows: list[tuple[str, str]] = []
    with pgqueue.Queue(dsn, stream="endure") as q:
        def measure(label: str) -> float:
            for _ in range(ready // 1000):
                q.enqueue_many([pgqueue.NewJob(b"{}") for _ in range(1000)])
            _settle(dsn)
            t0 = time.perf_counter()
            lat = _drain(q, ready)
            rate = ready / (time.perf_counter() - t0)
            rows.append((f"lease+ack of 100, {label}: jobs/s", f"{rate:,.0f}"))
            rows.append((f"lease call p50 / p99 ms, {label}",
                         f"{statistics.median(lat) * 1000:.2f} / {percentile(lat, 99) * 1000:.2f}"))
            return rate

        base = measure("no delayed jobs")
        with console.status(f"enqueueing {delayed:,} delayed jobs"):
            for done in range(0, delayed, 5000):
                q.enqueue_many([pgqueue.NewJob(b"{}", delay=7 * 86400.0)
                                for _ in range(min(5000, delayed - done))])
        loaded = measure(f"{delayed:,} delayed jobs waiting")
        rows.append(("slowdown with delayed jobs waiting", f"{(1 - loaded / base) * 100:+.1f} %"))
    return rows


def through_phase(dsn: str, total: int, console: Console) -> list[tuple[str, str]]:
    maintainer = Maintainer(dsn, interval=1.0)
    runner = threading.Thread(target=maintainer.run, daemon=True)
    runner.start()
    rows: list[tuple[str, str]] = []
    window = max(total // 10, 1000)
    samples: list[tuple[int, float, float, int, float, float]] = []
    with pgqueue.Queue(dsn, stream="through") as q:
        done = 0
        t_start = time.perf_counter()
        with console.status(f"pushing {total:,} jobs through") as status:
            while done < total:
                lat: list[float] = []
                for _ in range(window // 1000):
                    q.enqueue_many([pgqueue.NewJob(b"{}") for _ in range(1000)])
                    lat += _drain(q, 1000)
                done += window
                table_mb, index_mb, dead = _sizes(dsn)
                samples.append((done, table_mb, index_mb, dead, statistics.median(lat) * 1000,
                                percentile(lat, 99) * 1000))
                status.update(f"pushing jobs through: {done:,} / {total:,}")
        elapsed = time.perf_counter() - t_start
    maintainer.stop()
    runner.join(5)
    first, last = samples[0], samples[-1]
    rows.append((f"{total:,} jobs through (enqueue 1,000 + lease/ack 100): jobs/s",
                 f"{total / elapsed:,.0f}"))
    for label, s in (("after the first window", first), ("at the end", last)):
        rows.append((f"job table / indexes MB, dead rows, {label}",
                     f"{s[1]:.1f} / {s[2]:.1f}, {s[3]:,}"))
        rows.append((f"lease call p50 / p99 ms, {label}", f"{s[4]:.2f} / {s[5]:.2f}"))
    rows.append(("largest table / indexes MB seen",
                 f"{max(s[1] for s in samples):.1f} / {max(s[2] for s in samples):.1f}"))
    rows.append(("lease p99 at the end / after the first window",
                 f"{last[5] / first[5]:.2f}x"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="a server DSN (scratch databases are created on it)")
    parser.add_argument("--delayed", type=int, default=1_000_000)
    parser.add_argument("--through", type=int, default=1_000_000)
    args = parser.parse_args()
    console = Console()
    with server(args.dsn, "endure") as (server_dsn, embedded):
        rows = delayed_phase(fresh_database(server_dsn, "pgqueue_endure_delayed"), args.delayed,
                             console)
        rows += through_phase(fresh_database(server_dsn, "pgqueue_endure_through"), args.through,
                              console)
        print_figures(console, "pgqueue endurance" + (" (fsync on)" if embedded else ""), rows)


if __name__ == "__main__":
    main()
