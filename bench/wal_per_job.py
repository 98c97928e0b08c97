"""Bytes written per job: WAL by relation (heap, each index) and by record kind, and what the
tables keep, for a plain job and for a three-step job, from enqueue to ack.

    python bench/wal_per_job.py [--dsn DSN] [--jobs N] [--batch N]

Jobs are enqueued in batches of `--batch` (256-byte payloads of random bytes: a log that keeps a
call's payloads in one row would see TOAST compress alike payloads to almost nothing, and real
payloads are not alike), then a worker (concurrency 16, maintenance off) runs them: a no-op
plain handler, then a step job of three no-op steps. The WAL of each part is read back with
pg_walinspect (superuser, or pg_read_server_files) and charged to the relation each record's
first block belongs to (commit records and the like: "(no relation)"); full-page images are
counted apart, since they depend on when the last checkpoint was. The op log grows by what it
keeps per job (it is pruned after its retention); the job table returns to its size once the
jobs are acked. With no DSN it starts its own embedded Postgres (fsync on). Figures only:
nothing here is asserted.
"""
from __future__ import annotations

import argparse
import os
import re
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

from rich.console import Console
from rich.table import Table

import pgqueue
from pgqueue.client.benchmark import family, fresh_database, server
from pgqueue.db import connection

PAYLOAD_BYTES = 256
_REL = re.compile(r"rel \d+/(\d+)/(\d+)")


@dataclass
class Part:
    """The WAL one part wrote, by relation: (bytes without full-page images, FPI bytes)."""

    name: str
    jobs: int
    wal: dict[str, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))
    records: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    @property
    def total(self) -> int:
        return sum(b + f for b, f in self.wal.values())


def lsn(dsn: str) -> str:
    with connection.connect(dsn) as conn:
        row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    return str(row[0])


def read_wal(dsn: str, start: str, end: str, part: Part) -> None:
    """Charge every WAL record between `start` and `end` to its first block's relation."""
    with connection.connect(dsn) as conn:
        names = {int(node): family(str(rel)) for node, rel in conn.execute(
            "SELECT pg_relation_filenode(c.oid), c.relname FROM pg_class c "
            "WHERE pg_relation_filenode(c.oid) IS NOT NULL").fetchall()}
        rows = conn.execute(
            "SELECT resource_manager, record_type, record_length, fpi_length, block_ref "
            "FROM pg_get_wal_records_info(%s::pg_lsn, %s::pg_lsn)", (start, end)).fetchall()
    for rmgr, rtype, length, fpi, block_ref in rows:
        found = _REL.search(block_ref or "")
        relation = names.get(int(found.group(2)), f"filenode {found.group(2)}") if found \
            else "(no relation)"
        part.wal[relation][0] += int(length) - int(fpi)
        part.wal[relation][1] += int(fpi)
        part.records[f"{rmgr}/{rtype}"] += 1


def sizes(dsn: str) -> dict[str, int]:
    found: dict[str, int] = defaultdict(int)
    with connection.connect(dsn) as conn:
        for name, size in conn.execute(
                "SELECT relname, pg_total_relation_size(relid) FROM pg_stat_user_tables "
                "WHERE schemaname = 'pgqueue'").fetchall():
            found[family(str(name))] += int(size)
    return dict(found)


def drain(dsn: str, app: pgqueue.App, stream: str, jobs: int) -> None:
    worker = pgqueue.Worker(app, dsn, streams=[stream], concurrency=16, maintenance=False,
                            poll_interval=0.05, visibility_timeout=30)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 600
    while worker.processed < jobs and time.monotonic() < deadline:
        time.sleep(0.01)
    worker.stop()
    thread.join()


def measure(dsn: str, kind: str, jobs: int, batch: int, app: pgqueue.App) -> tuple[Part, Part]:
    stream = f"bytes-{kind}"
    enq = Part(f"{kind}: enqueue (batches of {batch})", jobs)
    run = Part(f"{kind}: lease, run, ack (a worker)", jobs)
    with connection.connect(dsn) as conn:
        conn.execute("CHECKPOINT")  # full-page images from here on are this part's
    start = lsn(dsn)
    with pgqueue.Queue(dsn, stream=stream) as q:
        for at in range(0, jobs, batch):
            q.enqueue_many([app.new_job(kind, os.urandom(PAYLOAD_BYTES))
                            for _ in range(min(batch, jobs - at))])
    middle = lsn(dsn)
    drain(dsn, app, stream, jobs)
    end = lsn(dsn)
    read_wal(dsn, start, middle, enq)
    read_wal(dsn, middle, end, run)
    return enq, run


def app() -> pgqueue.App:
    a = pgqueue.App()

    @a.job("plain")
    def plain(ctx: pgqueue.JobContext) -> None:
        return None

    steps = a.step_job("steps")
    for name in ("one", "two", "three"):
        steps.step(name)(lambda ctx: None)
    return a


def report(console: Console, parts: list[Part], grown: dict[str, dict[str, int]]) -> None:
    relations = sorted({r for p in parts for r in p.wal},
                       key=lambda r: -sum(p.wal[r][0] + p.wal[r][1] for p in parts if r in p.wal))
    table = Table(title="WAL bytes per job, by relation (without full-page images; FPI after +)")
    table.add_column("relation")
    for p in parts:
        table.add_column(p.name, justify="right")
    for r in relations:
        if all(r not in p.wal or p.wal[r][0] + p.wal[r][1] < p.jobs for p in parts):
            continue  # under a byte per job everywhere: catalogs, sequences, registry rows
        table.add_row(r, *(f"{p.wal[r][0] / p.jobs:,.0f}" + (f" +{p.wal[r][1] / p.jobs:,.0f}"
                                                               if p.wal[r][1] else "")
                           if r in p.wal else "" for p in parts))
    table.add_row("total", *(f"{p.total / p.jobs:,.0f}" for p in parts), style="bold")
    console.print(table)
    kept = Table(title="table growth per job over the run (acked jobs' space is reused once vacuumed)")
    kept.add_column("kind")
    for name in ("job", "op_log", "job_count_delta"):
        kept.add_column(name, justify="right")
    for kind, growth in grown.items():
        kept.add_row(kind, *(f"{growth.get(n, 0):,.0f}" for n in ("job", "op_log", "job_count_delta")))
    console.print(kept)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="a server DSN (a scratch database is created on it)")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()
    console = Console(width=max(Console().width, 140))
    with server(args.dsn, "walbytes") as (server_dsn, _embedded):
        dsn = fresh_database(server_dsn, "pgqueue_bench_bytes")
        with connection.connect(dsn) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        a = app()
        parts: list[Part] = []
        grown: dict[str, dict[str, int]] = {}
        for kind in ("plain", "steps"):
            before = sizes(dsn)
            parts.extend(measure(dsn, kind, args.jobs, args.batch, a))
            after = sizes(dsn)
            grown[kind] = {t: (after[t] - before.get(t, 0)) // args.jobs for t in after}
        report(console, parts, grown)
        with connection.connect(dsn) as conn:
            row = conn.execute("SELECT current_setting('wal_level')").fetchone()
        console.print(f"{args.jobs:,} jobs of each kind, {PAYLOAD_BYTES}-byte random payloads; "
                      f"wal_level={row[0] if row else '?'} (logical: an update logs its whole "
                      f"new row; below it, only what changed around the row's middle)")


if __name__ == "__main__":
    main()
