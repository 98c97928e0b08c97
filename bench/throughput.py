"""Throughput on one server, with the server's own rates for calibration.

    python bench/throughput.py [--dsn SERVER_DSN] [--jobs N] [--single N]

With no DSN it starts its own embedded Postgres (fsync on, default settings) and stops it at
the end. In the same run, on the same server, it prints pgqueue's enqueue (one per call, and
batched) and lease+ack (batches of 1 and 100) rates — the phases of `pgqueue bench`, from
pgqueue/benchmark.py — next to `pgbench -S` (select-only tps) and a pgbench script of one
INSERT per transaction (the server's single-insert commit rate, the ceiling for enqueueing one
job per call). Figures only.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import tempfile
from pathlib import Path

from psycopg.conninfo import conninfo_to_dict
from rich.console import Console

from pgqueue import benchmark, connection
from pgqueue.benchmark import fresh_database, print_figures, server
from pgqueue.embedded import bin_dir


def pgbench(dsn: str, *args: str) -> float:
    """Run pgbench against dsn's database; its tps (0 when it failed)."""
    parts = conninfo_to_dict(dsn)
    cmd = [str(bin_dir() / "pgbench"), "-h", str(parts.get("host", "127.0.0.1")),
           "-p", str(parts.get("port", 5432)), "-U", str(parts.get("user", "postgres")), *args,
           str(parts["dbname"])]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    found = re.search(r"tps = ([0-9.]+)", out.stdout)
    return float(found.group(1)) if found else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="a server DSN (scratch databases are created on it)")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--single", type=int, default=2_000)
    parser.add_argument("--seconds", type=int, default=5, help="each pgbench run")
    args = parser.parse_args()
    console = Console()
    with server(args.dsn, "throughput") as (server_dsn, embedded):
        with console.status("pgqueue phases"):
            figures = benchmark.run(fresh_database(server_dsn, "pgqueue_bench_throughput"),
                                    jobs=args.jobs, single=args.single)
        with console.status("pgbench calibration"):
            calib = fresh_database(server_dsn, "pgqueue_bench_pgbench", migrate=False)
            pgbench(calib, "-i", "-s", "1", "-q")
            select_tps = pgbench(calib, "-S", "-n", "-T", str(args.seconds))
            with connection.connect(calib) as conn:
                conn.execute("CREATE TABLE one_insert (id bigserial PRIMARY KEY, payload bytea)")
            script = Path(tempfile.mkdtemp()) / "insert.sql"
            script.write_text("INSERT INTO one_insert (payload) VALUES ('\\x7b7d');\n")
            insert_tps = pgbench(calib, "-n", "-f", str(script), "-T", str(args.seconds))
        rows = [(f"pgqueue {f.name} ({f.unit})", f"{f.value:,.0f}") for f in figures]
        rows += [("pgbench -S, 1 client (tps)", f"{select_tps:,.0f}"),
                 ("pgbench one INSERT per transaction, 1 client (tps)", f"{insert_tps:,.0f}")]
        if insert_tps:
            rows.append(("pgqueue enqueue one per call / single-insert commit rate",
                         f"{figures[0].value / insert_tps * 100:.0f} %"))
        print_figures(console, "pgqueue throughput, one client" + (" (fsync on)" if embedded else ""),
                      rows)


if __name__ == "__main__":
    main()
