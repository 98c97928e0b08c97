"""Replication lag under sustained load, for both ways of consuming the op log.

    python bench/replication.py [--rate N] [--seconds S] [--ramp 2000,4000,...] [--ramp-seconds S]
                                [--threads N] [--poll-interval S]

Starts two embedded Postgres servers (fsync on, defaults otherwise, track_commit_timestamp on):
the leader, and a replica server holding two replica databases, one attached by logical
replication (replica.attach) and one consumed by the follow reader (replica.Follower in a
thread). Writer threads run enqueue + lease + ack batches paced to a fixed op rate: first a
sustained phase, then phases at increasing rates.

Lag of an op = when it was applied on the replica minus when its transaction committed on the
leader (pg_xact_commit_timestamp there). On the follow replica, "applied" is the commit time of
the local transaction that ingested it. On the logical replica the commit timestamp of an
applied transaction is the leader's (Postgres records the origin's), so the bench adds a column
`arrived_at DEFAULT clock_timestamp()` to that replica's op_log (subscribers fill missing
columns with their defaults): the time the apply worker inserted the row. A path keeps up
with a phase when its p99 lag stays under --keep-up-ms (a replica falling behind accumulates
lag for the whole phase). Prints figures only; nothing here is asserted.
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

import pgqueue
from pgqueue.client.benchmark import fresh_database, percentile
from pgqueue.db import connection
from pgqueue.db.embedded import EmbeddedServer
from pgqueue.replicas import replica

SETTINGS = {"track_commit_timestamp": "on"}

LEADER_COMMIT_TS = ("SELECT seq, extract(epoch FROM pg_xact_commit_timestamp("
                    "(xid::text::bigint %% 4294967296)::text::xid))::float8 "
                    "FROM pgqueue.op_log WHERE seq BETWEEN %s AND %s")
LOGICAL_APPLIED = ("SELECT seq, extract(epoch FROM arrived_at)::float8 FROM pgqueue.op_log "
                   "WHERE seq BETWEEN %s AND %s")
FOLLOW_APPLIED = ("SELECT seq, extract(epoch FROM pg_xact_commit_timestamp(xmin))::float8 "
                  "FROM pgqueue.op_log WHERE seq BETWEEN %s AND %s")



def scalar(dsn: str, sql: str, params: tuple[object, ...] = ()) -> int:
    with connection.connect(dsn) as conn:
        row = conn.execute(sql.encode(), params).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def times(dsn: str, sql: str, lo: int, hi: int) -> dict[int, float]:
    with connection.connect(dsn) as conn:
        return {int(s): float(t) for s, t in conn.execute(sql.encode(), (lo, hi)).fetchall()
                if t is not None}



class Load:
    """Writer threads doing enqueue(B) + lease(B) + ack(B) cycles paced to `rate` ops/s."""

    def __init__(self, dsn: str, threads: int) -> None:
        self.dsn = dsn
        self.threads = threads
        self.ops = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._workers: list[threading.Thread] = []

    def start(self, rate: float) -> None:
        self._stop.clear()
        per_thread = rate / self.threads
        batch = max(5, min(100, int(rate / 200)))
        self._workers = [threading.Thread(target=self._run, args=(i, per_thread, batch), daemon=True)
                         for i in range(self.threads)]
        for t in self._workers:
            t.start()

    def stop(self) -> None:
        self._stop.set()
        for t in self._workers:
            t.join()

    def _run(self, index: int, rate: float, batch: int) -> None:
        with pgqueue.Queue(self.dsn, stream=f"bench{index}", pool_size=2) as q:
            due = time.perf_counter()
            while not self._stop.is_set():
                q.enqueue_many([pgqueue.NewJob(b"x" * 32) for _ in range(batch)])
                leases = q.lease(batch)
                q.ack_many(leases)
                with self._lock:
                    self.ops += batch + 2 * len(leases)
                due += 3 * batch / rate
                now = time.perf_counter()
                if due > now:
                    self._stop.wait(due - now)
                elif now - due > 1.0:
                    due = now  # far behind: this rate is out of reach; do not burst


@dataclass
class Phase:
    name: str
    target: float
    achieved: float
    ops: int
    lag: dict[str, tuple[float, float, float]]  # path -> (p50, p99, max) in ms
    caught_up: dict[str, bool]


def wait_caught_up(leader: str, replicas: dict[str, str], lo: int, hi: int,
                   timeout: float) -> dict[str, bool]:
    want = scalar(leader, "SELECT count(*) FROM pgqueue.op_log WHERE seq BETWEEN %s AND %s", (lo, hi))
    done: dict[str, bool] = {}
    deadline = time.monotonic() + timeout
    for path, dsn in replicas.items():
        while True:
            have = scalar(dsn, "SELECT count(*) FROM pgqueue.op_log WHERE seq BETWEEN %s AND %s",
                          (lo, hi))
            if have >= want:
                done[path] = True
                break
            if time.monotonic() > deadline:
                done[path] = False
                break
            time.sleep(0.05)
    return done


def run_phase(name: str, rate: float, seconds: float, load: Load, leader: str,
              replicas: dict[str, str]) -> Phase:
    lo = scalar(leader, "SELECT coalesce(max(seq), 0) FROM pgqueue.op_log") + 1
    ops0 = load.ops
    t0 = time.perf_counter()
    load.start(rate)
    time.sleep(seconds)
    load.stop()
    elapsed = time.perf_counter() - t0
    hi = scalar(leader, "SELECT coalesce(max(seq), 0) FROM pgqueue.op_log")
    caught_up = wait_caught_up(leader, replicas, lo, hi, timeout=120)
    committed = times(leader, LEADER_COMMIT_TS, lo, hi)
    lag: dict[str, tuple[float, float, float]] = {}
    for path, dsn in replicas.items():
        applied = times(dsn, LOGICAL_APPLIED if path == "logical" else FOLLOW_APPLIED, lo, hi)
        lags = [(applied[s] - committed[s]) * 1000 for s in committed if s in applied]
        lag[path] = (percentile(lags, 50), percentile(lags, 99), max(lags, default=float("nan")))
    ops = load.ops - ops0
    return Phase(name, rate, ops / elapsed, ops, lag, caught_up)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=1000, help="sustained phase: ops/s")
    parser.add_argument("--seconds", type=float, default=20, help="sustained phase: duration")
    parser.add_argument("--ramp", default="2000,4000,8000,16000",
                        help="comma-separated op rates of the ramp phases")
    parser.add_argument("--ramp-seconds", type=float, default=8)
    parser.add_argument("--threads", type=int, default=2, help="writer threads")
    parser.add_argument("--poll-interval", type=float, default=0.1,
                        help="the follow reader's poll interval (seconds)")
    parser.add_argument("--keep-up-ms", type=float, default=500,
                        help="a path keeps up with a phase when its p99 lag is below this")
    args = parser.parse_args()

    roots = [Path(tempfile.mkdtemp(prefix="pgqueue-bench-repl-")) for _ in range(2)]
    servers = [EmbeddedServer(root, settings=SETTINGS) for root in roots]
    console = Console(width=150)
    follower: replica.Follower | None = None
    follow_thread: threading.Thread | None = None
    try:
        leader_server, replica_server = (s.start() for s in servers)
        leader = fresh_database(leader_server, "bench_leader")
        logical_db = fresh_database(replica_server, "bench_logical")
        follow_db = fresh_database(replica_server, "bench_follow")
        for dsn in (logical_db, follow_db):
            with connection.connect(dsn) as conn:
                conn.execute("ALTER TABLE pgqueue.op_log ADD COLUMN arrived_at timestamptz "
                             "DEFAULT clock_timestamp()")
        replica.attach(leader, logical_db, "bench_logical")
        follower = replica.Follower(leader, follow_db, "bench_follow",
                                    poll_interval=args.poll_interval)
        follow_thread = threading.Thread(target=follower.run, daemon=True)
        follow_thread.start()
        replicas = {"logical": logical_db, "follow": follow_db}
        load = Load(leader, args.threads)
        console.print(f"[dim]sustained {args.rate:,.0f} ops/s for {args.seconds:.0f}s, then "
                      f"{args.ramp} ops/s for {args.ramp_seconds:.0f}s each; {args.threads} "
                      f"writer threads; follow poll interval {args.poll_interval}s[/dim]")
        phases = [run_phase("sustained", args.rate, args.seconds, load, leader, replicas)]
        for rate in (float(r) for r in args.ramp.split(",") if r.strip()):
            console.print(f"[dim]{phases[-1].name}: {phases[-1].achieved:,.0f} ops/s done[/dim]")
            phases.append(run_phase("ramp", rate, args.ramp_seconds, load, leader, replicas))
            if phases[-1].achieved < 0.8 * rate:
                break  # the leader cannot go faster on this machine

        table = Table(title="replication lag (fsync on; ms from leader commit to applied on the replica)")
        for col in ("phase", "target ops/s", "leader ops/s", "logical p50", "logical p99",
                    "logical max", "follow p50", "follow p99", "follow max", "keeps up"):
            table.add_column(col, justify="left" if col in ("phase", "keeps up") else "right")
        best = {"logical": 0.0, "follow": 0.0}
        for ph in phases:
            keeps = []
            for path in ("logical", "follow"):
                ok = ph.caught_up[path] and ph.lag[path][1] < args.keep_up_ms
                if ok:
                    best[path] = max(best[path], ph.achieved)
                keeps.append(f"{path} {'yes' if ok else 'NO'}")
            lg, fl = ph.lag["logical"], ph.lag["follow"]
            table.add_row(ph.name, f"{ph.target:,.0f}", f"{ph.achieved:,.0f}",
                          f"{lg[0]:.1f}", f"{lg[1]:.1f}", f"{lg[2]:.1f}",
                          f"{fl[0]:.1f}", f"{fl[1]:.1f}", f"{fl[2]:.1f}", ", ".join(keeps))
        console.print(table)
        fastest = max(ph.achieved for ph in phases)
        saturated = phases[-1].achieved < 0.95 * phases[-1].target
        for path in ("logical", "follow"):
            note = ""
            if best[path] >= fastest:
                note = (" (as fast as the leader went on this machine)" if saturated
                        else " (the highest rate run; try a higher --ramp)")
            console.print(f"highest leader rate the {path} replica kept up with: "
                          f"{best[path]:,.0f} ops/s{note}")
        total = scalar(leader, "SELECT count(*) FROM pgqueue.op_log")
        held = {path: scalar(dsn, "SELECT count(*) FROM pgqueue.op_log") for path, dsn in replicas.items()}
        console.print(f"op log: leader {total:,} ops; logical replica {held['logical']:,}; "
                      f"follow replica {held['follow']:,}")
    finally:
        if follower is not None:
            follower.stop()
        if follow_thread is not None:
            follow_thread.join(30)
        for s in servers:
            s.stop("fast")
        for root in roots:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
