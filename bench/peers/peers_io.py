"""The I/O-bound part of bench/peers/peers.py: jobs whose handler waits on I/O, one worker process.

Every run, for each number of jobs in flight (--io-inflight, 500 and 2,000 by default), each
system processes --io-jobs jobs whose handler waits --io-seconds (50 ms): an async handler
awaiting asyncio.sleep (pgqueue's async def on the worker's event loop, pgqueuer's and
procrastinate's async tasks), and for pgqueue also a plain def calling time.sleep on as many
handler threads, so the README can say when to pick which. Each system tries each of its
IO_SETTINGS (bench/peers/peers_<system>.py) once per run and its best counts. The bound a worker
cannot pass is in-flight / wait (10,000 jobs/s at 500, 40,000 at 2,000).
"""
from __future__ import annotations

import argparse
import statistics
from typing import TYPE_CHECKING

import psycopg
from rich.console import Console

if TYPE_CHECKING:  # mypy reads the repository; run as a script, bench/ is on sys.path
    from bench.peers.peers_phases import (
        PhaseError,
        SystemState,
        drop_database,
        fresh_database,
        run_phase,
    )
else:
    from peers_phases import PhaseError, SystemState, drop_database, fresh_database, run_phase

MODES = {"async": "async handlers", "sync": "sync handlers on threads"}


def metric_key(mode: str, inflight: int) -> str:
    return f"io_{mode}_{inflight}_per_s"


def io_metrics(inflights: list[int]) -> list[tuple[str, str, str, bool]]:
    """The results table's rows: (key, label, unit, higher is better)."""
    return [(metric_key(mode, n), f"I/O-bound, {label}, {n:,} in flight", "jobs/s", True)
            for n in inflights for mode, label in MODES.items()]


def io_run(states: list[SystemState], server_dsn: str, args: argparse.Namespace, run: int,
           console: Console) -> None:
    """One run of the I/O-bound workload for every system, in the given order."""
    for inflight in args.io_inflight:
        for state in states:
            for mode in MODES:
                settings = state.io_settings.get(mode)
                key = metric_key(mode, inflight)
                if not settings:
                    state.unmeasured.add(key)
                    continue
                best = best_of(state, mode, inflight, len(settings), server_dsn, args, run)
                if best is None:
                    continue
                state.values.setdefault(key, []).append(best)
                bound = inflight / args.io_seconds
                console.print(f"  run {run} {state.name:<13} I/O-bound {mode:<5} {inflight:>5,} "
                              f"in flight {best:>9,.0f} jobs/s ({best / bound:.0%} of the bound)")


def best_of(state: SystemState, mode: str, inflight: int, count: int, server_dsn: str,
            args: argparse.Namespace, run: int) -> float | None:
    """The best rate of the system's settings for this mode (None when every one failed)."""
    rates: list[float] = []
    name = f"peers_{state.name}_io"
    for index in range(count):
        try:
            dsn = fresh_database(server_dsn, name)
            result = run_phase(state, "io", dsn, args.max_seconds + 300.0, setup=True,
                               jobs=args.io_jobs, batch=args.batch, setting=index,
                               inflight=inflight, io_seconds=args.io_seconds, mode=mode,
                               max_seconds=args.max_seconds, server_dsn=server_dsn)
            rates.append(float(result["io_per_s"]))
            if result["partial"]:
                state.notes.append(
                    f"run {run}: I/O-bound {mode} at {inflight} in flight, setting {index}: "
                    f"stopped at the {args.max_seconds:.0f} s cap after {result['processed']:,} "
                    f"jobs (the rate is of those)")
        except (PhaseError, psycopg.Error) as exc:
            state.notes.append(f"run {run}: I/O-bound {mode} at {inflight} in flight, "
                               f"setting {index}: {exc}")
        finally:
            drop_database(server_dsn, name)
    return max(rates) if rates else None


def bound_lines(states: list[SystemState], args: argparse.Namespace) -> list[str]:
    """What share of the in-flight / wait bound each system's median reached."""
    lines = []
    for inflight in args.io_inflight:
        bound = inflight / args.io_seconds
        shares = []
        for state in states:
            for mode in MODES:
                values = state.values.get(metric_key(mode, inflight))
                if values:
                    shares.append(f"{state.name} {mode} {statistics.median(values) / bound:.0%}")
        if shares:
            lines.append(f"I/O-bound at {inflight:,} in flight (bound {bound:,.0f} jobs/s): "
                         + ", ".join(shares))
    return lines
