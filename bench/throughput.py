"""Throughput on one server, with the server's own rates for calibration.

    python bench/throughput.py [--dsn SERVER_DSN] [--jobs N] [--single N]

With no DSN it starts its own embedded Postgres (fsync on, default settings) and stops it at
the end. In the same run, on the same server, it prints pgqueue's enqueue (one per call, and
batched) and lease+ack (batches of 1 and 100) rates — the phases of `pgqueue bench`, from
pgqueue/client/benchmark.py — next to `pgbench -S` (select-only tps) and a pgbench script of one
INSERT per transaction (the server's single-insert commit rate, the ceiling for enqueueing one
job per call). It also renews 1,000 held leases with checkpoints in one renew_many call per
round and reports renewals/s and the share of those job-row updates that were HOT.
Figures only.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict
from rich.console import Console
from typing_extensions import LiteralString

import pgqueue
from pgqueue.client import benchmark, enqueue, lease, settle
from pgqueue.client.benchmark import fresh_database, print_figures, server
from pgqueue.db import connection, queries
from pgqueue.db.embedded import bin_dir


def pgbench(dsn: str, *args: str) -> float:
    """Run pgbench against dsn's database; its tps (0 when it failed)."""
    parts = conninfo_to_dict(dsn)
    cmd = [str(bin_dir() / "pgbench"), "-h", str(parts.get("host", "127.0.0.1")),
           "-p", str(parts.get("port", 5432)), "-U", str(parts.get("user", "postgres")), *args,
           str(parts["dbname"])]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    found = re.search(r"tps = ([0-9.]+)", out.stdout)
    return float(found.group(1)) if found else 0.0


def enqueue_script(dsn: str, stream: str, job: pgqueue.NewJob) -> Path:
    """A pgbench script of the very statement Queue.enqueue sends for `job` (rendered with its
    parameters), so pgbench measures the server's side of one-at-a-time enqueue."""
    params = enqueue.one_params(stream, job)  # as Queue.enqueue sends them, untraced
    query: LiteralString = "\n".join(line for line in queries.get("enqueue_job").sql.splitlines()
                      if not line.lstrip().startswith("--"))
    with connection.connect(dsn) as conn:
        sql = psycopg.ClientCursor(conn).mogrify(query, params)
    path = Path(tempfile.mkdtemp(prefix="pgqueue-bench-")) / f"{stream}.sql"
    path.write_text(" ".join(sql.split()) + ";\n")
    return path


def job_updates(conn: queries.Conn) -> tuple[int, int]:
    """(updates, HOT updates) of pgqueue.job so far, this connection's own included."""
    conn.execute("SELECT pg_stat_force_next_flush()")  # flushed as that statement commits
    row = conn.execute("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables"
                       " WHERE schemaname = 'pgqueue' AND relname = 'job'").fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def renewals(dsn: str, held: int, rounds: int) -> tuple[float, float]:
    """Hold `held` leases and renew them all with a fresh checkpoint in one renew_many call,
    `rounds` times, on one connection. Returns (renewals/s, % of those updates that were HOT)."""
    with connection.connect(dsn) as conn:
        enqueue.enqueue_many(conn, "renewals", [pgqueue.NewJob(b"x" * 64) for _ in range(held)])
        leases = lease.lease(conn, "renewals", held, 600.0, 0, 0)
        updates0, hot0 = job_updates(conn)
        t0 = time.perf_counter()
        for r in range(rounds):
            renewed = lease.renew_many(conn, [
                (one, None, pgqueue.Checkpoint(
                    last_completed_step="extract", cursor_step="load",
                    cursor=(r * held + i).to_bytes(8, "big"), schema_version=1,
                    step_set_hash="0" * 32))
                for i, one in enumerate(leases)])
            if len(renewed) != len(leases):
                raise RuntimeError(f"{len(leases) - len(renewed)} leases lost while renewing")
        elapsed = time.perf_counter() - t0
        updates1, hot1 = job_updates(conn)
        settle.ack_many(conn, leases)
    updates = updates1 - updates0
    return held * rounds / elapsed, 100.0 * (hot1 - hot0) / updates if updates else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="a server DSN (scratch databases are created on it)")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--single", type=int, default=2_000)
    parser.add_argument("--seconds", type=int, default=5, help="each pgbench run")
    parser.add_argument("--leases", type=int, default=1_000, help="leases renewed per call")
    parser.add_argument("--rounds", type=int, default=20, help="renew_many calls")
    args = parser.parse_args()
    console = Console()
    with server(args.dsn, "throughput") as (server_dsn, embedded):
        with console.status("pgqueue phases"):
            dsn = fresh_database(server_dsn, "pgqueue_bench_throughput")
            figures = benchmark.run(dsn, jobs=args.jobs, single=args.single)
        with console.status("renewals with checkpoints"):
            renew_rate, hot_pct = renewals(dsn, args.leases, args.rounds)
        with console.status("pgbench calibration"):
            calib = fresh_database(server_dsn, "pgqueue_bench_pgbench", migrate=False)
            pgbench(calib, "-i", "-s", "1", "-q")
            select_tps = pgbench(calib, "-S", "-n", "-T", str(args.seconds))
            with connection.connect(calib) as conn:
                conn.execute("CREATE TABLE one_insert (id bigserial PRIMARY KEY, payload bytea)")
            script = Path(tempfile.mkdtemp()) / "insert.sql"
            script.write_text("INSERT INTO one_insert (payload) VALUES ('\\x7b7d');\n")
            insert_tps = pgbench(calib, "-n", "-f", str(script), "-T", str(args.seconds))
            # The server's side of one-at-a-time enqueue: a ready job (whose transaction also
            # sends NOTIFY to wake workers) and a delayed one (no NOTIFY).
            enq = fresh_database(server_dsn, "pgqueue_bench_pgbench_enqueue")
            ready_tps = pgbench(enq, "-n", "-T", str(args.seconds), "-f", str(
                enqueue_script(enq, "ready", pgqueue.NewJob(b"{}"))))
            delayed_tps = pgbench(enq, "-n", "-T", str(args.seconds), "-f", str(
                enqueue_script(enq, "delayed", pgqueue.NewJob(b"{}", delay=3600))))
            # The job row alone, by hand: no function, no op, no NOTIFY. What storing a job in
            # this table costs the server before anything pgqueue adds to it.
            row_only = Path(tempfile.mkdtemp()) / "job_row.sql"
            row_only.write_text(
                "INSERT INTO pgqueue.job (id, stream, kind, payload, priority, state, not_before,"
                " enqueued_at, attempts, max_attempts) VALUES (nextval('pgqueue.job_id_seq'),"
                " 'row', 'noop', '\\x7b7d', 0, 'pending', now(), now(), 0, 25);\n")
            row_tps = pgbench(enq, "-n", "-T", str(args.seconds), "-f", str(row_only))
        rows = [(f"pgqueue {f.name} ({f.unit})", f"{f.value:,.0f}") for f in figures]
        rows += [(f"pgqueue renewals with checkpoints, {args.leases:,} per call (renewals/s)",
                  f"{renew_rate:,.0f}"),
                 ("  of which HOT updates of pgqueue.job", f"{hot_pct:.1f} %")]
        rows += [("pgbench -S, 1 client (tps)", f"{select_tps:,.0f}"),
                 ("pgbench one INSERT per transaction, 1 client (tps)", f"{insert_tps:,.0f}"),
                 ("pgbench Queue.enqueue's statement, a ready job (tps)", f"{ready_tps:,.0f}"),
                 ("pgbench the same, a delayed job: no NOTIFY (tps)", f"{delayed_tps:,.0f}"),
                 ("pgbench one INSERT of a pgqueue.job row by hand (tps)", f"{row_tps:,.0f}")]
        if insert_tps:
            rows += [("pgqueue enqueue one per call / single-insert commit rate",
                      f"{figures[0].value / insert_tps * 100:.0f} %"),
                     ("pgbench: enqueue statement / single INSERT",
                      f"{ready_tps / insert_tps * 100:.0f} %"),
                     ("pgbench: a job row by hand / single INSERT",
                      f"{row_tps / insert_tps * 100:.0f} %")]
        print_figures(console, "pgqueue throughput, one client" + (" (fsync on)" if embedded else ""),
                      rows)


if __name__ == "__main__":
    main()
