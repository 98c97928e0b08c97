"""The chaos soak: a queue under faults, then checked against its producers' and handlers'
own records and the op log.

    python bench/soak/soak.py --duration SECONDS --seed N [--json FILE] [--workers N] [--keep]

Starts three embedded Postgres servers (a leader with wal_level=logical, a logical replica
attached by `replica.attach`, a follow replica fed by a `pgqueue replica follow` process),
worker processes (bench/soak/soak_procs.py worker, the App in tests/acceptance/soak_app.py: plain
jobs, some failing and retried, some slower than the visibility timeout, three-step jobs
with a cursor, cron tick jobs), three schedulers (maintenance passes without election) on
three one-second cron schedules (catch_up none / one / all), and four producers (single,
batched, transactional with rollbacks, dedup keys), all given [leader, logical replica].
Meanwhile a seeded, bounded chaos plan (bench/soak/soak_chaos.py) kills, stops and restarts
workers, terminates backends, restarts the leader (once in immediate mode), restarts the
replicas, and fails over once (the follow replica's server is down across the failover; the
follow reader is then pointed at the new leader). Then producers and schedulers stop (the
schedules are paused), the workers drain the queue, and the checks (bench/soak/soak_checks.py)
run. Prints tables of faults, checks and figures; exits 0 when every check passed, 1 on any
violation, 2 when the soak itself could not run.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import random
import shutil
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from rich.console import Console
from rich.table import Table

import pgqueue
from bench.soak.soak_chaos import KINDS, Chaos, plan
from bench.soak.soak_checks import Check, Evidence, load_ops, read_jsonl, run_all
from bench.soak.soak_cluster import PROCS, STREAM, Cluster, Procs, one, rows
from bench.soak.soak_load import start_producers
from pgqueue.replicas import replica
from tests.acceptance.soak_app import LEDGER_ENV

VISIBILITY_TIMEOUT = 2.0
SCHEDULES = (("tick-none", "none"), ("tick-one", "one"), ("tick-all", "all"))
MISFIRE_GRACE = 3.0
DRAIN_SECONDS = 90.0


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="soak", description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=90.0, help="seconds of chaos")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", type=Path, default=None, help="write the figures here")
    p.add_argument("--workers", type=int, default=3, help="worker processes at once")
    p.add_argument("--pace", type=float, default=1.0,
                   help="seconds between a producer's calls, on average")
    p.add_argument("--keep", action="store_true", help="keep logs and ledgers (always kept on "
                                                       "a violation)")
    args = p.parse_args(argv)
    if args.duration < 20:
        p.error("--duration must be at least 20 seconds (the plan needs room for every fault)")
    return args


def now_ms() -> int:
    return int(time.time() * 1000)


class Soak:
    def __init__(self, args: argparse.Namespace, root: Path, console: Console) -> None:
        self.args = args
        self.root = root
        self.console = console
        self.logs = root / "logs"
        self.ledger = root / "ledger"
        self.logs.mkdir()
        self.ledger.mkdir()
        env = {**os.environ, LEDGER_ENV: str(self.ledger), "PYTHONUNBUFFERED": "1"}
        env.pop("PGQUEUE_DSN", None)
        self.procs = Procs(self.logs, env)
        self.cluster = Cluster(root, self.procs)
        self.rng = random.Random(args.seed)
        self.unexpected: list[str] = []
        self.verified: list[tuple[str, replica.VerifyResult]] = []

    def say(self, text: str) -> None:
        self.console.print(text, highlight=False)

    def setup(self) -> None:
        t0 = time.monotonic()
        self.cluster.start()
        with pgqueue.Queue(self.cluster.leader.dsn, stream=STREAM) as q:
            q.configure_stream(retry_base=0.2, retry_cap=1.0)
            for name, policy in SCHEDULES:
                q.upsert_schedule(name, "* * * * * *", {"schedule": name}, kind="tick",
                                  catch_up=policy, misfire_grace=MISFIRE_GRACE)
        self.cluster.attach_replicas()
        self.say(f"servers up, replicas attached in {time.monotonic() - t0:.1f}s; work in "
                 f"{self.root}")

    def run(self) -> tuple[list[Check], dict[str, Any], Chaos]:
        args = self.args
        events = plan(self.rng, args.duration)
        self.setup()
        dsns = self.cluster.client_dsns
        dsn_flags = [flag for d in dsns for flag in ("--dsn", d)]
        schedulers = [self.procs.spawn(f"scheduler-{i}", [
            sys.executable, PROCS, "scheduler", *dsn_flags]) for i in range(1, 4)]
        chaos = Chaos(self.rng, self.cluster, self.procs, args.workers, VISIBILITY_TIMEOUT,
                      self.say)
        stop = threading.Event()
        producers = start_producers(dsns, STREAM, args.seed, self.ledger, stop, args.pace)
        self.say(f"chaos: {len(events)} faults planned over {args.duration:.0f}s")
        chaos.run(events, until=args.duration)
        stop.set()
        for p in producers:
            p.join(60)
            if p.is_alive() or p.error is not None:
                self.unexpected.append(f"producer {p.mode} failed: {p.error!r}")
        for s in schedulers:
            if not s.alive():
                self.unexpected.append(f"{s.name} exited by itself ({s.popen.returncode})")
            elif (code := self.procs.terminate(s)) != 0:
                self.unexpected.append(f"{s.name} exited with code {code} on SIGTERM")
        schedules_stopped = now_ms()
        with pgqueue.Queue(dsns, stream=STREAM) as q:  # the workers' maintenance fires too
            for name, _policy in SCHEDULES:
                q.pause_schedule(name)
        self.drain(chaos)
        workers_stopped = time.time()
        for w in chaos.workers:
            if w.alive():
                chaos.killed.add(w.pid)
                if (code := self.procs.terminate(w)) != 0:
                    self.unexpected.append(f"{w.name} exited with code {code} on SIGTERM")
        chaos.reap()
        self.verify("the leader")
        lag, missing = self.follow_lag()
        self.cluster.stop_follower()
        faults = [dataclasses.asdict(f) for f in chaos.faults]
        for f in faults:
            if f["kind"] == "stop_worker":
                end = chaos.killed_at.get(f["data"]["pid"], workers_stopped)
                f["data"]["ran_after_continue"] = end - f["data"].get("continued_at", end)
        self.dump_op_logs()
        ev = self.evidence(faults, schedules_stopped, chaos)
        ev.figures["follow_replica_lag_ops_reported"] = lag
        ev.figures["follow_replica_ops_missing"] = missing
        checks = run_all(ev)
        return checks, {"faults": faults, "figures": ev.figures}, chaos

    def verify(self, what: str) -> replica.VerifyResult:
        """replica.verify of the follow replica against the current leader (it waits for the
        follow reader to catch up; not long when the reader died)."""
        t0 = time.monotonic()
        alive = self.cluster.follower is not None and self.cluster.follower.alive()
        result = replica.verify(self.cluster.leader.dsn, self.cluster.follow.dsn,
                                timeout=60 if alive else 5)
        self.say(f"verify of the follow replica against {what}: identical={result.identical} "
                 f"at op seq {result.op_seq} ({time.monotonic() - t0:.1f}s)")
        self.verified.append((what, result))
        return result

    def follow_lag(self) -> tuple[int | None, int]:
        """The follow replica's lag in ops as the leader's replica status reports it, once it
        settles (up to 15 s; None when the leader does not list it), and how many of the
        leader's ops the replica really lacks. The status must come to 0 when nothing is
        missing (or the leader never prunes for it), and never say less than is missing."""
        seqs = "SELECT seq FROM pgqueue.op_log"
        missing = len({r[0] for r in rows(self.cluster.leader.dsn, seqs)}
                      - {r[0] for r in rows(self.cluster.follow.dsn, seqs)})
        deadline = time.monotonic() + 15
        while True:
            found = {r["name"]: r for r in replica.status(self.cluster.leader.dsn, wait=1.0)}
            lag = int(found["follow"]["lag_ops"]) if "follow" in found else None
            if lag == missing or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        if lag is None or lag < missing:
            self.verified.append(("the leader's replica status", replica.VerifyResult(
                False, 0, [f"the follow replica lacks {missing} of the leader's ops, but the "
                           f"leader reports it {lag} op(s) behind ({found.get('follow')})"])))
        elif missing == 0 and lag != 0:
            self.verified.append(("the leader's replica status", replica.VerifyResult(
                False, 0, [f"the follow replica holds every op, but the leader reports it "
                           f"{lag} op(s) behind ({found.get('follow')})"])))
        return lag, missing

    def drain(self, chaos: Chaos) -> None:
        """Let the workers finish every job that is not in a terminal set."""
        deadline = time.monotonic() + DRAIN_SECONDS
        left, zero = -1, 0
        while time.monotonic() < deadline:
            chaos.reap()
            left = int(one(self.cluster.leader.dsn, "SELECT count(*) FROM pgqueue.job WHERE "
                                                    "state IN ('pending', 'scheduled', 'leased')"))
            zero = zero + 1 if left == 0 else 0
            if zero >= 3:
                break
            time.sleep(0.5)
        self.say(f"drained: {left} job(s) left unfinished")

    def evidence(self, faults: list[dict[str, Any]], schedules_stopped: int,
                 chaos: Chaos) -> Evidence:
        leader = self.cluster.leader.dsn
        ledger, bad = read_jsonl(self.ledger.glob("worker-*.jsonl"))
        produced, bad_p = read_jsonl(self.ledger.glob("producer-*.jsonl"))
        old = self.cluster.old_leader.dsn
        unexpected = [*self.unexpected, *self.cluster.unexpected,
                      *(f"{n} (pid {pid}) exited by itself with code {code}"
                        for n, pid, code in chaos.unexpected_exits)]
        ev = Evidence(
            ops=load_ops(leader),
            old_leader_ops=[(int(r[0]), r[1], r[2], r[3]) for r in rows(
                old, "SELECT seq, op, job_id, lease_id FROM pgqueue.op_log ORDER BY seq")]
            if old != leader else [],
            final_jobs={int(r[0]): r[1] for r in rows(leader, "SELECT id, state FROM pgqueue.job")},
            dead={int(r[0]) for r in rows(leader, "SELECT id FROM pgqueue.dead_letter")},
            ledger=ledger, produced=produced, faults=faults,
            schedules_stopped_ms=schedules_stopped,
            replica_identical=all(v.identical for _w, v in self.verified),
            replica_differences=[f"against {w}: {line}" for w, v in self.verified
                                 for line in v.differences], unexpected_exits=unexpected)
        ev.figures.update({"ledger_lines_unparsable": bad + bad_p,
                           "handler_records": len(ledger), "worker_processes": chaos.started,
                           "tracebacks_in_logs": self.tracebacks()})
        return ev

    def dump_op_logs(self) -> None:
        """Each database's op log as text next to the logs (kept when a check fails): seq, op,
        job, lease, the writing transaction's xid, `at`, and the local transaction that stored
        the row (on a replica: the order ops were ingested in)."""
        for node in self.cluster.nodes:
            try:
                found = rows(node.dsn, "SELECT seq, op, job_id, lease_id, xid::text, at, "
                                       "xmin::text FROM pgqueue.op_log ORDER BY seq")
            except pgqueue.PgQueueError as exc:
                self.say(f"cannot read the op log of {node.name}: {exc}")
                continue
            with open(self.logs / f"oplog-{node.name}.tsv", "w") as fh:
                fh.write("seq\top\tjob\tlease\txid\tat\tlocal_xmin\n")
                for r in found:
                    fh.write("\t".join("" if v is None else str(v) for v in r) + "\n")

    def tracebacks(self) -> dict[str, int]:
        """Tracebacks logged by the child processes, by process name (often a finding)."""
        found: dict[str, int] = {}
        for path in sorted(self.logs.glob("*.log")):
            n = path.read_text(errors="replace").count("Traceback (most recent call last)")
            if n:
                found[path.stem] = n
        return found


def report(console: Console, checks: list[Check], result: dict[str, Any]) -> None:
    faults = result["faults"]
    by_kind = Counter(f["kind"] for f in faults)
    t = Table(title="faults injected")
    for col in ("fault", "count", "failed to inject", "example"):
        t.add_column(col)
    for kind in KINDS:
        mine = [f for f in faults if f["kind"] == kind]
        t.add_row(kind, str(by_kind[kind]), str(sum(not f["ok"] for f in mine)),
                  mine[0]["detail"] if mine else "-")
    console.print(t)
    t = Table(title="checks")
    for col in ("check", "result", "violations"):
        t.add_column(col)
    for c in checks:
        t.add_row(c.name, "[green]passed" if c.passed else "[red]FAILED", str(c.count))
    console.print(t)
    t = Table(title="figures")
    t.add_column("figure")
    t.add_column("value", justify="right")
    for key, value in result["figures"].items():
        t.add_row(key, json.dumps(value) if isinstance(value, dict) else str(value))
    console.print(t)
    for c in checks:
        for line in c.violations:
            console.print(f"[red]VIOLATION[/red] {c.name}: {line}", highlight=False, markup=True)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    console = Console(highlight=False, width=150)
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)  # the producers' reconnects
    root = Path(tempfile.mkdtemp(prefix="pgqueue-soak-"))
    soak = Soak(args, root, console)
    code = 2
    out: dict[str, Any] = {"seed": args.seed, "duration": args.duration, "passed": False}
    try:
        started = time.monotonic()
        checks, result, _chaos = soak.run()
        report(console, checks, result)
        passed = all(c.passed for c in checks) and all(f["ok"] for f in result["faults"])
        code = 0 if passed else 1
        out.update({
            "passed": passed, "seconds": round(time.monotonic() - started, 1),
            "faults": dict(Counter(f["kind"] for f in result["faults"] if f["ok"])),
            "faults_failed": [f for f in result["faults"] if not f["ok"]],
            "fault_log": [{k: f[k] for k in ("kind", "at", "detail", "ok")}
                          for f in result["faults"]],
            "checks": [{"name": c.name, "passed": c.passed, "count": c.count,
                        "violations": c.violations} for c in checks],
            "figures": result["figures"]})
    except Exception:
        console.print(f"[red]the soak could not run:[/red]\n{traceback.format_exc()}",
                      highlight=False)
        out["error"] = traceback.format_exc()
    finally:
        soak.procs.kill_all()
        soak.cluster.destroy()
        if args.json is not None:
            args.json.write_text(json.dumps(out, indent=2, default=str))
        if code == 0 and not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            console.print(f"logs and ledgers kept in {root}")
    console.print("[green]soak passed" if code == 0 else f"[red]soak failed (exit {code})")
    return code


if __name__ == "__main__":
    sys.exit(main())
