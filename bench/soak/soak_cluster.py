"""The chaos soak's servers and processes: three embedded Postgres servers (the leader, a
logical replica, a follow replica), the follow reader, worker and scheduler processes.

Every child process runs in its own session (process group), so a kill reaches everything it
started; `Procs.kill_all` and `Cluster.destroy` run from the soak's `finally`.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from psycopg.conninfo import make_conninfo

import pgqueue
from pgqueue.db import connection, queries
from pgqueue.db.embedded import EmbeddedServer
from pgqueue.replicas import replica

REPO = Path(__file__).resolve().parents[2]
PROCS = str(REPO / "bench" / "soak" / "soak_procs.py")
DATABASE = "soak"
STREAM = "soak"
#: Durability as in production (fsync on, synchronous commit): an immediate shutdown is a
#: crash, and a commit a client saw must survive it.
SETTINGS = {"wal_sender_timeout": "'10s'", "wal_receiver_timeout": "'10s'",
            "wal_retrieve_retry_interval": "'500ms'"}


def one(dsn: str, sql: str, params: tuple[Any, ...] = ()) -> Any:
    """The first column of the first row of an ad-hoc query."""
    with connection.connect(dsn, connect_timeout=5) as conn:
        row = conn.execute(sql.encode(), params).fetchone()
    return None if row is None else row[0]


def rows(dsn: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with connection.connect(dsn, connect_timeout=5) as conn:
        return list(conn.execute(sql.encode(), params).fetchall())


@dataclass
class Node:
    """One embedded server and its queue database."""

    name: str
    server: EmbeddedServer
    dsn: str = ""

    def start(self) -> None:
        self.server.start()
        if not self.dsn:
            with connection.connect(self.server.dsn()) as conn:
                queries.create_database(conn, DATABASE, if_missing=True)
            self.dsn = make_conninfo(self.server.dsn(DATABASE), connect_timeout="5")

    def restart(self, mode: str, down: float) -> float:
        """Stop in `mode`, stay down `down` seconds, start; returns the seconds it was away."""
        t0 = time.monotonic()
        self.server.stop(mode)
        time.sleep(down)
        self.server.start()
        return time.monotonic() - t0


@dataclass
class Proc:
    """A child process in its own process group, with its log file."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    stopped: bool = False

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, sig)


@dataclass
class Procs:
    """Every child process the soak started."""

    log_dir: Path
    env: dict[str, str]
    all: list[Proc] = field(default_factory=list)

    def spawn(self, name: str, argv: list[str]) -> Proc:
        path = self.log_dir / f"{name}.log"
        with open(path, "ab") as log:
            popen = subprocess.Popen(argv, cwd=REPO, env=self.env, stdin=subprocess.DEVNULL,
                                     stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        proc = Proc(name, popen, path)
        self.all.append(proc)
        return proc

    def terminate(self, proc: Proc, timeout: float = 20.0) -> int | None:
        """SIGTERM (after SIGCONT, should it be stopped), then SIGKILL after `timeout`."""
        proc.signal(signal.SIGCONT)
        proc.signal(signal.SIGTERM)
        try:
            return proc.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.signal(signal.SIGKILL)
            return proc.popen.wait(10)

    def kill(self, proc: Proc) -> None:
        proc.signal(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.popen.wait(10)

    def kill_all(self) -> None:
        for proc in self.all:
            if proc.alive():
                proc.signal(signal.SIGCONT)
                proc.signal(signal.SIGKILL)
        for proc in self.all:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(10)


class Cluster:
    """The leader, the logical replica, the follow replica and the follow reader."""

    def __init__(self, root: Path, procs: Procs) -> None:
        self.root = root
        self.procs = procs
        self.nodes = [Node(name, EmbeddedServer(root / f"pg-{name}", settings=SETTINGS))
                      for name in ("leader", "logical", "follow")]
        self.old_leader, self.logical, self.follow = self.nodes
        self.leader = self.old_leader
        self.follower: Proc | None = None
        self.followers = 0
        #: Processes that died by themselves, one line each.
        self.unexpected: list[str] = []

    @property
    def client_dsns(self) -> list[str]:
        """What workers, producers and schedulers are given: [leader, logical replica]."""
        return [self.old_leader.dsn, self.logical.dsn]

    def start(self) -> None:
        with ThreadPoolExecutor(3) as pool:
            list(pool.map(Node.start, self.nodes))
        pgqueue.migrate(self.old_leader.dsn)

    def attach_replicas(self) -> None:
        replica.attach(self.old_leader.dsn, self.logical.dsn, "logical")
        self.start_follower()

    def start_follower(self) -> None:
        """`pgqueue replica follow` from the current leader into the follow replica."""
        if self.follower is not None:
            self.stop_follower()
        self.followers += 1
        self.follower = self.procs.spawn(f"follower-{self.followers}", [
            sys.executable, "-m", "pgqueue", "replica", "follow", "--leader", self.leader.dsn,
            "--replica", self.follow.dsn, "--name", "follow", "--poll-interval", "0.1"])

    def stop_follower(self) -> None:
        if self.follower is None:
            return
        if not self.follower.alive():
            self.unexpected.append(f"{self.follower.name} (pid {self.follower.pid}) exited by "
                                   f"itself with code {self.follower.popen.returncode}")
        else:
            code = self.procs.terminate(self.follower)
            if code != 0:
                self.unexpected.append(f"{self.follower.name} exited with code {code} on SIGTERM")
        self.follower = None

    def promote_logical(self, *, repoint: bool = True) -> replica.PromoteResult:
        """Fail over: promote the logical replica with the old leader reachable, then (with
        `repoint`) point the follow reader at the new leader, as an operator would."""
        result = replica.promote(self.logical.dsn, old_leader_dsn=self.old_leader.dsn,
                                 timeout=60)
        self.leader = self.logical
        if repoint:
            self.start_follower()
        return result

    def client_backends(self) -> list[int]:
        """Client backends of the leader's queue database (not walsenders, not this one)."""
        return [int(r[0]) for r in rows(self.leader.dsn, """
            SELECT pid FROM pg_stat_activity
            WHERE datname = current_database() AND pid <> pg_backend_pid()
              AND backend_type = 'client backend' ORDER BY pid""")]

    def terminate_backends(self, pids: list[int]) -> int:
        with connection.connect(self.leader.dsn, connect_timeout=5) as conn:
            done = 0
            for pid in pids:
                row = conn.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()
                done += bool(row and row[0])
        return done

    def destroy(self) -> None:
        for node in self.nodes:
            with contextlib.suppress(Exception):
                node.server.stop("immediate")
        for node in self.nodes:
            shutil.rmtree(node.server.root, ignore_errors=True)
