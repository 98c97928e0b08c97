"""What starting costs: the CPU time (user + system, of the child process alone) of
`python -c pass`, `import psycopg`, `import pgqueue`, `pgqueue --help` and `pgqueue stats`,
each run --runs times in a fresh interpreter; the median and the fastest run are printed.

    .venv/bin/python bench/startup.py [--runs 15] [--dsn DSN]

CPU time, not wall time, so a busy machine changes the figures less. The targets (issue 25):
`import pgqueue` within 0.1 s of `import psycopg`, and `pgqueue --help` within 0.15 s of it.
`pgqueue stats` runs against --dsn, or an embedded server started for the run (its schema
installed first; the server's own time is not counted).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

BIN = Path(sys.executable).parent
TARGETS = {"import pgqueue": 0.10, "pgqueue --help": 0.15}


def cpu_seconds(argv: list[str], env: dict[str, str]) -> float:
    """The CPU time one run of `argv` took (its own user + system time)."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _pid, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        err = proc.stderr.read().decode() if proc.stderr else ""
        raise SystemExit(f"{' '.join(argv)} failed: {err}")
    return usage.ru_utime + usage.ru_stime


def measure(runs: int, dsn: str) -> dict[str, list[float]]:
    env = {**os.environ, "PGQUEUE_DSN": dsn}
    python = sys.executable
    cases = {
        "python -c pass": [python, "-c", "pass"],
        "import psycopg": [python, "-c", "import psycopg"],
        "import pgqueue": [python, "-c", "import pgqueue"],
        "pgqueue --help": [str(BIN / "pgqueue"), "--help"],
        "pgqueue stats": [str(BIN / "pgqueue"), "stats"],
    }
    out: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(runs):  # interleaved, so a busy moment weighs on every case alike
        for name, argv in cases.items():
            out[name].append(cpu_seconds(argv, env))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--dsn", help="a database for `pgqueue stats` (default: an embedded one)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    from pgqueue.client.benchmark import fresh_database, server

    with server(args.dsn, "startup") as (base, _embedded):
        figures = measure(args.runs, fresh_database(base, "pgqueue_bench_startup"))
    medians = {name: statistics.median(v) for name, v in figures.items()}
    base_line = medians["import psycopg"]
    if args.json:
        print(json.dumps({"runs": args.runs, "median": medians,
                          "min": {n: min(v) for n, v in figures.items()}}, indent=2))
        return 0
    table = Table(title=f"CPU seconds per start, {args.runs} runs each")
    for column in ("command", "median", "fastest", "vs import psycopg", "target"):
        table.add_column(column, justify="left" if column == "command" else "right")
    for name, values in figures.items():
        target = TARGETS.get(name)
        table.add_row(name, f"{medians[name]:.3f}", f"{min(values):.3f}",
                      f"{medians[name] - base_line:+.3f}",
                      "" if target is None else f"≤ +{target:.2f} "
                      f"({'met' if medians[name] - base_line <= target else 'missed'})")
    Console().print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
