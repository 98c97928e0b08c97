"""The chaos soak's fault plan and its injection.

The plan is drawn from `random.Random(seed)` before anything runs and is bounded: a fixed
number of faults of each kind at seeded times across the run. Kinds:

- kill_worker: SIGKILL a worker process holding leases (its process group) and start a new
  one;
- stop_worker: SIGSTOP a worker holding leases for longer than the visibility timeout, then
  SIGCONT it (its leases are reclaimed meanwhile; its late writes must be refused);
- terminate_backends: pg_terminate_backend on some client backends of the leader's queue
  database (never the walsenders of logical replication);
- restart_leader_immediate / restart_leader_fast: stop the current leader's server in that
  mode (immediate: crash recovery on start), keep it down a moment, start it;
- restart_replica: stop and start a replica's server (the logical one before the failover,
  the follow one after it);
- failover: promote the logical replica with the old leader reachable; the follow replica's
  server is down across it (stopped before, started after), and the follow reader is pointed
  at the new leader.
"""
from __future__ import annotations

import heapq
import random
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.soak.soak_cluster import PROCS, STREAM, Cluster, Proc, Procs, rows

KINDS = ("kill_worker", "stop_worker", "terminate_backends", "restart_leader_immediate",
         "restart_leader_fast", "restart_replica", "failover")


#: Worker processes that may die by themselves before the soak gives up (a crash loop).
MAX_UNEXPECTED_EXITS = 8


@dataclass(order=True)
class Event:
    at: float
    kind: str = field(compare=False)
    arg: Any = field(compare=False, default=None)


def plan(rng: random.Random, duration: float) -> list[Event]:
    """The seeded fault schedule for a run of `duration` seconds (seconds from its start)."""
    d = duration
    events = [
        Event(d * rng.uniform(0.22, 0.30), "restart_leader_immediate"),
        Event(d * rng.uniform(0.38, 0.45), "restart_replica", "logical"),
        Event(d * rng.uniform(0.52, 0.58), "failover"),
        Event(d * rng.uniform(0.70, 0.76), "restart_leader_fast"),
        Event(d * rng.uniform(0.80, 0.86), "restart_replica", "follow"),
    ]
    events += [Event(d * rng.uniform(0.05, 0.90), "kill_worker")
               for _ in range(max(2, round(d / 20)))]
    events += [Event(d * rng.uniform(0.10, 0.80), "stop_worker")
               for _ in range(max(1, round(d / 45)))]
    events += [Event(d * rng.uniform(0.05, 0.92), "terminate_backends")
               for _ in range(max(2, round(d / 25)))]
    return sorted(events)


@dataclass
class Fault:
    kind: str
    at: float
    detail: str
    ok: bool = True
    data: dict[str, Any] = field(default_factory=dict)


class Chaos:
    """Runs the plan against the cluster and the worker processes."""

    def __init__(self, rng: random.Random, cluster: Cluster, procs: Procs, workers: int,
                 visibility_timeout: float, say: Callable[[str], None]) -> None:
        self.rng = rng
        self.cluster = cluster
        self.procs = procs
        self.visibility_timeout = visibility_timeout
        self.say = say
        self.workers: list[Proc] = []
        self.faults: list[Fault] = []
        #: Worker processes that exited without being killed: (name, pid, exit code).
        self.unexpected_exits: list[tuple[str, int, int | None]] = []
        self.killed: set[int] = set()
        self.killed_at: dict[int, float] = {}
        self.started = 0
        self.t0 = time.monotonic()
        for _ in range(workers):
            self.start_worker()

    def now(self) -> float:
        return time.monotonic() - self.t0

    def start_worker(self) -> Proc:
        self.started += 1
        argv = [sys.executable, PROCS, "worker", "--stream", STREAM, "--node", str(self.started),
                "--visibility-timeout", str(self.visibility_timeout),
                "--renew-interval", str(self.visibility_timeout / 4)]
        for dsn in self.cluster.client_dsns:
            argv += ["--dsn", dsn]
        proc = self.procs.spawn(f"worker-{self.started}", argv)
        self.workers.append(proc)
        return proc

    def live_workers(self) -> list[Proc]:
        return [w for w in self.workers if w.alive() and not w.stopped]

    def reap(self) -> None:
        """A worker that exited although nobody killed it is recorded and replaced."""
        for w in list(self.workers):
            if not w.alive() and w.pid not in self.killed:
                self.killed.add(w.pid)
                self.unexpected_exits.append((w.name, w.pid, w.popen.returncode))
                self.say(f"[red]t={self.now():.1f}s {w.name} (pid {w.pid}) exited by itself "
                         f"with code {w.popen.returncode}; starting another")
                if len(self.unexpected_exits) > MAX_UNEXPECTED_EXITS:
                    raise RuntimeError(f"worker processes keep dying by themselves; the last one "
                                       f"logged to {w.log}")
                self.start_worker()

    def run(self, events: list[Event], until: float) -> None:
        """Inject the planned faults until `until` seconds after the start; follow-up
        events (a SIGCONT) are queued as they arise. Stopped workers are continued at the end."""
        queue = list(events)
        heapq.heapify(queue)
        while queue and queue[0].at < until:
            event = heapq.heappop(queue)
            while self.now() < event.at:
                time.sleep(min(0.5, max(0.0, event.at - self.now())))
                self.reap()
            try:
                follow_up = self.inject(event)
            except Exception as exc:
                self.faults.append(Fault(event.kind, self.now(), f"failed: {exc!r}", ok=False,
                                         data={"traceback": traceback.format_exc()[-2000:]}))
                self.say(f"[red]t={self.now():.1f}s {event.kind} failed: {exc!r}")
                continue
            if follow_up is not None:
                heapq.heappush(queue, follow_up)
        while self.now() < until:
            time.sleep(min(0.5, max(0.0, until - self.now())))
            self.reap()
        for w in self.workers:
            if w.stopped:
                self.inject(Event(self.now(), "continue_worker", w))

    def _log(self, fault: Fault) -> None:
        self.faults.append(fault)
        self.say(f"t={fault.at:.1f}s {fault.kind}: {fault.detail}")

    def _held(self) -> dict[int, list[int]]:
        """Lease ids held right now, by the pid of the worker holding them. Each worker
        process has its own node number, recorded on its leases (registry ids are per
        database, so they say nothing across a failover)."""
        pids = {int(w.name.rsplit("-", 1)[1]): w.pid for w in self.workers}
        found: dict[int, list[int]] = {}
        for node, lease_id in rows(self.cluster.leader.dsn, """
                SELECT worker_node, lease_id FROM pgqueue.job WHERE state = 'leased'"""):
            if node in pids:
                found.setdefault(pids[node], []).append(int(lease_id))
        return found

    def inject(self, event: Event) -> Event | None:
        kind, at = event.kind, self.now()
        if kind == "kill_worker":
            held = self._held()
            live = self.live_workers() or [self.start_worker()]
            victim = self.rng.choice([w for w in live if held.get(w.pid)] or live)
            leases = held.get(victim.pid, [])
            self.killed.add(victim.pid)
            self.killed_at[victim.pid] = time.time()
            self.procs.kill(victim)
            new = self.start_worker()
            self._log(Fault(kind, at, f"SIGKILL {victim.name} (pid {victim.pid}, {len(leases)} "
                                      f"lease(s) held); started {new.name}",
                            data={"pid": victim.pid, "leases": leases}))
        elif kind == "stop_worker":
            held = self._held()
            candidates = [w for w in self.live_workers() if held.get(w.pid)]
            victim = self.rng.choice(candidates or self.live_workers())
            leases = held.get(victim.pid, [])
            victim.signal(signal.SIGSTOP)
            victim.stopped = True
            pause = self.visibility_timeout + 2.5
            self._log(Fault(kind, at, f"SIGSTOP {victim.name} (pid {victim.pid}) holding "
                                      f"{len(leases)} lease(s), for {pause:.1f}s",
                            data={"pid": victim.pid, "log": str(victim.log), "leases": leases,
                                  "stopped_at": time.time()}))
            return Event(at + pause, "continue_worker", victim)
        elif kind == "continue_worker":
            victim = event.arg
            victim.signal(signal.SIGCONT)
            victim.stopped = False
            for f in self.faults:
                if f.kind == "stop_worker" and f.data.get("pid") == victim.pid:
                    f.data["continued_at"] = time.time()
            self.say(f"t={at:.1f}s SIGCONT {victim.name} (pid {victim.pid})")
        elif kind == "terminate_backends":
            pids = self.cluster.client_backends()
            chosen = self.rng.sample(pids, k=max(1, len(pids) // 2)) if pids else []
            n = self.cluster.terminate_backends(chosen)
            self._log(Fault(kind, at, f"terminated {n} of {len(pids)} client backends on "
                                      f"{self.cluster.leader.name}",
                            data={"terminated": n, "at_ms": int(time.time() * 1000)}))
        elif kind in ("restart_leader_immediate", "restart_leader_fast"):
            mode = kind.rsplit("_", 1)[1]
            node = self.cluster.leader
            wall = time.time()
            away = node.restart(mode, self.rng.uniform(0.5, 2.0))
            self._log(Fault(kind, at, f"{node.name} server stopped ({mode}) and started; "
                                      f"down {away:.1f}s",
                            data={"down": away, "window_ms": _window(wall)}))
        elif kind == "restart_replica":
            node = self.cluster.logical if event.arg == "logical" else self.cluster.follow
            away = node.restart("fast", self.rng.uniform(1.0, 3.0))
            self._log(Fault(kind, at, f"replica {node.name} server stopped and started; down "
                                      f"{away:.1f}s", data={"replica": node.name, "down": away}))
        elif kind == "failover":
            # The follow replica is down across the failover (a replica that was away when
            # the leader changed, and must follow the new one when it is back).
            follow = self.cluster.follow
            follow.server.stop("fast")
            t0, wall = time.monotonic(), time.time()
            result = self.cluster.promote_logical(repoint=False)
            took = time.monotonic() - t0
            time.sleep(self.rng.uniform(1.0, 2.0))
            follow.server.start()
            self.cluster.start_follower()  # from the new leader, once its replica is back
            self._log(Fault("restart_replica", at, f"replica {follow.name} server stopped before "
                                                   "the failover and started after it; down "
                                                   f"{time.monotonic() - t0:.1f}s",
                            data={"replica": follow.name, "down": time.monotonic() - t0}))
            self._log(Fault(kind, at, f"promoted {self.cluster.logical.name} in "
                                      f"{took:.1f}s (epoch {result.epoch}, old "
                                      f"leader reached: {result.old_leader_reached}, op seq "
                                      f"{result.applied_seq}); follower moved to it",
                            ok=result.old_leader_reached,
                            data={"epoch": result.epoch, "notes": result.notes,
                                  "applied_seq": result.applied_seq, "window_ms": _window(wall)}))
        else:
            raise ValueError(f"unknown fault {kind}")
        return None


def _window(start: float) -> list[int]:
    """[start, now] in epoch milliseconds: when the leader was away."""
    return [int(start * 1000), int(time.time() * 1000)]
