"""The queue in a busy database: a fixed offered rate through phases of pressure on the
vacuum horizon, and what each phase costs.

    python bench/pressure.py [--dsn DSN] [--rate JOBS_PER_S] [--seconds PER_PHASE]
                             [--consumers N] [--payload BYTES]
                             [--phases clean,xmin:600,readers,recovery]  (NAME[:SECONDS], in order)

Producers offer `--rate` jobs a second (batches every 20 ms, as many request handlers would);
`--consumers` threads lease up to 10 jobs at a time (each from where its last lease ended, as
a worker's lease loop does), spend 1 ms per job and ack them; a
maintenance pass runs every second, as a worker's elected runner makes them, and is timed.
The phases, in the order given:

- clean: nothing else runs.
- xmin: a session holds a transaction id, idle in transaction, for the whole phase (what a
  forgotten `BEGIN` in a web request or a logical slot does): vacuum can remove nothing.
- readers: four REPEATABLE READ sessions scan the queue's tables and keep their snapshots for
  the whole phase (a report, an analytics export).
- recovery: the pressure is gone; how long until the tables are back to their clean size
  (within 20 % and 64 kB; the op log, which keeps a day of history and no dead rows, aside).

Per phase it prints completion against the offered rate, claim (lease call) latency p50 / p95 /
p99, end-to-end latency p50 / p99 (enqueued to acked), WAL bytes per job, vacuums of the queue's
tables, the buffers a lease's scan of the ready jobs touches at the phase's end (what it steps
over), and at the phase's end the dead rows and total size of each pgqueue table. With no DSN
it starts its own embedded Postgres (fsync on) in a temporary directory. Figures only: nothing
here is asserted.
"""
from __future__ import annotations

import argparse
import json
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import psycopg
from rich.console import Console
from rich.table import Table

import pgqueue
from pgqueue.client import enqueue, lease, settle
from pgqueue.client.benchmark import family, fresh_database, percentile, server
from pgqueue.client.position import LeasePosition
from pgqueue.db import connection
from pgqueue.maintenance.maintain import run_pass, vacuum_if_needed

STREAM = "pressure"
PHASES = ("clean", "xmin", "readers", "recovery")
#: Tables whose size and dead rows are reported (every table of the pgqueue schema that a job
#: passes through).
TABLE_STATS = """
SELECT relname, n_live_tup, n_dead_tup, pg_total_relation_size(relid) AS bytes,
       vacuum_count + autovacuum_count AS vacuums
FROM pg_stat_user_tables WHERE schemaname = 'pgqueue' ORDER BY relname"""


@dataclass
class Phase:
    """What one phase measured."""

    name: str
    seconds: float = 0.0
    offered: int = 0
    acked: int = 0
    claim_ms: list[float] = field(default_factory=list)
    e2e_ms: list[float] = field(default_factory=list)
    wal_bytes: int = 0
    vacuums: int = 0
    tables: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # live, dead, bytes
    back_to_clean_s: float | None = None
    #: buffers a lease's ordered scan of the ready index touched at the phase's end (the
    #: pressure still on): what it steps over
    scan_buffers: int = 0
    #: how long each maintenance pass took (reclaim, cron, pruning, counts, vacuum)
    pass_ms: list[float] = field(default_factory=list)
    #: partitions of the ready entries the passes emptied (pgqueue.recycle_ready)
    recycled: int = 0


class Pressure:
    """Producers, consumers and the phase counters they report into."""

    def __init__(self, dsn: str, rate: float, consumers: int, payload: int) -> None:
        self.dsn = dsn
        self.rate = rate
        self.consumers = consumers
        self.payload = b"x" * payload
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.phase = Phase("warm-up")
        self.enqueued_at: dict[int, float] = {}
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        self.threads = [threading.Thread(target=self._produce, daemon=True)]
        self.threads += [threading.Thread(target=self._consume, args=(i,), daemon=True)
                         for i in range(self.consumers)]
        self.threads += [threading.Thread(target=self.maintain, daemon=True),
                         threading.Thread(target=self.vacuum, daemon=True)]
        for t in self.threads:
            t.start()

    def maintain(self) -> None:
        """Maintenance passes every second, as a worker's elected runner makes them, each
        timed (what grows more expensive with every dead row shows here), and its vacuums of
        the job table beside them, as a Maintainer runs them."""
        with connection.connect(self.dsn) as conn:
            while not self.stop.wait(1.0):
                t0 = time.perf_counter()
                done = run_pass(conn, vacuum=False)
                with self.lock:
                    self.phase.pass_ms.append((time.perf_counter() - t0) * 1000)
                    self.phase.recycled += done.ready_recycled

    def vacuum(self) -> None:
        with connection.connect(self.dsn) as conn:
            while not self.stop.wait(1.0):
                vacuum_if_needed(conn)

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)

    def _produce(self) -> None:
        with connection.connect(self.dsn) as conn:
            began, sent = time.monotonic(), 0
            while not self.stop.is_set():
                due = int((time.monotonic() - began) * self.rate) - sent
                if due > 0:
                    ids = enqueue.enqueue_many(conn, STREAM, [pgqueue.NewJob(self.payload)
                                                              for _ in range(due)])
                    now = time.monotonic()
                    with self.lock:
                        self.phase.offered += len(ids)
                        self.enqueued_at.update(dict.fromkeys(ids, now))
                    sent += due
                self.stop.wait(0.02)

    def _consume(self, instance: int) -> None:
        position = LeasePosition()  # as a worker's lease loop keeps one
        with connection.connect(self.dsn) as conn:
            while not self.stop.is_set():
                t0 = time.perf_counter()
                held = lease.lease(conn, STREAM, 10, 30.0, 0, instance, position=position)
                claim = (time.perf_counter() - t0) * 1000
                if not held:
                    with self.lock:
                        self.phase.claim_ms.append(claim)
                    self.stop.wait(0.005)
                    continue
                time.sleep(0.001 * len(held))  # the work
                done = settle.ack_many(conn, held)
                now = time.monotonic()
                with self.lock:
                    self.phase.claim_ms.append(claim)
                    self.phase.acked += len(done)
                    for job_id in done:
                        at = self.enqueued_at.pop(job_id, None)
                        if at is not None:
                            self.phase.e2e_ms.append((now - at) * 1000)


def table_stats(dsn: str) -> dict[str, tuple[int, int, int, int]]:
    """Per pgqueue table (a ring's partitions added up): live rows, dead rows, total bytes,
    vacuums so far."""
    found: dict[str, list[int]] = {}
    with connection.connect(dsn) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        for r in conn.execute(TABLE_STATS).fetchall():
            into = found.setdefault(family(str(r[0])), [0, 0, 0, 0])
            for i in range(4):
                into[i] += int(r[i + 1])
    return {name: (v[0], v[1], v[2], v[3]) for name, v in found.items()}


def wal_lsn(dsn: str) -> int:
    with connection.connect(dsn) as conn:
        row = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint").fetchone()
    assert row is not None
    return int(row[0])


def scan_buffers(dsn: str) -> int:
    """Shared buffers the scan of the ready jobs a lease starts with reads to find 10 (without
    locking them): pgqueue.lease's scan of pgqueue.ready in lease order, then the jobs by
    primary key, with its planner settings. Every dead index entry and heap page it steps
    over counts."""
    with connection.connect(dsn) as conn:
        for setting in ("seqscan", "bitmapscan", "sort", "mergejoin", "hashjoin"):
            conn.execute(f"SET enable_{setting} = off")
        row = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "
            "WITH c AS MATERIALIZED (SELECT r.job_id FROM pgqueue.ready r WHERE r.stream = %s "
            "ORDER BY r.priority DESC, r.job_id LIMIT 10) "
            "SELECT j.id FROM pgqueue.job j "
            "WHERE j.id = ANY(ARRAY(SELECT job_id FROM c)) AND j.state || '' = 'pending'",
            (STREAM,)).fetchone()
    assert row is not None
    plan = row[0][0]["Plan"]
    if os.environ.get("PRESSURE_PLANS"):
        print(json.dumps(row[0], indent=1))
    return int(plan.get("Shared Hit Blocks", 0)) + int(plan.get("Shared Read Blocks", 0))


def hold_xmin(dsn: str, stop: threading.Event) -> None:
    """A session idle in transaction with a transaction id, until `stop`."""
    with psycopg.connect(dsn) as conn:
        conn.execute("SELECT pg_current_xact_id()")
        stop.wait()
        conn.rollback()


def read_repeatably(dsn: str, stop: threading.Event) -> None:
    """A REPEATABLE READ session scanning the queue's tables, keeping its snapshot until
    `stop` (a long report)."""
    with psycopg.connect(dsn) as conn:
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        while not stop.is_set():
            conn.execute("SELECT count(*), sum(octet_length(payload)) FROM pgqueue.job")
            conn.execute("SELECT op, count(*) FROM pgqueue.op_log GROUP BY op")
            stop.wait(2.0)
        conn.rollback()


def run_phase(p: Pressure, name: str, seconds: float, clean: dict[str, int] | None) -> Phase:
    """One phase under load: its pressure (if any) for `seconds`, then the figures."""
    phase = Phase(name)
    stop = threading.Event()
    pressure: list[threading.Thread] = []
    if name == "xmin":
        pressure = [threading.Thread(target=hold_xmin, args=(p.dsn, stop), daemon=True)]
    elif name == "readers":
        pressure = [threading.Thread(target=read_repeatably, args=(p.dsn, stop), daemon=True)
                    for _ in range(4)]
    before, wal0 = table_stats(p.dsn), wal_lsn(p.dsn)
    for t in pressure:
        t.start()
    with p.lock:
        p.phase = phase
    began = time.monotonic()
    while time.monotonic() - began < seconds:
        time.sleep(1.0)
        if name == "recovery" and clean is not None and phase.back_to_clean_s is None:
            sizes = table_stats(p.dsn)
            # the op log keeps its retention's history (a day by default) and no dead rows:
            # it grows with the jobs, pressure or not
            if all(sizes.get(t, (0, 0, 0, 0))[2] <= 1.2 * clean[t] + 64 * 1024
                   for t in clean if t != "op_log"):
                phase.back_to_clean_s = time.monotonic() - began
    phase.scan_buffers = scan_buffers(p.dsn)
    stop.set()
    for t in pressure:
        t.join(timeout=30)
    phase.seconds = time.monotonic() - began
    after, wal1 = table_stats(p.dsn), wal_lsn(p.dsn)
    with p.lock:
        phase.wal_bytes = wal1 - wal0
        phase.vacuums = sum(after[t][3] - before.get(t, (0, 0, 0, 0))[3] for t in after)
        phase.tables = {t: after[t][:3] for t in after}
    return phase


def report(console: Console, phases: Sequence[Phase], rate: float) -> None:
    table = Table(title=f"pgqueue under pressure: {rate:,.0f} jobs/s offered")
    for column in ("phase", "completed / offered", "claim ms p50 / p95 / p99",
                   "end-to-end ms p50 / p99", "WAL bytes / job", "vacuums", "ready scan buffers",
                   "ready partitions emptied",
                   "maintenance pass ms p50 / max", "back to clean"):
        table.add_column(column, justify="left" if column == "phase" else "right")
    for ph in phases:
        pct = 100.0 * ph.acked / ph.offered if ph.offered else float("nan")
        table.add_row(
            ph.name, f"{ph.acked:,} / {ph.offered:,} ({pct:.1f} %)",
            " / ".join(f"{percentile(ph.claim_ms, q):.1f}" for q in (50, 95, 99)),
            " / ".join(f"{percentile(ph.e2e_ms, q):.0f}" for q in (50, 99)),
            f"{ph.wal_bytes / max(ph.acked, 1):,.0f}", str(ph.vacuums), f"{ph.scan_buffers:,}",
            str(ph.recycled),
            f"{percentile(ph.pass_ms, 50):.1f} / {max(ph.pass_ms, default=float('nan')):.1f}",
            "" if ph.name != "recovery" else
            ("not within the phase" if ph.back_to_clean_s is None else f"{ph.back_to_clean_s:.0f} s"))
    console.print(table)
    sizes = Table(title="pgqueue tables at the end of each phase: dead rows / total size")
    sizes.add_column("table")
    for ph in phases:
        sizes.add_column(ph.name, justify="right")
    names = sorted({t for ph in phases for t, (_live, dead, size) in ph.tables.items()
                    if dead or size >= 64 * 1024})  # the tables a job passes through
    for name in names:
        cells: list[str] = []
        for ph in phases:
            _live, dead, size = ph.tables.get(name, (0, 0, 0))
            cells.append(f"{dead:,} / {size / 1048576:,.1f} MB")
        sizes.add_row(name, *cells)
    console.print(sizes)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="a server DSN (a scratch database is created on it)")
    parser.add_argument("--rate", type=float, default=400.0, help="jobs/s offered")
    parser.add_argument("--seconds", type=float, default=120.0, help="seconds per phase")
    parser.add_argument("--consumers", type=int, default=16)
    parser.add_argument("--payload", type=int, default=256, help="payload bytes per job")
    parser.add_argument("--phases", default=",".join(PHASES),
                        help="phases in order, each NAME or NAME:SECONDS (its own length)")
    args = parser.parse_args(argv)
    plan: list[tuple[str, float]] = []
    for item in (i for i in args.phases.split(",") if i):
        name, _, length = item.partition(":")
        if name not in PHASES:
            parser.error(f"--phases: unknown {name!r} (the phases: {', '.join(PHASES)})")
        try:
            plan.append((name, float(length) if length else args.seconds))
        except ValueError:
            parser.error(f"--phases: {item!r}: the length after ':' must be seconds")
    console = Console(width=max(Console().width, 190))  # the tables are wide: never folded
    with server(args.dsn, "pressure") as (server_dsn, _embedded):
        dsn = fresh_database(server_dsn, "pgqueue_bench_pressure")
        p = Pressure(dsn, args.rate, args.consumers, args.payload)
        p.start()
        time.sleep(min(10.0, args.seconds / 4))  # warm-up: leases and plans settle
        phases: list[Phase] = []
        clean: dict[str, int] | None = None
        for name, seconds in plan:
            console.print(f"phase {name} ({seconds:.0f} s) ...")
            phases.append(run_phase(p, name, seconds, clean))
            if name == "clean":
                clean = {t: v[2] for t, v in phases[-1].tables.items()}
        p.finish()
        report(console, phases, args.rate)
        console.print(f"{os.cpu_count()} CPUs; {args.consumers} consumers leasing up to 10 "
                      f"jobs at a time, 1 ms of work per job; {args.payload}-byte payloads")


if __name__ == "__main__":
    main()
