"""Servers, databases, followers and a concurrent workload for the replica tests.

Logical replication needs the replica in another cluster than the leader (CREATE SUBSCRIPTION
to a database of the same cluster hangs), so these fixtures start extra embedded servers, also
when PGQUEUE_TEST_DSN is set. The leader databases live on the session bed's server when it
runs with wal_level=logical (the embedded one does), else on an extra embedded server.

Imported by tests/integration/replicas/test_replica.py and tests/acceptance/test_cli_replica.py.
"""
from __future__ import annotations

import datetime as dt
import itertools
import os
import random
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from psycopg import sql as pg_sql
from psycopg.conninfo import make_conninfo

import pgqueue
from pgqueue.client import schedule
from pgqueue.db import connection, queries
from pgqueue.db.embedded import EmbeddedServer
from pgqueue.errors import DedupConflict, InvalidState, JobNotFound, LeaseLost
from pgqueue.replicas import replica
from tests.pgbed import Bed

T = TypeVar("T")
UTC = dt.timezone.utc

#: Extra servers are test servers: durability is not what these tests measure.
SERVER_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}

_names = itertools.count(1)




def one(dsn: str, sql: str, params: Sequence[Any] | None = None) -> Any:
    """The first column of the first row of an ad-hoc query (tests only)."""
    with connection.connect(dsn) as conn:
        row = conn.execute(sql.encode(), params).fetchone()
    return None if row is None else row[0]


def rows(dsn: str, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
    """Every row of an ad-hoc query (tests only)."""
    with connection.connect(dsn) as conn:
        return list(conn.execute(sql.encode(), params).fetchall())


def op_count(dsn: str) -> int:
    return int(one(dsn, "SELECT count(*) FROM pgqueue.op_log"))


def db_name(dsn: str) -> str:
    return str(connection.conninfo_to_dict(dsn)["dbname"])


#: The queue state tables (the op log is compared separately: the leader may prune its own).
STATE_TABLES = (
    ("pgqueue.job", "id"),
    ("pgqueue.dead_letter", "id"),
    ("pgqueue.stream_config", "stream"),
    ("pgqueue.kind_config", "stream, kind"),
    ("pgqueue.step_set", "hash"),
    ("pgqueue.schedule", "stream, name"),
)


def state_rows(dsn: str, tables: Sequence[tuple[str, str]] = STATE_TABLES) -> dict[str, list[str]]:
    """Every row of the queue state tables as text, in key order (an independent check of
    replica.verify, which uses the same idea in SQL); a row longer than 10,000 characters as
    its md5 (a 64 MiB payload is 128 MiB of text to fetch twice per comparison)."""
    out: dict[str, list[str]] = {}
    with connection.connect(dsn) as conn:
        for table, key in tables:
            cur = conn.execute(  # each row's text made once (a subquery), then cut
                f"SELECT CASE WHEN length(r) > 10000 THEN 'md5 ' || md5(r) ELSE r END "
                f"FROM (SELECT t::text AS r FROM {table} t ORDER BY {key}) rows".encode())
            out[table] = [r[0] for r in cur.fetchall()]
    return out


def state_differences(leader: str, replica_dsn: str) -> list[str]:
    """Tables whose rows differ between two databases (empty when the queue state is equal)."""
    a, b = state_rows(leader), state_rows(replica_dsn)
    found = []
    for table in a:
        if a[table] != b[table]:
            only_a = sorted(set(a[table]) - set(b[table]))[:3]
            only_b = sorted(set(b[table]) - set(a[table]))[:3]
            found.append(f"{table}: leader {len(a[table])} rows, replica {len(b[table])}; "
                         f"only on the leader {only_a}, only on the replica {only_b}")
    return found


# -- servers --------------------------------------------------------------------------------------


class Server:
    """An embedded Postgres server that hands out fresh (empty) databases."""

    def __init__(self, settings: dict[str, str] | None = None) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="pgqueue-replica-"))
        self.server = EmbeddedServer(self.root, settings={**SERVER_SETTINGS, **(settings or {})})
        self.dsn = ""
        self.databases: list[str] = []

    def start(self) -> Server:
        self.dsn = self.server.start()
        return self

    def stop(self, mode: str = "fast") -> None:
        self.server.stop(mode)

    def destroy(self) -> None:
        self.server.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def new_database(self, *, migrated: bool = False) -> str:
        name = f"pgqueue_r{os.getpid()}_{next(_names)}"
        with connection.connect(self.dsn) as conn:
            queries.drop_database(conn, name)
            queries.create_database(conn, name)
        self.databases.append(name)
        dsn = make_conninfo(self.dsn, dbname=name)
        if migrated:
            pgqueue.migrate(dsn)
        return dsn

    def drop_database(self, dsn: str) -> None:
        """Drop a database, its subscriptions first (without reaching their publisher)."""
        if not self.server.is_running():
            self.server.start()
        drop_subscriptions(dsn)
        with connection.connect(self.dsn) as conn:
            queries.drop_database(conn, db_name(dsn))


def drop_subscriptions(dsn: str) -> None:
    """Detach and drop every subscription of a database (its slot stays on the publisher)."""
    try:
        subs = [r[0] for r in rows(dsn, "SELECT subname FROM pg_subscription WHERE subdbid = "
                                        "(SELECT oid FROM pg_database WHERE datname = current_database())")]
    except pgqueue.ConnectionFailed:
        return
    with connection.connect(dsn) as conn:
        for sub in subs:
            ident = pg_sql.Identifier(sub)
            conn.execute(pg_sql.SQL("ALTER SUBSCRIPTION {} DISABLE").format(ident))
            conn.execute(pg_sql.SQL("ALTER SUBSCRIPTION {} SET (slot_name = NONE)").format(ident))
            conn.execute(pg_sql.SQL("DROP SUBSCRIPTION {}").format(ident))


def drop_slots(leader_dsn: str) -> None:
    """Drop the logical slots of the leader's database (DROP DATABASE refuses while any exists)."""
    deadline = time.monotonic() + 30
    while True:
        found = rows(leader_dsn, "SELECT slot_name, active_pid FROM pg_replication_slots "
                                 "WHERE database = current_database()")
        if not found:
            return
        with connection.connect(leader_dsn) as conn:
            for slot, pid in found:
                if pid is not None:
                    conn.execute("SELECT pg_terminate_backend(%s)", [pid])
                else:
                    conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                                 "WHERE slot_name = %s AND NOT active", [slot])
        if time.monotonic() > deadline:
            raise RuntimeError(f"could not drop the replication slots {found}")
        time.sleep(0.1)


def start_servers(n: int, settings: dict[str, str] | None = None) -> list[Server]:
    """Start n servers at once (initdb and start dominate; they run in parallel)."""
    servers = [Server(settings) for _ in range(n)]
    with ThreadPoolExecutor(n) as pool:
        list(pool.map(Server.start, servers))
    return servers


class LeaderHost:
    """Where leader databases come from: the bed's server when it has wal_level=logical,
    else an extra embedded server of our own."""

    def __init__(self, bed: Bed) -> None:
        self.bed = bed
        self.own: Server | None = None
        with connection.connect(bed.server_dsn) as conn:
            level = queries.scalar(conn, "wal_level")
        if level != "logical":
            self.own = Server().start()

    def new_database(self) -> str:
        if self.own is not None:
            return self.own.new_database(migrated=True)
        return self.bed.new_database()

    def drop(self, dsn: str) -> None:
        drop_slots(dsn)
        if self.own is not None:
            self.own.drop_database(dsn)
        else:
            self.bed.drop(dsn)

    def close(self) -> None:
        if self.own is not None:
            self.own.destroy()


# -- followers in threads ------------------------------------------------------------------------


class FollowerThread:
    """replica.Follower.run() in a daemon thread; an exception it raises fails stop()."""

    def __init__(self, leader: str, replica_dsn: str, name: str, *,
                 poll_interval: float = 0.05) -> None:
        self.follower = replica.Follower(leader, replica_dsn, name, poll_interval=poll_interval)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=f"follower-{name}", daemon=True)

    def _run(self) -> None:
        try:
            self.follower.run()
        except BaseException as exc:
            self.error = exc

    def start(self) -> FollowerThread:
        self.thread.start()
        return self

    def stop(self, *, check: bool = True) -> None:
        self.follower.stop()
        self.thread.join(30)
        assert not self.thread.is_alive(), "the follower thread did not stop"
        if check and self.error is not None:
            raise AssertionError(f"the follower failed: {self.error!r}") from self.error


# -- one leader and its replicas, per test ---------------------------------------------------------


class Cluster:
    """A fresh leader database and replica databases on the extra servers; everything it
    created is torn down after the test (followers, subscriptions, slots, databases)."""

    def __init__(self, host: LeaderHost, servers: Sequence[Server]) -> None:
        self.host = host
        self.servers = list(servers)
        self.leader = host.new_database()
        self.replicas: list[tuple[Server, str]] = []
        self.followers: list[FollowerThread] = []

    def replica_db(self, server: int = 0, *, migrated: bool = False) -> str:
        """A fresh empty database on extra server `server`."""
        s = self.servers[server]
        dsn = s.new_database(migrated=migrated)
        self.replicas.append((s, dsn))
        return dsn

    def follow(self, replica_dsn: str, name: str, *, poll_interval: float = 0.05) -> FollowerThread:
        ft = FollowerThread(self.leader, replica_dsn, name, poll_interval=poll_interval).start()
        self.followers.append(ft)
        return ft

    def close(self) -> None:
        """Tear everything down; then fail if a follower thread died of an exception."""
        for ft in self.followers:
            ft.stop(check=False)
        for server, dsn in self.replicas:
            server.drop_database(dsn)
        self.host.drop(self.leader)
        failed = [ft for ft in self.followers if ft.error is not None]
        if failed:
            raise AssertionError(f"follower {failed[0].follower.name} failed: "
                                 f"{failed[0].error!r}") from failed[0].error


@pytest.fixture(scope="session")
def replica_servers() -> Iterator[list[Server]]:
    """Two extra servers for replica databases."""
    servers = start_servers(2)
    yield servers
    for s in servers:
        s.destroy()


@pytest.fixture(scope="session")
def leader_host(bed: Bed) -> Iterator[LeaderHost]:
    host = LeaderHost(bed)
    yield host
    host.close()


@pytest.fixture
def cluster(leader_host: LeaderHost, replica_servers: list[Server]) -> Iterator[Cluster]:
    c = Cluster(leader_host, replica_servers)
    try:
        yield c
    finally:
        c.close()


# -- a random concurrent workload ----------------------------------------------------------------


STREAMS = ("alpha", "beta")
DEDUP_KEYS: tuple[str | bytes | None, ...] = (None, None, None, "k1", "k2", b"k3", "k4")
CHECKPOINT_STEPS = ("fetch", "parse", "store")


@dataclass
class Workload:
    """Writer threads, each with its own Queue, doing random transitions against the leader:
    enqueue (dedup keys, priorities, delays), lease (some with very short visibility timeouts),
    renew with checkpoints, ack, nack, return, cancel (of leased jobs too), release, reclaim,
    requeue dead letters, configure streams and kinds' limits, and cron schedules (upsert, tick
    with a clock that moves ahead)."""

    dsn: str | Sequence[str]
    threads: int = 4
    seed: int = 0
    errors: list[BaseException] = field(default_factory=list)
    calls: dict[str, int] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _workers: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _ticks: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _base: dt.datetime = field(default_factory=lambda: dt.datetime.now(UTC).replace(second=0, microsecond=0))

    def start(self) -> Workload:
        for i in range(self.threads):
            t = threading.Thread(target=self._run, args=(i,), name=f"writer-{i}", daemon=True)
            t.start()
            self._workers.append(t)
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._workers:
            t.join(60)
        assert not any(t.is_alive() for t in self._workers), "a writer did not stop"
        if self.errors:
            raise AssertionError(f"a writer failed: {self.errors[0]!r}") from self.errors[0]

    def run_until(self, leader: str, ops: int, timeout: float = 120.0) -> int:
        """Wait until the leader's op log holds `ops` ops; returns the count."""
        deadline = time.monotonic() + timeout
        while True:
            if self.errors:
                self.stop()
            n = op_count(leader)
            if n >= ops:
                return n
            if time.monotonic() > deadline:
                pytest.fail(f"the workload made only {n} of {ops} ops in {timeout:.0f}s")
            time.sleep(0.2)

    def _count(self, what: str) -> None:
        with self._lock:
            self.calls[what] = self.calls.get(what, 0) + 1

    def _run(self, index: int) -> None:
        rng = random.Random(self.seed * 1000 + index)
        stream = STREAMS[index % len(STREAMS)]
        held: list[pgqueue.Lease] = []
        try:
            with pgqueue.Queue(self.dsn, stream=stream, pool_size=2) as q:
                while not self._stop.is_set():
                    self._step(q, rng, held)
        except BaseException as exc:
            self.errors.append(exc)

    def _step(self, q: pgqueue.Queue, rng: random.Random, held: list[pgqueue.Lease]) -> None:
        r = rng.random()
        try:
            if r < 0.22:
                self._count("enqueue")
                q.enqueue_many([pgqueue.NewJob(
                    rng.randbytes(rng.randint(0, 24)), kind=rng.choice([None, "a", "b"]),
                    priority=rng.randint(0, 9),
                    delay=rng.choice([None, None, None, 0.05, 0.3]),
                    dedup_key=rng.choice(DEDUP_KEYS), max_attempts=rng.randint(1, 3),
                    timeout=rng.choice([None, None, 0.5, 60.0]))
                    for _ in range(rng.randint(1, 12))])
            elif r < 0.42:
                self._count("lease")
                vt = rng.choice([0.05, 0.2, 30.0, 30.0])
                held.extend(q.lease(rng.randint(1, 8), visibility_timeout=vt))
            elif r < 0.80 and held:
                lease = held.pop(rng.randrange(len(held)))
                s = rng.random()
                if s < 0.25:
                    self._count("renew")
                    step = rng.randrange(len(CHECKPOINT_STEPS))
                    q.renew(lease, checkpoint=pgqueue.Checkpoint(
                        last_completed_step=CHECKPOINT_STEPS[step - 1] if step else None,
                        cursor_step=CHECKPOINT_STEPS[step], cursor=rng.randbytes(8),
                        schema_version=rng.choice([None, 1, 2])))
                    held.append(lease)
                elif s < 0.60:
                    self._count("ack")
                    batch = [lease] + [held.pop() for _ in range(min(len(held), rng.randint(0, 4)))]
                    q.ack_many(batch)
                elif s < 0.85:
                    self._count("nack")
                    error: str | BaseException = f"boom {rng.randint(0, 99)}"
                    if rng.random() < 0.5:  # an exception: its summary and traceback
                        try:
                            raise ValueError(f"boom {rng.randint(0, 99)}\nsecond line")
                        except ValueError as exc:
                            error = exc
                    q.nack(lease, error=error, retry_in=rng.choice([None, 0.0, 0.02, 0.2]))
                elif s < 0.92:
                    self._count("return")
                    q.return_lease(lease)
                # else: abandoned; its lease expires and a reclaim returns it
            elif r < 0.88:
                self._count("reclaim")
                q.reclaim_expired()
            elif r < 0.93:
                dead = q.dead_letters(limit=5)
                if dead:
                    self._count("requeue")
                    q.requeue_dead_letter(rng.choice(dead).job_id)
            elif r < 0.94:
                self._count("cancel")
                # a leased one is asked to stop: its holder's next nack, return or reclaim
                # ends it as cancelled, or its ack comes too late
                pending = q.jobs(state=rng.choice(["pending", "dead", "leased", "leased"]),
                                 limit=5)
                if pending:
                    q.cancel(rng.choice(pending).job_id)
            elif r < 0.95:
                self._count("release")
                parked = q.jobs(state="quarantined", limit=5)
                if parked:
                    q.release(rng.choice(parked).job_id, reset_crashes=rng.random() < 0.5)
            elif r < 0.975:
                self._count("schedule")
                with q.connection() as conn:
                    if rng.random() < 0.3:
                        schedule.upsert(conn, q.stream, f"cron{rng.randint(0, 2)}", "* * * * *",
                                        rng.randbytes(4), priority=rng.randint(0, 9),
                                        catch_up=rng.choice(["one", "all"]),
                                        now=self._base + dt.timedelta(minutes=next(self._ticks)))
                    else:
                        schedule.tick(conn, now=self._base + dt.timedelta(minutes=next(self._ticks)))
            elif r < 0.99:
                self._count("configure")
                q.configure_stream(retry_base=rng.choice([0.0, 0.01, 0.05]),
                                   retry_cap=rng.choice([0.1, 1.0]),
                                   quarantine_after=rng.randint(1, 5))
            else:  # a kind's limits: set, changed and cleared (ConfigureKind ops)
                self._count("configure kind")
                q.configure_kind(rng.choice(["a", "b"]),
                                 max_concurrency=rng.choice([None, 2, 8]),
                                 rate_limit=rng.choice([None, (200, 0.5)]),
                                 quarantine_after=rng.choice([None, 2]))
        except (LeaseLost, JobNotFound, InvalidState, DedupConflict):
            pass
