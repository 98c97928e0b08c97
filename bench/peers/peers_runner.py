"""One phase of the peer benchmark for one system, run as a subprocess by bench/peers/peers.py.

    python bench/peers/peers_runner.py SYSTEM PHASE --dsn DSN [options]

SYSTEM is pgqueue (run with pgqueue's interpreter) or pgqueuer, procrastinate, chancy (run with
bench/peers/.venv/bin/python). The system's adapter is the module bench/peers/peers_SYSTEM.py,
loaded by name, so this harness never imports a queue library itself. Every phase prints one JSON
object as the last line of stdout; figures are computed here so all systems are measured alike.

Phases:
- process: enqueue --jobs no-op jobs in batches of --batch (timed: batched enqueue), then run one
  worker with setting --setting until every job is done in the database (timed from the first
  handler start: processing throughput), or --max-seconds pass (then the count is partial);
- latency: start an idle worker in a child process (phase latency-worker), enqueue
  --warmup + --jobs jobs one every --interval seconds, each carrying its wall-clock enqueue time
  taken just before the enqueue call; the handler notes its own start time. The producer also
  times each enqueue call itself (its round trip and commit are part of every latency);
- single: enqueue --jobs jobs one call (and one transaction) at a time (timed);
- producers: --tasks asyncio tasks share --jobs jobs, each enqueuing one per call (timed);
- io: enqueue --jobs jobs (batched, untimed), then run one worker whose handler waits
  --io-seconds (asyncio.sleep in an async handler with --mode async, time.sleep on a thread with
  --mode sync) with --inflight jobs in flight, setting --setting of the adapter's
  IO_SETTINGS[mode], timed from the first handler start until every job is finished (a system
  without that mode says so).
With --setup the system's schema is installed first.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import selectors
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
SYSTEMS = ("pgqueue", "pgqueuer", "procrastinate", "chancy")


def adapter(system: str) -> ModuleType:
    """The adapter module bench/peers/peers_<system>.py (the bench directory is on sys.path)."""
    if system not in SYSTEMS:
        raise SystemExit(f"unknown system {system!r}; one of {', '.join(SYSTEMS)}")
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    return importlib.import_module(f"peers_{system}")


def percentile(values: list[float], pct: float) -> float:
    """The pct-th percentile by linear interpolation between closest ranks."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * pct / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def emit(result: dict[str, Any]) -> None:
    sys.stdout.flush()
    print(json.dumps(result), flush=True)


def phase_process(mod: ModuleType, args: argparse.Namespace) -> dict[str, Any]:
    settings: list[dict[str, Any]] = mod.SETTINGS
    setting = settings[args.setting]
    batch_s = float(mod.enqueue_batch(args.dsn, args.jobs, args.batch))
    done, seconds = mod.process(args.dsn, args.jobs, setting, args.max_seconds)
    return {
        "batch_enqueue_per_s": args.jobs / batch_s,
        "processed": int(done),
        "process_s": float(seconds),
        "process_per_s": int(done) / float(seconds) if seconds > 0 else 0.0,
        "partial": int(done) < args.jobs,
        "setting": setting,
    }


def _read_line(proc: subprocess.Popen[str], timeout: float) -> str:
    """One line of the child's stdout, or '' when it exits or the timeout passes first."""
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        if not sel.select(timeout):
            return ""
        return proc.stdout.readline()
    finally:
        sel.close()


def phase_latency(mod: ModuleType, args: argparse.Namespace) -> dict[str, Any]:
    total = args.warmup + args.jobs
    produce_seconds = total * args.interval
    worker_budget = produce_seconds + 30.0
    cmd = [sys.executable, str(Path(__file__).resolve()), args.system, "latency-worker",
           "--dsn", args.dsn, "--jobs", str(total), "--max-seconds", str(worker_budget)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        line = _read_line(proc, 60.0)
        if line.strip() != "READY":
            raise RuntimeError(f"the latency worker did not start (said {line.strip()!r})")
        time.sleep(1.0)  # let it settle into its idle wait (LISTEN in place)
        calls = [c * 1000.0 for c in mod.produce(args.dsn, total, args.interval)][args.warmup:]
        out, _ = proc.communicate(timeout=worker_budget + 30.0)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if proc.returncode != 0:
        raise RuntimeError(f"the latency worker exited with {proc.returncode}")
    records: list[list[float]] = json.loads(out.strip().splitlines()[-1])["records"]
    latencies = [(start - enq) * 1000.0 for i, enq, start in records if i >= args.warmup]
    return {
        "latency_p50_ms": percentile(latencies, 50),
        "latency_p99_ms": percentile(latencies, 99),
        "latency_max_ms": max(latencies) if latencies else float("nan"),
        # the producer's own enqueue call (round trip and commit): part of every latency
        "enqueue_call_p50_ms": percentile(calls, 50),
        "enqueue_call_p99_ms": percentile(calls, 99),
        "latency_samples": len(latencies),
        "latency_expected": args.jobs,
        "partial": len(latencies) < args.jobs,
        "setting": mod.LATENCY_SETTING,
    }


def phase_latency_worker(mod: ModuleType, args: argparse.Namespace) -> dict[str, Any]:
    def ready() -> None:
        print("READY", flush=True)

    records = mod.latency_worker(args.dsn, args.jobs, ready, args.max_seconds)
    return {"records": [[int(i), float(e), float(s)] for i, e, s in records]}


def phase_single(mod: ModuleType, args: argparse.Namespace) -> dict[str, Any]:
    seconds = float(mod.enqueue_one(args.dsn, args.jobs))
    return {"single_enqueue_per_s": args.jobs / seconds}


def phase_producers(mod: ModuleType, args: argparse.Namespace) -> dict[str, Any]:
    """--tasks asyncio tasks each enqueue one job per call, --jobs in all (a system without an
    async producer API says so)."""
    if not hasattr(mod, "enqueue_concurrent"):
        return {"async_producers_per_s": None}
    seconds = float(mod.enqueue_concurrent(args.dsn, args.jobs, args.tasks))
    return {"async_producers_per_s": args.jobs / seconds}


def phase_io(mod: ModuleType, args: argparse.Namespace) -> dict[str, Any]:
    settings: dict[str, list[dict[str, Any]]] = getattr(mod, "IO_SETTINGS", {})
    if args.mode not in settings:
        return {"io_per_s": None}
    setting = settings[args.mode][args.setting]
    mod.enqueue_batch(args.dsn, args.jobs, args.batch)
    done, seconds = mod.process_io(args.dsn, args.jobs, setting, args.inflight, args.io_seconds,
                                   args.mode, args.max_seconds)
    return {
        "io_per_s": int(done) / float(seconds) if seconds > 0 else 0.0,
        "processed": int(done),
        "partial": int(done) < args.jobs,
        "setting": setting,
    }


PHASES = {
    "process": phase_process,
    "latency": phase_latency,
    "latency-worker": phase_latency_worker,
    "single": phase_single,
    "producers": phase_producers,
    "io": phase_io,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("system", choices=SYSTEMS)
    parser.add_argument("phase", choices=[*PHASES, "settings"])
    parser.add_argument("--dsn", default="")
    parser.add_argument("--setup", action="store_true", help="install the schema first")
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--setting", type=int, default=0, help="index into the adapter's SETTINGS")
    parser.add_argument("--max-seconds", type=float, default=120.0)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--interval", type=float, default=0.010)
    parser.add_argument("--tasks", type=int, default=50, help="producers: concurrent tasks")
    parser.add_argument("--inflight", type=int, default=500, help="io: jobs in flight")
    parser.add_argument("--io-seconds", type=float, default=0.05, help="io: each job's wait")
    parser.add_argument("--mode", choices=["async", "sync"], default="async",
                        help="io: async handlers (asyncio.sleep) or sync ones (time.sleep)")
    args = parser.parse_args()
    mod = adapter(args.system)
    if args.phase == "settings":
        emit({"version": mod.version(), "settings": mod.SETTINGS,
              "latency_setting": mod.LATENCY_SETTING, "python": sys.version.split()[0],
              "io_settings": getattr(mod, "IO_SETTINGS", {})})
        return
    if args.setup:
        mod.setup(args.dsn)
    result = PHASES[args.phase](mod, args)
    emit(result)
    if args.phase == "latency-worker":
        # Some peers leave non-daemon threads or tasks behind; the result is out, so leave.
        sys.stdout.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
