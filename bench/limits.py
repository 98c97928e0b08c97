"""What the kinds' limits cost the lease: lease+ack throughput with limits set against without.

    python bench/limits.py [--dsn SERVER_DSN] [--jobs N] [--batch N] [--rounds N]

With no DSN it starts its own embedded Postgres (fsync on, default settings) and stops it at
the end. Each round, for each case in turn, a fresh database gets --jobs (20,000) jobs of one
kind, then one client leases --batch (100) at a time and acks them in one call until none is
left; the jobs/s of the drain is the figure. The cases: no limit; max_concurrency (set far
above the batch, so it never binds: the bookkeeping is all that is measured); a rate limit
(likewise never binding); both. The limited cases take the lease's limited path: the stream's
kinds picked apart, each limited kind counted under its lock. The issue's bar: the
overhead stays under 25 %. It runs twice: one kind; and --kinds (20) kinds with the limits on
the first while --held (20,000) leases of another stream are held (what the counts must not
read through). Figures only; the median of --rounds (3) rounds is printed.
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from rich.console import Console
from rich.table import Table

import pgqueue
from pgqueue.client.benchmark import fresh_database, server

CASES: dict[str, dict[str, Any]] = {
    "no limit": {},
    "max_concurrency": {"max_concurrency": 1_000_000},
    "rate_limit": {"rate_limit": (1_000_000_000, 60)},
    "both": {"max_concurrency": 1_000_000, "rate_limit": (1_000_000_000, 60)},
}


def drain(server_dsn: str, settings: dict[str, Any], jobs: int, batch: int, kinds: int = 1,
          held: int = 0) -> float:
    """Jobs/s of leasing and acking `jobs` jobs spread over `kinds` kinds, with `settings` on
    the first kind, while `held` leases of another stream are held."""
    dsn = fresh_database(server_dsn, "pgqueue_bench_limits")
    with pgqueue.Queue(dsn) as q:
        if settings:
            q.configure_kind("work0", **settings)
        if held:
            with pgqueue.Queue(dsn, stream="elsewhere") as other:
                for start in range(0, held, 1000):
                    other.enqueue_many([pgqueue.NewJob(b"h") for _ in range(min(1000, held - start))])
                while other.lease(limit=1000, visibility_timeout=3600):
                    pass
        for start in range(0, jobs, 500):
            q.enqueue_many([pgqueue.NewJob(b"x", kind=f"work{(start + i) % kinds}")
                            for i in range(min(500, jobs - start))])
        began, done = time.perf_counter(), 0
        while leases := q.lease(limit=batch):
            q.ack_many(leases)
            done += len(leases)
        assert done == jobs, (done, jobs)
        return done / (time.perf_counter() - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", default=None, help="a server (the role may CREATE DATABASE)")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kinds", type=int, default=20,
                        help="the second setting's kinds (one of them limited)")
    parser.add_argument("--held", type=int, default=20_000,
                        help="the second setting's leases held in another stream")
    args = parser.parse_args()
    with server(args.dsn, "limits") as (server_dsn, embedded):
        where = "embedded Postgres, fsync on" if embedded else "given server"
        for title, kinds, held in (
                (f"one kind ({where})", 1, 0),
                (f"{args.kinds} kinds, the first limited, {args.held:,} leases held in another "
                 f"stream ({where})", args.kinds, args.held)):
            rates: dict[str, list[float]] = {name: [] for name in CASES}
            for _ in range(args.rounds):
                for name, settings in CASES.items():
                    rates[name].append(drain(server_dsn, settings, args.jobs, args.batch,
                                             kinds, held))
            report(f"lease+ack of {args.jobs:,} jobs, {args.batch} per call, one client: "
                   f"{title}", rates)


def report(title: str, rates: dict[str, list[float]]) -> None:
    base = statistics.median(rates["no limit"])
    table = Table(title=title)
    for column in ("case", "jobs/s (median)", "rounds", "vs no limit"):
        table.add_column(column, justify="left" if column == "case" else "right")
    for name, values in rates.items():
        median = statistics.median(values)
        table.add_row(name, f"{median:,.0f}", ", ".join(f"{v:,.0f}" for v in values),
                      "-" if name == "no limit" else f"{median / base - 1:+.0%}")
    Console().print(table)


if __name__ == "__main__":
    main()
