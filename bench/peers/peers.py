"""pgqueue beside its Python peers on Postgres: procrastinate, pgqueuer and chancy.

    python bench/peers/peers.py [--dsn SERVER_DSN] [--runs 3] [--jobs 20000] [--latency-jobs 500]

The peers are installed, at the versions pinned in bench/requirements.txt, into the
benchmark's own virtual environment bench/peers/.venv (created on first use, reinstalled when
the requirements file changes), and every phase of every system runs in its own subprocess
(bench/peers/peers_runner.py with the adapter bench/peers/peers_<system>.py): the peers with that
environment's Python, pgqueue with this one, so their dependencies never mix.

With no --dsn one embedded Postgres (default settings: fsync on) is started in a temporary
directory and stopped at the end; with --dsn that server is used (the role must be allowed to
CREATE DATABASE). Every system gets fresh databases of its own on that one server.

One workload, every system, every run, phase by phase so that the figures compared are taken
close together in time (the order of systems rotates between runs):
- enqueue -> handler-start latency with an idle worker (a separate process): --latency-jobs
  jobs, one every 10 ms, after 10 warm-up jobs; the producer takes time.time() just before the
  enqueue call and passes it in the payload, the handler takes time.time() when it starts;
- enqueue one job at a time (one call, one transaction each), --single-jobs jobs;
- async producers: 50 asyncio tasks share --single-jobs jobs, one enqueue call each (pgqueue's
  AsyncQueue and pgqueuer's Queries, each on a pool of 8 connections; "not measured" for a
  peer whose adapter has no async producer);
- batched enqueue of --jobs no-op jobs, --batch per call (pgqueue Queue.enqueue_many,
  pgqueuer Queries.enqueue with lists, procrastinate Task.batch_defer_async, chancy
  Chancy.push_many), then processing of those jobs by one worker process at the system's best
  setting: jobs / seconds from the first handler start until every job is finished in the
  database (pgqueue: worker.processed, which counts written acks).
- I/O-bound processing (bench/peers/peers_io.py): --io-jobs jobs whose handler waits --io-seconds,
  at each of --io-inflight jobs in flight, async handlers for every system with an async API
  and sync handlers on threads for pgqueue;
Every timed phase (and tuning trial) starts right after a CHECKPOINT, so that none pays the
full-page writes of a checkpoint that came due by chance in the middle of it (skipped where the
role lacks pg_checkpoint). The producer also times its own enqueue calls in the latency phase.
The processing setting of each system is chosen first: --tune-rounds interleaved rounds try
each candidate setting of its adapter (SETTINGS in bench/peers/peers_<system>.py) on --tune-jobs jobs
(at most --tune-seconds of processing each), and the best median wins.

Prints the medians of the runs with min-max and the ratio pgqueue/peer. Figures only; shared
machines are noisy, so compare within one run of this script.
"""
from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:  # mypy reads the repository; run as a script, bench/ is on sys.path
    from bench.peers.peers_io import bound_lines, io_metrics, io_run
    from bench.peers.peers_phases import (
        PhaseError,
        SystemState,
        drop_database,
        failed,
        fresh_database,
        record,
        run_phase,
    )
else:
    from peers_io import bound_lines, io_metrics, io_run
    from peers_phases import (
        PhaseError,
        SystemState,
        drop_database,
        failed,
        fresh_database,
        record,
        run_phase,
    )

HERE = Path(__file__).resolve().parent
VENV = HERE / ".venv"
REQUIREMENTS = HERE / "requirements.txt"
STAMP = VENV / ".requirements.sha256"

SYSTEMS = ("pgqueue", "pgqueuer", "procrastinate", "chancy")
PEERS = SYSTEMS[1:]

#: (key in the runner's output, label, unit, higher is better)
METRICS: list[tuple[str, str, str, bool]] = [
    ("single_enqueue_per_s", "enqueue, one at a time", "jobs/s", True),
    ("async_producers_per_s", "enqueue from 50 async tasks", "jobs/s", True),
    ("batch_enqueue_per_s", "enqueue, batched", "jobs/s", True),
    ("process_per_s", "processing, one worker", "jobs/s", True),
    ("latency_p50_ms", "enqueue→start latency p50", "ms", False),
    ("latency_p99_ms", "enqueue→start latency p99", "ms", False),
    ("enqueue_call_p50_ms", "  of which the enqueue call, p50", "ms", False),
    ("enqueue_call_p99_ms", "  of which the enqueue call, p99", "ms", False),
]


# -- the peers' virtual environment ----------------------------------------------------------


def venv_python() -> Path:
    return VENV / "bin" / "python"


def ensure_peers_venv(console: Console) -> str | None:
    """Create bench/peers/.venv and install the pinned peers; None (and why) on failure."""
    want = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    python = venv_python()
    if python.exists() and STAMP.exists() and STAMP.read_text().strip() == want:
        return None
    try:
        if not python.exists():
            console.print(f"creating the peers' virtual environment {VENV}")
            subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True,
                           capture_output=True, text=True, timeout=300)
        console.print(f"installing {REQUIREMENTS.name} into {VENV.name} (pip)")
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                        "-r", str(REQUIREMENTS)], check=True, capture_output=True, text=True,
                       timeout=900)
    except subprocess.CalledProcessError as exc:
        tail = (exc.stderr or exc.stdout or "").strip().splitlines()[-5:]
        return f"installing the peers failed: {' / '.join(tail)}"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"installing the peers failed: {exc}"
    STAMP.write_text(want + "\n")
    return None


def server_facts(server_dsn: str) -> dict[str, str]:
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        facts = {}
        for setting in ("server_version", "fsync", "synchronous_commit", "shared_buffers"):
            row = conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(setting))).fetchone()
            facts[setting] = str(row[0]) if row else "?"
    return facts


def describe_setting(setting: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in setting.items()) or "defaults"


def defaults_share(state: SystemState) -> str | None:
    """`pgqueue defaults: 45,200 jobs/s, 93 % of its best setting (...)` when a system's
    candidates include its defaults (an empty setting): from the runs' processing phases
    (--jobs jobs each), and from the tuning trials."""
    if {} not in state.settings or state.best is None:
        return None
    best_setting = describe_setting(state.settings[state.best])
    if state.settings[state.best] == {}:
        return f"{state.name} defaults: its best setting"
    parts = []
    mine, best = state.values.get("process_defaults_per_s"), state.values.get("process_per_s")
    if mine and best:
        m, b = statistics.median(mine), statistics.median(best)
        parts.append(f"{m:,.0f} jobs/s, {100 * m / b:.0f} % of its best setting ({best_setting}, "
                     f"{b:,.0f} jobs/s) on the runs' processing")
    i = state.settings.index({})
    if i < len(state.tuning) and state.tuning[i] and state.tuning[state.best]:
        m, b = statistics.median(state.tuning[i]), statistics.median(state.tuning[state.best])
        parts.append(f"{100 * m / b:.0f} % in the shorter tuning trials")
    return f"{state.name} defaults: " + "; ".join(parts) if parts else None


def probe(state: SystemState) -> None:
    """Ask the system's adapter for its version and settings (this also checks it imports)."""
    try:
        info = run_phase(state, "settings", "", 120.0)
    except PhaseError as exc:
        state.unavailable = f"cannot load it: {exc}"
        return
    state.version = str(info["version"])
    state.settings = list(info["settings"])
    state.latency_setting = dict(info["latency_setting"])
    state.io_settings = dict(info.get("io_settings") or {})


def tune_trial(state: SystemState, index: int, server_dsn: str, jobs: int, seconds: float,
               console: Console) -> None:
    """One tuning trial: process `jobs` jobs (at most `seconds`) with setting `index`."""
    setting = state.settings[index]
    name = f"peers_{state.name}_tune"
    try:
        dsn = fresh_database(server_dsn, name)
        result = run_phase(state, "process", dsn, seconds + 180.0, setup=True, jobs=jobs,
                           setting=index, max_seconds=seconds, server_dsn=server_dsn)
        rate = float(result["process_per_s"])
        state.tuning[index].append(rate)
        partial = " (time cap: rate of the jobs done)" if result["partial"] else ""
        console.print(f"  tune {state.name:<13} {describe_setting(setting):<36} "
                      f"{rate:>9,.0f} jobs/s{partial}")
    except (PhaseError, psycopg.Error) as exc:
        state.notes.append(f"tuning {describe_setting(setting)}: {exc}")
        console.print(f"  tune {state.name:<13} {describe_setting(setting):<36} failed: {exc}")
    finally:
        drop_database(server_dsn, name)


def tune(states: list[SystemState], server_dsn: str, args: argparse.Namespace,
         console: Console) -> None:
    """Try every candidate processing setting of every system, --tune-rounds times
    (interleaved, so that load on a shared machine hits all alike); keep each system's
    setting with the best median."""
    for state in states:
        state.tuning = [[] for _ in state.settings]
    for _round in range(args.tune_rounds):
        for state in states:
            for index in range(len(state.settings)):
                tune_trial(state, index, server_dsn, args.tune_jobs, args.tune_seconds, console)
    for state in states:
        medians = [(statistics.median(rates), i) for i, rates in enumerate(state.tuning) if rates]
        if medians:
            state.best = max(medians)[1]
        else:
            state.unavailable = "every processing setting failed while tuning"


def one_run(states: list[SystemState], server_dsn: str, args: argparse.Namespace, run: int,
            console: Console) -> None:
    """The whole workload for every system, phase by phase, so that the figures compared
    were taken close together in time. Each system has two fresh databases: b for latency
    then one-at-a-time enqueue, a for batched enqueue then processing."""
    names = {s.name: (f"peers_{s.name}_a", f"peers_{s.name}_b") for s in states}
    dsns: dict[str, str] = {}
    try:
        for state in states:
            try:
                dsns[state.name] = fresh_database(server_dsn, names[state.name][1])
            except psycopg.Error as exc:
                failed(state, run, exc, console)
        for state in states:
            if state.name not in dsns:
                continue
            try:
                result = run_phase(state, "latency", dsns[state.name],
                                   args.latency_jobs * 0.01 + 180.0, setup=True,
                                   jobs=args.latency_jobs, server_dsn=server_dsn)
            except PhaseError as exc:
                failed(state, run, exc, console)
                del dsns[state.name]
                continue
            record(state, result, ["latency_p50_ms", "latency_p99_ms", "enqueue_call_p50_ms",
                                   "enqueue_call_p99_ms"])
            if result["partial"]:
                state.notes.append(f"run {run}: latency from {result['latency_samples']} of "
                                   f"{result['latency_expected']} jobs (the rest never started)")
            console.print(f"  run {run} {state.name:<13} latency p50 "
                          f"{result['latency_p50_ms']:>6.1f} ms, p99 "
                          f"{result['latency_p99_ms']:>6.1f} ms")
        for state in states:
            if state.name not in dsns:
                continue
            try:
                single = run_phase(state, "single", dsns[state.name], 300.0,
                                   setup=False, jobs=args.single_jobs, server_dsn=server_dsn)
            except PhaseError as exc:
                failed(state, run, exc, console)
                continue
            record(state, single, ["single_enqueue_per_s"])
            console.print(f"  run {run} {state.name:<13} one-at-a-time enqueue "
                          f"{single['single_enqueue_per_s']:>9,.0f} jobs/s")
            try:
                many = run_phase(state, "producers", dsns[state.name], 300.0, setup=False,
                                 jobs=args.single_jobs, tasks=50, server_dsn=server_dsn)
            except PhaseError as exc:
                failed(state, run, exc, console)
                continue
            if many["async_producers_per_s"] is None:
                state.unmeasured.add("async_producers_per_s")
            else:
                record(state, many, ["async_producers_per_s"])
                console.print(f"  run {run} {state.name:<13} enqueue from 50 async tasks "
                              f"{many['async_producers_per_s']:>9,.0f} jobs/s")
    finally:
        for state in states:
            drop_database(server_dsn, names[state.name][1])
    for state in states:
        assert state.best is not None
        name = names[state.name][0]
        try:
            dsn = fresh_database(server_dsn, name)
            result = run_phase(state, "process", dsn, args.max_seconds + 300.0, setup=True,
                               jobs=args.jobs, batch=args.batch, setting=state.best,
                               max_seconds=args.max_seconds, server_dsn=server_dsn)
            record(state, result, ["batch_enqueue_per_s", "process_per_s"])
            if result["partial"]:
                state.notes.append(
                    f"run {run}: processing stopped at the {args.max_seconds:.0f} s cap after "
                    f"{result['processed']:,} of {args.jobs:,} jobs (the rate is of those)")
            console.print(f"  run {run} {state.name:<13} batched enqueue "
                          f"{result['batch_enqueue_per_s']:>9,.0f} jobs/s, processing "
                          f"{result['process_per_s']:>8,.0f} jobs/s")
        except (PhaseError, psycopg.Error) as exc:
            failed(state, run, exc, console)
        finally:
            drop_database(server_dsn, name)
        if {} in state.settings and state.settings[state.best] != {}:
            defaults_run(state, server_dsn, args, run, console)


def defaults_run(state: SystemState, server_dsn: str, args: argparse.Namespace, run: int,
                 console: Console) -> None:
    """Process --jobs jobs with the system's defaults too (its empty setting), to compare
    with its best setting on the same number of jobs (a tuning trial is short, and a setting
    that starts with a small lease starts its clock before its first big one)."""
    name = f"peers_{state.name}_defaults"
    try:
        dsn = fresh_database(server_dsn, name)
        result = run_phase(state, "process", dsn, args.max_seconds + 300.0, setup=True,
                           jobs=args.jobs, batch=args.batch, setting=state.settings.index({}),
                           max_seconds=args.max_seconds, server_dsn=server_dsn)
        state.values.setdefault("process_defaults_per_s", []).append(
            float(result["process_per_s"]))
        console.print(f"  run {run} {state.name:<13} processing with the defaults "
                      f"{result['process_per_s']:>8,.0f} jobs/s")
    except (PhaseError, psycopg.Error) as exc:
        state.notes.append(f"run {run}: processing with the defaults: {exc}")
    finally:
        drop_database(server_dsn, name)


# -- the report ------------------------------------------------------------------------------


def fmt(value: float, unit: str) -> str:
    if unit == "ms":
        return f"{value:.1f}"
    return f"{value:,.0f}"


def results_table(states: list[SystemState], runs: int,
                  metrics: list[tuple[str, str, str, bool]]) -> Table:
    table = Table(title=f"pgqueue and its peers: medians of {runs} run(s), same server",
                  title_justify="left")
    table.add_column("metric")
    table.add_column("system")
    table.add_column("median", justify="right")
    table.add_column("min–max", justify="right")
    table.add_column("runs", justify="right")
    table.add_column("pgqueue/peer\n(jobs/s: >1 pgqueue faster;\nms: <1 pgqueue lower = better)",
                     justify="right")
    base = states[0]
    for index, (key, label, unit, _higher) in enumerate(metrics):
        ours = base.values.get(key)
        for i, state in enumerate(states):
            values = state.values.get(key, [])
            metric = f"{label} ({unit})" if i == 0 else ""
            if not values:
                why = ("not run" if state.unavailable else
                       "not measured" if key in state.unmeasured else "failed")
                table.add_row(metric, state.name, "—", why,
                              "0", "—")
                continue
            median = statistics.median(values)
            ratio = "—"
            if state is not base and ours:
                ratio = f"{statistics.median(ours) / median:.2f}×" if median else "—"
            table.add_row(metric, state.name, fmt(median, unit),
                          f"{fmt(min(values), unit)}–{fmt(max(values), unit)}",
                          str(len(values)), ratio)
        if index < len(metrics) - 1:
            table.add_section()
    return table


def settings_table(states: list[SystemState]) -> Table:
    table = Table(title="settings (► the processing setting used: best median of the tuning rounds)",
                  title_justify="left")
    table.add_column("system")
    table.add_column("version")
    table.add_column("processing setting tried", no_wrap=True)
    table.add_column("tuning jobs/s\n(each round)", justify="right", no_wrap=True)
    table.add_column("latency worker setting", overflow="fold")
    for index, state in enumerate(states):
        if index:
            table.add_section()
        if state.unavailable and not state.settings:
            table.add_row(state.name, state.version, f"not run: {state.unavailable}", "", "")
            continue
        for i, setting in enumerate(state.settings):
            rates = state.tuning[i] if i < len(state.tuning) else []
            mark = "► " if i == state.best else "  "
            shown = " / ".join(f"{rate:,.0f}" for rate in rates) or "failed"
            first = i == 0
            table.add_row(state.name if first else "", state.version if first else "",
                          f"{mark}{describe_setting(setting)}", shown,
                          describe_setting(state.latency_setting) if first else "")
    return table


# -- main ------------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="a server DSN (fresh databases are created on it)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=20000,
                        help="jobs for batched enqueue and processing")
    parser.add_argument("--latency-jobs", type=int, default=500)
    parser.add_argument("--single-jobs", type=int, default=2000,
                        help="jobs enqueued one at a time")
    parser.add_argument("--batch", type=int, default=1000, help="jobs per batched enqueue call")
    parser.add_argument("--tune-jobs", type=int, default=5000)
    parser.add_argument("--tune-rounds", type=int, default=2)
    parser.add_argument("--tune-seconds", type=float, default=6.0,
                        help="processing time cap of one tuning trial")
    parser.add_argument("--max-seconds", type=float, default=150.0,
                        help="processing time cap of one run (the rate is then of the jobs done)")
    parser.add_argument("--systems", default=",".join(SYSTEMS),
                        help="comma-separated subset of " + ",".join(SYSTEMS))
    parser.add_argument("--io-jobs", type=int, default=20000,
                        help="jobs of the I/O-bound workload (0: skip it)")
    parser.add_argument("--io-seconds", type=float, default=0.05,
                        help="how long each I/O-bound job waits")
    parser.add_argument("--io-inflight", default="500,2000",
                        help="comma-separated numbers of I/O-bound jobs in flight")
    parser.add_argument("--json", type=Path, help="also write the raw figures to this file")
    args = parser.parse_args()
    chosen = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = sorted(set(chosen) - set(SYSTEMS))
    if unknown:
        parser.error(f"--systems: unknown {', '.join(unknown)}")
    if "pgqueue" not in chosen:
        parser.error("--systems must include pgqueue (the ratios are pgqueue/peer)")
    args.systems = [s for s in SYSTEMS if s in chosen]
    try:
        args.io_inflight = [int(n) for n in args.io_inflight.split(",") if n.strip()]
    except ValueError:
        parser.error(f"--io-inflight: expected numbers separated by commas, got "
                     f"{args.io_inflight!r}")
    if args.io_jobs < 0 or args.io_seconds <= 0 or any(n < 2 for n in args.io_inflight):
        parser.error("--io-jobs must be >= 0, --io-seconds > 0 and each --io-inflight >= 2")
    if min(args.runs, args.jobs, args.latency_jobs, args.single_jobs, args.batch,
           args.tune_jobs, args.tune_rounds) < 1:
        parser.error("--runs, --jobs, --latency-jobs, --single-jobs, --batch, --tune-jobs and "
                     "--tune-rounds must be positive")
    return args


def main() -> None:
    args = parse_args()
    width = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 120
    console = Console(width=width)
    started = time.monotonic()
    load_before = os.getloadavg()[0]
    states = [SystemState(name, sys.executable) for name in args.systems]
    peers = [s for s in states if s.name in PEERS]
    if peers:
        problem = ensure_peers_venv(console)
        for state in peers:
            state.python = str(venv_python())
            if problem:
                state.unavailable = problem
    for state in states:
        if not state.unavailable:
            probe(state)
        if state.unavailable:
            console.print(f"[yellow]{state.name}: not run: {state.unavailable}[/]")

    server = None
    server_dsn: str = args.dsn or ""
    tmp: Path | None = None
    if not server_dsn:
        from pgqueue.db.embedded import EmbeddedServer

        tmp = Path(tempfile.mkdtemp(prefix="pgqueue-peers-"))
        server = EmbeddedServer(tmp)
        server_dsn = server.start()
        console.print(f"embedded Postgres in {tmp} (port {server.port})")
    try:
        facts = server_facts(server_dsn)
        console.print(f"tuning: {args.tune_rounds} round(s), {args.tune_jobs:,} jobs per "
                      f"setting, at most {args.tune_seconds:.0f} s of processing each")
        tune([s for s in states if not s.unavailable], server_dsn, args, console)
        for run in range(1, args.runs + 1):
            live = [s for s in states if not s.unavailable]
            shift = (run - 1) % max(1, len(live))
            one_run(live[shift:] + live[:shift], server_dsn, args, run, console)
            if args.io_jobs:
                io_run(live[shift:] + live[:shift], server_dsn, args, run, console)
    finally:
        if server is not None:
            server.stop()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)

    elapsed = time.monotonic() - started
    console.print()
    metrics = METRICS + (io_metrics(args.io_inflight) if args.io_jobs else [])
    console.print(results_table(states, args.runs, metrics))
    console.print(settings_table(states))
    for state in states:
        share = defaults_share(state)
        if share:
            console.print(share)
    console.print(
        f"Postgres {facts['server_version']} (fsync {facts['fsync']}, synchronous_commit "
        f"{facts['synchronous_commit']}, shared_buffers {facts['shared_buffers']}), "
        f"{'embedded, temporary' if server else 'given by --dsn'}; {os.cpu_count()} CPUs; "
        f"Python {platform.python_version()}; {dt.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}; "
        f"{elapsed / 60:.1f} min; load average {load_before:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end.\n"
        f"Batched enqueue: {args.batch} jobs per call. Processing: {args.jobs:,} no-op jobs, one "
        f"worker process, from the first handler start until every job is finished in the "
        f"database. Latency: {args.latency_jobs} jobs one every 10 ms to an idle worker in "
        f"another process. One at a time: {args.single_jobs:,} jobs.")
    if args.io_jobs:
        for line in bound_lines(states, args):
            console.print(line)
        console.print(f"I/O-bound: {args.io_jobs:,} jobs whose handler waits "
                      f"{args.io_seconds * 1000:.0f} ms, one worker process; each system's best "
                      f"of its settings per run.")
    for state in states:
        if state.unavailable:
            console.print(f"[yellow]{state.name} not run: {state.unavailable}[/]")
        for note in state.notes:
            console.print(f"[yellow]{state.name}: {note}[/]")
    if args.json:
        args.json.write_text(json.dumps({
            "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "server": facts,
            "systems": {s.name: {"version": s.version, "settings": s.settings, "best": s.best,
                                 "tuning": s.tuning, "latency_setting": s.latency_setting,
                                 "values": s.values, "notes": s.notes,
                                 "unavailable": s.unavailable} for s in states},
        }, indent=2) + "\n")


if __name__ == "__main__":
    main()
