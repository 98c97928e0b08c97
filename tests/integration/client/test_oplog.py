"""The op log: replaying a database's log into another reproduces its state row for row.

The property test is a hypothesis state machine. Each example is a random workload over two
streams on a fresh leader database, driven through the stage functions on one connection:
enqueue (single and batched, random priorities, small delays, dedup keys from a small pool
so collisions happen, max_attempts 0-3), lease, renew with checkpoints, ack, nack, return a
lease, reclaim, requeue dead letters (some refused by a dedup conflict), release and cancel,
stream settings. Each call is checked against a small model of which leases are current
(fencing: a write with a lost lease must change nothing). Time is a virtual clock pinned
with `pgqueue.now` on that connection and Postgres' random() is seeded, so an example runs
the same way every time and hypothesis can shrink it. Along the way and at the end, the op
log is replayed with `pgqueue.replay` into a second fresh database, which must then hold the
same job, dead_letter, stream_config and op_log rows; a second full replay applies nothing.
"""
from __future__ import annotations

import base64
import datetime as dt
import re
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)
from psycopg.types.json import Jsonb

import pgqueue
from pgqueue.client import deadletter, enqueue, observe, operate, reclaim, settle
from pgqueue.client import lease as lease_stage
from pgqueue.db import connection
from pgqueue.db.queries import Conn
from tests.pgbed import Bed

STREAMS = ("alpha", "beta")
DEDUP_POOL = (None, b"k1", b"k2", "k3", b"")
#: How far ahead an "ahead" reclaim runs: past every lease a workload can hold.
RECLAIM_AHEAD = dt.timedelta(days=30)

#: The state tables and the log, each with the order that makes a row-for-row comparison.
TABLES = (
    ("pgqueue.job", "id"),
    ("pgqueue.dead_letter", "id"),
    ("pgqueue.stream_config", "stream"),
    ("pgqueue.op_log", "seq"),
)

#: The fields DESIGN.md §2 says every Enqueue op carries.
ENQUEUE_FIELDS = frozenset({
    "job_id", "payload", "enqueued_at_ms", "next_job_id", "priority", "not_before_ms",
    "dedup_key", "attempts", "max_attempts",
})

#: What Postgres's regular expressions call whitespace (\s): pgqueue.error_summary's.
SQL_SPACE = re.compile(r"[ \t\n\v\f\r]+")


# -------------------------------------------------------------------------------------------
# Comparing two databases
# -------------------------------------------------------------------------------------------

#: A database to read: its DSN (a connection is opened for the read), or an open autocommit
#: connection to it (the property test keeps one per database: a new backend plans its first
#: reads of the op log's 32 partitions from scratch, and it reads them hundreds of times).
Db = str | connection.Conn


@contextmanager
def reading(db: Db) -> Iterator[connection.Conn]:
    if isinstance(db, str):
        with connection.connect(db) as conn:
            yield conn
    else:
        yield db


def snapshot(db: Db) -> dict[str, tuple[list[str], list[tuple[Any, ...]]]]:
    """Every row of the state tables and the op log, in key order, with column names."""
    out: dict[str, tuple[list[str], list[tuple[Any, ...]]]] = {}
    with reading(db) as conn:
        for table, key in TABLES:
            cur = conn.execute(f"SELECT * FROM {table} ORDER BY {key}")
            names = [d.name for d in cur.description or []]
            out[table] = (names, cur.fetchall())
    return out


def differences(leader: Db, replica: Db) -> list[str]:
    """Each differing row and column between two databases (empty when identical)."""
    a, b = snapshot(leader), snapshot(replica)
    found: list[str] = []
    for table, _key in TABLES:
        names, rows_a = a[table]
        _, rows_b = b[table]
        by_key_a = {r[0]: r for r in rows_a}
        by_key_b = {r[0]: r for r in rows_b}
        for k in sorted(by_key_a.keys() - by_key_b.keys(), key=str):
            found.append(f"{table} {names[0]}={k}: only on the leader: {by_key_a[k]}")
        for k in sorted(by_key_b.keys() - by_key_a.keys(), key=str):
            found.append(f"{table} {names[0]}={k}: only on the replica: {by_key_b[k]}")
        for k in sorted(by_key_a.keys() & by_key_b.keys(), key=str):
            for col, va, vb in zip(names, by_key_a[k], by_key_b[k], strict=True):
                if va != vb:
                    found.append(f"{table} {names[0]}={k} column {col}: "
                                 f"leader={va!r} replica={vb!r}")
        if rows_a != rows_b and not found:  # same rows by key, yet not equal in order
            found.append(f"{table}: rows differ in order or multiplicity")
    return found


def assert_identical(leader: Db, replica: Db) -> None:
    diff = differences(leader, replica)
    assert not diff, "replica diverged from leader:\n" + "\n".join(diff[:40])


def op_count(db: Db) -> int:
    with reading(db) as conn:
        row = conn.execute("SELECT count(*) FROM pgqueue.op_log").fetchone()
    assert row is not None
    return int(row[0])


def replay_all(source: str, target: str, *, counted: Db | None = None) -> tuple[int, int]:
    """Replay until the whole log has been read; returns (ops read, ops newly applied).
    `counted`: where to count the source's ops (a connection to it kept by the caller).

    Replay takes only ops whose transaction is below its snapshot's xmin, and any transaction
    on the server (autoanalyze, say) can hold xmin back for a moment: then it reads a prefix,
    and the next call, which skips what the target already applied, reads the rest."""
    total = op_count(source if counted is None else counted)
    applied = 0
    for _ in range(50):
        result = pgqueue.replay(source, target)
        applied += result.applied
        assert result.read <= total
        if result.read == total:
            return result.read, applied
        time.sleep(0.1)
    raise AssertionError(f"replay never read the whole log ({total} ops)")


# -------------------------------------------------------------------------------------------
# Actions
# -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class JobSpec:
    payload: bytes | str
    kind: str | None
    priority: int
    delay: float | None
    dedup_key: bytes | str | None
    max_attempts: int
    timeout: float | None = None


@dataclass(frozen=True)
class Enqueue:
    stream: int
    jobs: tuple[JobSpec, ...]


@dataclass(frozen=True)
class LeaseJobs:
    stream: int
    limit: int
    visibility: float


@dataclass(frozen=True)
class Renew:
    pick: int
    stale: bool  # pick a lease that is no longer current: must change nothing
    visibility: float | None
    checkpoint: pgqueue.Checkpoint | None


@dataclass(frozen=True)
class Ack:
    picks: tuple[int, ...]  # live leases
    stale: int | None       # and maybe one that is no longer current


@dataclass(frozen=True)
class Nack:
    pick: int
    stale: bool
    retry_in: float | None
    error: str | ValueError | None


@dataclass(frozen=True)
class ReturnLease:
    pick: int
    stale: bool


@dataclass(frozen=True)
class Reclaim:
    ahead: bool  # at the virtual clock, or 30 days ahead of it (every lease expired)


@dataclass(frozen=True)
class Advance:
    seconds: float


@dataclass(frozen=True)
class Requeue:
    pick: int
    dead_only: bool  # False: pick among every id ever enqueued (JobNotFound for live ones)


@dataclass(frozen=True)
class Reoffer:
    """Enqueue a new job with a dead letter's stream and dedup key (so requeue conflicts)."""

    pick: int
    payload: bytes


@dataclass(frozen=True)
class CancelLeased:
    """An operator's cancel of a job a worker holds (asked once, then asked again)."""

    pick: int


@dataclass(frozen=True)
class Operate:
    """An operator's release (of a parked job) or cancel, on any job ever enqueued."""

    pick: int
    what: str     # "release" or "cancel"
    parked: bool  # pick among quarantined jobs when there are any


@dataclass(frozen=True)
class Configure:
    stream: int
    retry_base: float | None
    retry_cap: float | None
    quarantine_after: int | None


Action = (Enqueue | LeaseJobs | Renew | Ack | Nack | ReturnLease | Reclaim | Advance | Requeue
          | Reoffer | Operate | CancelLeased | Configure)

step_names = st.sampled_from([None, "fetch", "parse", "write", "ünïcode step"])
job_specs = st.builds(
    JobSpec,
    payload=st.one_of(st.binary(max_size=12), st.text(max_size=6)),
    kind=st.sampled_from([None, "email", "report"]),
    priority=st.sampled_from([0, 255, 7]) | st.integers(0, 255),
    delay=st.sampled_from([None, 0.0, 0.001, 0.25, 1.0, 3600.0]),
    dedup_key=st.sampled_from(DEDUP_POOL),
    max_attempts=st.sampled_from([1, 2, 0, 3]),
    timeout=st.sampled_from([None, None, 0.001, 2.5]),
)
checkpoints = st.builds(
    pgqueue.Checkpoint,
    last_completed_step=step_names,
    cursor_step=step_names,
    cursor=st.none() | st.just(b"") | st.binary(max_size=10),
    schema_version=st.integers(0, 3) | st.none(),
    step_set_hash=st.sampled_from([None, "h1", "h2"]),
)
texts = st.text(alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\x00"),
                max_size=12)
# what a summary is made of, spelt out in ASCII (whose whitespace Python and Postgres agree on)
summarised = st.text(alphabet=st.sampled_from("ab: \t\n\r"), max_size=12)
# a text as it is, or an exception: kept as its summary and traceback
errors = st.none() | texts | summarised | summarised.map(ValueError)
enqueues = st.builds(Enqueue, stream=st.integers(0, 1),
                     jobs=st.lists(job_specs, min_size=1, max_size=5).map(tuple))
leases = st.builds(LeaseJobs, stream=st.integers(0, 1), limit=st.integers(1, 4),
                   visibility=st.sampled_from([0.5, 30.0]))
picks = st.integers(0, 20)


def renews(stale: bool) -> st.SearchStrategy[Renew]:
    return st.builds(Renew, pick=picks, stale=st.just(stale),
                     visibility=st.sampled_from([None, 10.0]),
                     checkpoint=checkpoints | st.none())


def acks(stale: bool) -> st.SearchStrategy[Ack]:
    return st.builds(Ack, picks=st.lists(picks, min_size=0 if stale else 1, max_size=3).map(tuple),
                     stale=picks if stale else st.none())


def nacks(stale: bool) -> st.SearchStrategy[Nack]:
    return st.builds(Nack, pick=picks, stale=st.just(stale),
                     retry_in=st.sampled_from([0.0, None]), error=errors)


def returns(stale: bool) -> st.SearchStrategy[ReturnLease]:
    return st.builds(ReturnLease, pick=picks, stale=st.just(stale))


advances = st.builds(Advance, seconds=st.sampled_from([0.3, 0.6, 1.5, 5.0, 7200.0]))
requeues = st.builds(Requeue, pick=picks, dead_only=st.sampled_from([True, True, False]))
reoffers = st.builds(Reoffer, pick=picks, payload=st.binary(max_size=4))
cancels = st.builds(CancelLeased, pick=picks)
operations = st.builds(Operate, pick=picks, what=st.sampled_from(["release", "cancel"]),
                       parked=st.booleans())
configures = st.builds(Configure, stream=st.integers(0, 1),
                       retry_base=st.sampled_from([None, 0.0, 0.5, 2.0]),
                       retry_cap=st.sampled_from([None, 1.0, 60.0]),
                       quarantine_after=st.sampled_from([None, 1, 2, 3]))


# -------------------------------------------------------------------------------------------
# The workload: runs actions on one connection at a virtual time, checks each against a model
# -------------------------------------------------------------------------------------------

def pin(conn: Conn, at: dt.datetime) -> None:
    """pgqueue.now_ms() on this connection returns `at` until pinned again."""
    conn.execute("SELECT set_config('pgqueue.now', %s, false)", [at.isoformat()])


@dataclass
class Workload:
    conn: Conn
    clock: dt.datetime                                        # the virtual now, ms precision
    held: list[pgqueue.Lease] = field(default_factory=list)   # every lease ever handed out
    live: dict[int, dt.datetime] = field(default_factory=dict)  # current lease id -> expiry
    job_ids: list[int] = field(default_factory=list)          # every job id ever returned
    cancelling: set[int] = field(default_factory=set)         # leases whose cancel was asked
    seen: dict[str, int] = field(default_factory=dict)        # outcomes, for tuning

    @classmethod
    def start(cls, conn: Conn) -> Workload:
        conn.execute("SELECT setseed(0.25)")  # backoff jitter, the same on every run
        row = conn.execute("SELECT date_trunc('milliseconds', now())").fetchone()
        assert row is not None
        work = cls(conn=conn, clock=row[0])
        pin(conn, work.clock)
        return work

    def note(self, what: str) -> None:
        self.seen[what] = self.seen.get(what, 0) + 1
        if currently_in_test_context():
            event(what)

    # -- reading the leader ---------------------------------------------------------------

    def last_seq(self) -> int:
        row = self.conn.execute("SELECT coalesce(max(seq), 0) FROM pgqueue.op_log").fetchone()
        assert row is not None
        return int(row[0])

    def job_row(self, job_id: int) -> tuple[Any, ...] | None:
        row: tuple[Any, ...] | None = self.conn.execute(
            "SELECT * FROM pgqueue.jobs WHERE id = %s", [job_id]).fetchone()
        return row

    def job(self, job_id: int) -> pgqueue.JobInfo | None:
        return observe.job(self.conn, job_id)

    def live_holder(self, stream: str, key: bytes) -> int | None:
        row = self.conn.execute(
            "SELECT id FROM pgqueue.job WHERE stream = %s AND dedup_key = %s"
            " AND state IN ('pending', 'scheduled', 'leased')", [stream, key]).fetchone()
        return None if row is None else int(row[0])

    @contextmanager
    def unchanged(self, *job_ids: int) -> Iterator[None]:
        """The block must append no op and leave these jobs' rows as they were."""
        seq = self.last_seq()
        rows = [self.job_row(j) for j in job_ids]
        yield
        assert self.last_seq() == seq, "a refused write appended to the op log"
        assert [self.job_row(j) for j in job_ids] == rows, "a refused write changed a job"

    def pick(self, i: int, *, stale: bool) -> pgqueue.Lease | None:
        """A current lease (newest first), or one that is no longer current."""
        pool = [h for h in self.held if (h.lease_id in self.live) != stale]
        return pool[-1 - i % len(pool)] if pool else None

    # -- the actions ------------------------------------------------------------------------

    def run(self, action: Action) -> None:
        self.clock += dt.timedelta(milliseconds=1)  # every step at a later instant
        pin(self.conn, self.clock)
        handler = getattr(self, "do_" + type(action).__name__.lower())
        handler(action)

    def do_advance(self, a: Advance) -> None:
        self.clock += dt.timedelta(seconds=a.seconds)
        pin(self.conn, self.clock)

    def do_enqueue(self, a: Enqueue, stream: str | None = None) -> None:
        stream = stream or STREAMS[a.stream]
        # What dedup must return: the live holder, or the first job of the batch with the key.
        keyed: dict[bytes, int | None] = {}
        for spec in a.jobs:
            if spec.dedup_key is not None:
                key = spec.dedup_key.encode() if isinstance(spec.dedup_key, str) else spec.dedup_key
                keyed.setdefault(key, self.live_holder(stream, key))
        ids = enqueue.enqueue_many(self.conn, stream, [
            pgqueue.NewJob(s.payload, kind=s.kind, priority=s.priority, delay=s.delay,
                           dedup_key=s.dedup_key, max_attempts=s.max_attempts,
                           timeout=s.timeout)
            for s in a.jobs])
        assert len(ids) == len(a.jobs)
        for spec, job_id in zip(a.jobs, ids, strict=True):
            if spec.dedup_key is not None:
                key = spec.dedup_key.encode() if isinstance(spec.dedup_key, str) else spec.dedup_key
                if keyed[key] is None:
                    keyed[key] = job_id
                else:
                    self.note("enqueue deduplicated")
                assert job_id == keyed[key], f"dedup key {key!r}: got {job_id}, not {keyed[key]}"
            if job_id not in self.job_ids:
                self.job_ids.append(job_id)

    def do_leasejobs(self, a: LeaseJobs) -> None:
        stream = STREAMS[a.stream]
        got = lease_stage.lease(self.conn, stream, a.limit, a.visibility, 1, 2)
        assert len(got) <= a.limit
        for held in got:
            assert held.stream == stream
            assert held.lease_id not in self.live
            assert held.expires_at == self.clock + dt.timedelta(seconds=a.visibility)
            self.live[held.lease_id] = held.expires_at
            self.held.append(held)
        self.note("leased" if got else "lease found nothing")

    def do_renew(self, a: Renew) -> None:
        held = self.pick(a.pick, stale=a.stale)
        if held is None:
            return
        if held.lease_id not in self.live:
            with self.unchanged(held.job_id):
                assert lease_stage.renew_many(
                    self.conn, [(held, a.visibility, a.checkpoint)]) == {}
            self.note("renew refused")
            return
        before = self.job(held.job_id)
        renewed = lease_stage.renew_many(self.conn, [(held, a.visibility, a.checkpoint)])
        vt = held.visibility_timeout if a.visibility is None else a.visibility
        assert renewed == {held.lease_id: self.clock + dt.timedelta(seconds=vt)}
        self.live[held.lease_id] = renewed[held.lease_id]
        info = self.job(held.job_id)
        assert before is not None and info is not None and info.state == "leased"
        expect = before.checkpoint if a.checkpoint is None else a.checkpoint
        got = info.checkpoint
        assert (got.cursor, got.cursor_step, got.last_completed_step, got.schema_version,
                got.step_set_hash) == (expect.cursor, expect.cursor_step,
                                       expect.last_completed_step, expect.schema_version,
                                       expect.step_set_hash)  # b"" stays b"", None stays None
        assert got.crashes_by_step == before.checkpoint.crashes_by_step, "renew wrote crashes"
        self.note("renewed")

    def do_ack(self, a: Ack) -> None:
        picked: dict[int, pgqueue.Lease] = {}
        chosen = [self.pick(i, stale=False) for i in a.picks]
        if a.stale is not None:
            chosen.append(self.pick(a.stale, stale=True))
        for held in chosen:
            if held is not None:
                picked[held.lease_id] = held
        if not picked:
            return
        # Leases no longer current are skipped: only the live ones are acked and logged.
        expected = {h.job_id for h in picked.values() if h.lease_id in self.live}
        seq = self.last_seq()
        assert settle.ack_many(self.conn, list(picked.values())) == expected
        assert self.last_seq() == seq + len(expected)
        for held in picked.values():
            if held.lease_id in self.live:
                del self.live[held.lease_id]
                assert self.job(held.job_id) is None
        self.note("acked" if expected else "ack refused")

    def do_nack(self, a: Nack) -> None:
        held = self.pick(a.pick, stale=a.stale)
        if held is None:
            return
        if held.lease_id not in self.live:
            with self.unchanged(held.job_id):
                assert settle.nack(self.conn, held, a.error, a.retry_in) is None
            self.note("nack refused")
            return
        before = self.job(held.job_id)
        assert before is not None
        if held.lease_id in self.cancelling:  # a cancel was asked: never retried
            assert settle.nack(self.conn, held, a.error, a.retry_in) == "cancelled"
            del self.live[held.lease_id]
            assert self.job(held.job_id) is None
            self.note("nack of a cancelled job")
            return
        dead = settle.nack(self.conn, held, a.error, a.retry_in) == "dead"
        del self.live[held.lease_id]
        assert dead == (held.max_attempts > 0 and held.attempts + 1 >= held.max_attempts)
        info = self.job(held.job_id)
        assert info is not None
        assert info.attempts == held.attempts + 1
        if a.error is None:
            assert (info.last_error, info.error_summary) == (before.last_error, before.error_summary)
        elif isinstance(a.error, ValueError):
            message = " ".join(str(a.error).split())
            assert info.error_summary == (f"ValueError: {message}" if message else "ValueError")
            # never raised: no frames, only Python's last line (no colon for an empty message)
            assert info.last_error == (f"ValueError: {a.error}\n" if str(a.error)
                                       else "ValueError\n")
        else:
            assert info.last_error == a.error
            if a.error.isascii():  # else Python and the database may differ on whitespace
                # the database's whitespace ([[:space:]]), not Python's (which has \x1c-\x1f)
                first = next((ln for ln in a.error.split("\n") if SQL_SPACE.sub("", ln)), None)
                assert info.error_summary == (None if first is None else
                                              SQL_SPACE.sub(" ", first).strip(" ") or None)
        if dead:
            assert info.state == "dead"
        elif a.retry_in == 0:
            assert info.state == "pending" and info.not_before == self.clock
        else:
            assert info.state in ("pending", "scheduled")
        self.note("nack dead" if dead else "nacked")

    def do_returnlease(self, a: ReturnLease) -> None:
        held = self.pick(a.pick, stale=a.stale)
        if held is None:
            return
        sql = "SELECT * FROM pgqueue.return_leases(%s, %s)"
        if held.lease_id not in self.live:
            with self.unchanged(held.job_id):
                assert self.conn.execute(sql, [[held.job_id], [held.lease_id]]).fetchall() == []
            self.note("return refused")
            return
        assert self.conn.execute(sql, [[held.job_id], [held.lease_id]]).fetchall() != []
        del self.live[held.lease_id]
        info = self.job(held.job_id)
        if held.lease_id in self.cancelling:  # given back after a cancel was asked: gone
            assert info is None
            self.note("return of a cancelled job")
            return
        assert info is not None and info.state == "pending"
        assert info.attempts == held.attempts, "returning a lease must not cost an attempt"
        self.note("returned")

    def do_reclaim(self, a: Reclaim) -> None:
        at = self.clock + RECLAIM_AHEAD if a.ahead else self.clock
        expired = {lid for lid, exp in self.live.items() if exp < at}
        pin(self.conn, at)
        try:
            assert reclaim.reclaim_expired(self.conn) == len(expired)
            assert reclaim.reclaim_expired(self.conn) == 0  # idempotent
        finally:
            pin(self.conn, self.clock)
        for lid in expired:
            del self.live[lid]
        # A lease past its expiry that reclaim has not taken is still current (checked by
        # the next write with it); one not yet expired was left alone.
        self.note("reclaimed" if expired else "reclaim found nothing")

    def do_requeue(self, a: Requeue) -> None:
        if a.dead_only:
            dead = self.conn.execute(
                "SELECT id, stream, dedup_key FROM pgqueue.dead_letter ORDER BY id").fetchall()
            if not dead:
                return
            job_id, stream, key = dead[a.pick % len(dead)]
        else:
            if not self.job_ids:
                return
            job_id = self.job_ids[a.pick % len(self.job_ids)]
            row = self.conn.execute("SELECT stream, dedup_key FROM pgqueue.dead_letter"
                                    " WHERE id = %s", [job_id]).fetchone()
            if row is None:
                with self.unchanged(job_id), pytest.raises(pgqueue.JobNotFound):
                    deadletter.requeue(self.conn, job_id)
                self.note("requeue not found")
                return
            stream, key = row
        holder = None if key is None else self.live_holder(stream, bytes(key))
        if holder is not None:
            with self.unchanged(job_id, holder), \
                    pytest.raises(pgqueue.DedupConflict, match=str(holder)) as caught:
                deadletter.requeue(self.conn, job_id)
            assert caught.value.holder == holder
            self.note("requeue dedup conflict")
            return
        deadletter.requeue(self.conn, job_id)
        info = self.job(job_id)
        assert info is not None and info.state == "pending" and info.attempts == 0
        self.note("requeued")

    def do_reoffer(self, a: Reoffer) -> None:
        dead = self.conn.execute(
            "SELECT stream, dedup_key FROM pgqueue.dead_letter WHERE dedup_key IS NOT NULL"
            " ORDER BY id").fetchall()
        if not dead:
            return
        stream, key = dead[a.pick % len(dead)]
        self.do_enqueue(Enqueue(0, (JobSpec(a.payload, None, 1, None, bytes(key), 2),)),
                        stream=stream)
        self.note("reoffered")

    def do_operate(self, a: Operate) -> None:
        parked = [int(r[0]) for r in self.conn.execute(
            "SELECT id FROM pgqueue.job WHERE state = 'quarantined' ORDER BY id")]
        if a.parked and parked:
            job_id = parked[a.pick % len(parked)]
        elif self.job_ids:
            job_id = self.job_ids[a.pick % len(self.job_ids)]
        else:
            return
        row = self.conn.execute("SELECT state, stream, dedup_key FROM pgqueue.jobs"
                                " WHERE id = %s", [job_id]).fetchone()
        expected: type[Exception] | None
        if row is None:
            expected = pgqueue.JobNotFound
        elif a.what == "cancel":
            expected = None  # a leased job is asked to stop; any other goes at once
        elif row[0] not in ("quarantined", "undecodable"):
            expected = pgqueue.InvalidState
        elif row[2] is not None and self.live_holder(row[1], bytes(row[2])) is not None:
            expected = pgqueue.DedupConflict
        else:
            expected = None

        def act() -> None:
            if a.what == "release":
                operate.release(self.conn, job_id)
            else:
                operate.cancel(self.conn, job_id)

        if expected is not None:
            with self.unchanged(job_id), pytest.raises(expected):
                act()
            self.note(f"{a.what} refused: {expected.__name__}")
            return
        act()
        info = self.job(job_id)
        if a.what == "release":
            assert info is not None and info.state == "pending"
        elif row is not None and row[0] == "leased":
            assert info is not None and info.state == "leased" and info.lease_id is not None
            assert info.cancel_requested_at is not None
            self.cancelling.add(info.lease_id)
            self.note("cancel requested")
            return
        else:
            assert info is None
        self.note(a.what)

    def do_cancelleased(self, a: CancelLeased) -> None:
        held = self.pick(a.pick, stale=False)
        if held is None:
            return
        if held.lease_id in self.cancelling:  # asked before: nothing more
            with self.unchanged(held.job_id):
                assert operate.cancel(self.conn, held.job_id) == "requested"
            self.note("cancel asked again")
            return
        assert operate.cancel(self.conn, held.job_id) == "requested"
        info = self.job(held.job_id)
        assert info is not None and info.state == "leased"
        assert info.cancel_requested_at == self.clock
        with self.unchanged(held.job_id):  # asked again: nothing more
            assert operate.cancel(self.conn, held.job_id) == "requested"
        self.cancelling.add(held.lease_id)
        self.note("cancel requested")

    def do_configure(self, a: Configure) -> None:
        operate.configure_stream(self.conn, STREAMS[a.stream], retry_base=a.retry_base,
                                 retry_cap=a.retry_cap, quarantine_after=a.quarantine_after)
        self.note("configured")


def run_workload(dsn: str, script: Sequence[Action]) -> Workload:
    with connection.connect(dsn) as conn:
        work = Workload.start(conn)
        for action in script:
            work.run(action)
    return work


# -------------------------------------------------------------------------------------------
# The property: replay reproduces the leader, along the way and at the end
# -------------------------------------------------------------------------------------------

class ReplayMachine(RuleBasedStateMachine):
    """A random workload on a fresh leader, replayed into a fresh replica and compared."""

    bed: Bed  # set by the test that runs the machine

    def __init__(self) -> None:
        super().__init__()
        self.leader = self.bed.new_database()
        self.replica = self.bed.new_database()
        self.applied = 0  # ops the replica has applied so far
        self.conn = connection.connect(self.leader)
        self.readers = (connection.connect(self.leader), connection.connect(self.replica))
        self.work = Workload.start(self.conn)
        self.completed = True  # False while a step runs: after a failure, teardown only cleans up
        self.steps_since_replay = 0

    def step(self, action: Action) -> None:
        self.completed = False
        self.work.run(action)
        self.completed = True
        self.steps_since_replay += 1

    def has_live(self) -> bool:
        return bool(self.work.live)

    def has_stale(self) -> bool:
        return len(self.work.held) > len(self.work.live)

    @initialize(first=st.lists(enqueues, min_size=1, max_size=4))
    def fill(self, first: list[Enqueue]) -> None:
        """Start with some jobs in both streams, so leases have something to find."""
        for a in first:
            self.step(a)

    @rule(a=enqueues)
    def enqueue(self, a: Enqueue) -> None:
        self.step(a)

    @rule(a=leases)
    def lease(self, a: LeaseJobs) -> None:
        self.step(a)

    @precondition(has_live)
    @rule(a=renews(stale=False))
    def renew(self, a: Renew) -> None:
        self.step(a)

    @precondition(has_live)
    @rule(a=acks(stale=False))
    def ack(self, a: Ack) -> None:
        self.step(a)

    @precondition(has_live)
    @rule(a=nacks(stale=False))
    def nack(self, a: Nack) -> None:
        self.step(a)

    @precondition(has_live)
    @rule(a=returns(stale=False))
    def return_lease(self, a: ReturnLease) -> None:
        self.step(a)

    @precondition(has_stale)
    @rule(a=st.one_of(renews(stale=True), acks(stale=True), nacks(stale=True),
                      returns(stale=True)))
    def write_with_lost_lease(self, a: Renew | Ack | Nack | ReturnLease) -> None:
        self.step(a)

    @precondition(has_live)
    @rule(a=cancels)
    def cancel_leased(self, a: CancelLeased) -> None:
        self.step(a)

    @rule(a=advances)
    def advance(self, a: Advance) -> None:
        self.step(a)

    @precondition(has_live)
    @rule(ahead=st.booleans())
    def reclaim(self, ahead: bool) -> None:
        self.step(Reclaim(ahead))

    @rule(a=requeues)
    def requeue(self, a: Requeue) -> None:
        self.step(a)

    @rule(a=reoffers)
    def reoffer(self, a: Reoffer) -> None:
        self.step(a)

    @precondition(lambda self: bool(self.work.job_ids))
    @rule(a=operations)
    def operate(self, a: Operate) -> None:
        self.step(a)

    @rule(a=configures)
    def configure(self, a: Configure) -> None:
        self.step(a)

    @precondition(lambda self: self.steps_since_replay > 0)
    @rule()
    def replay_so_far(self) -> None:
        """Catch the replica up mid-run: it must equal the leader now, not only at the end
        (a job acked later would hide a column the replica got wrong)."""
        self.completed = False
        self.catch_up()
        self.completed = True
        self.steps_since_replay = 0

    def catch_up(self) -> None:
        read, applied = replay_all(self.leader, self.replica, counted=self.readers[0])
        self.applied += applied
        assert self.applied == read, "every op applied exactly once across replays"
        assert_identical(*self.readers)

    def teardown(self) -> None:
        try:
            self.conn.close()
            if not self.completed:
                return  # a step failed; its error is the report
            self.catch_up()
            _, again = replay_all(self.leader, self.replica, counted=self.readers[0])
            assert again == 0, "a second replay of the whole log applied ops again"
            assert_identical(*self.readers)
        finally:
            for reader in self.readers:
                reader.close()
            self.bed.drop(self.leader)
            self.bed.drop(self.replica)


@pytest.mark.slow
@pytest.mark.timeout(900)  # passing takes ~30 s; a failure is shrunk for up to 5 minutes more
def test_replay_reproduces_the_leader_row_for_row(bed: Bed) -> None:
    ReplayMachine.bed = bed
    run_state_machine_as_test(ReplayMachine, settings=settings(
        max_examples=50, stateful_step_count=80, deadline=None, print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                               HealthCheck.filter_too_much]))


# -------------------------------------------------------------------------------------------
# Plain tests
# -------------------------------------------------------------------------------------------

def busy_workload(dsn: str) -> Workload:
    """A fixed workload that produces every op the property test drives at least once."""
    spec = JobSpec(b"p", "email", 5, None, b"k1", 1)
    script: list[Action] = [
        Configure(0, 0.5, 60.0, 2),
        Enqueue(0, (spec, JobSpec("x", None, 200, 0.0, None, 0),
                    JobSpec(b"", None, 0, 3600.0, "k3", 3))),
        Enqueue(1, (JobSpec(b"y", None, 9, 0.25, None, 2),)),
        LeaseJobs(0, 2, 30.0),  # job 2 (priority 200), then job 1
        Renew(0, False, None, pgqueue.Checkpoint(cursor_step="fetch", cursor=b"\x00\x01")),
        Renew(1, False, 10.0, pgqueue.Checkpoint(last_completed_step="fetch", cursor=b"")),
        Nack(0, False, None, "boom"),   # job 1 (max_attempts 1): dead
        Ack((0,), None),                # job 2
        Ack((), 0),                     # a lost lease: nothing acked
        Enqueue(0, (spec,)),            # k1 is free again: job 5
        Requeue(0, dead_only=True),     # refused: job 5 holds k1
        Advance(7200.0),                # job 3 and job 4 are due
        LeaseJobs(1, 1, 0.5),
        ReturnLease(0, False),          # job 4 back to pending, no attempt spent
        LeaseJobs(1, 1, 0.5),
        LeaseJobs(0, 5, 30.0),          # job 3 and job 5
        Reclaim(ahead=True),            # job 5 dead, job 3 and job 4 pending
        Requeue(0, dead_only=False),    # job 1: k1 is free now
        Operate(2, "cancel", parked=False),  # job 3
    ]
    work = run_workload(dsn, script)
    with connection.connect(dsn) as conn:
        ops = {r[0] for r in conn.execute("SELECT DISTINCT op FROM pgqueue.op_log")}
    assert ops >= {"ConfigureStream", "Enqueue", "Lease", "Promote", "Renew", "Nack", "Ack",
                   "ReturnLease", "Reclaim", "RequeueDeadLetter", "Cancel"}, ops
    assert work.seen.get("requeue dedup conflict") == 1, work.seen
    assert work.seen.get("requeued") == 1, work.seen
    return work


def all_ops(dsn: str) -> list[dict[str, Any]]:
    """The op log as op_log rows in jsonb (what replay hands to pgqueue.ingest_ops)."""
    with connection.connect(dsn) as conn:
        return [r[0] for r in conn.execute(
            "SELECT to_jsonb(o) FROM pgqueue.op_log o ORDER BY seq").fetchall()]


def ingest(dsn: str, ops: list[dict[str, Any]]) -> int:
    with connection.connect(dsn) as conn:
        row = conn.execute("SELECT pgqueue.ingest_ops(%s)", [Jsonb(ops)]).fetchone()
    assert row is not None
    return int(row[0])


def test_ingesting_the_same_ops_twice_changes_nothing(bed: Bed, dsn: str) -> None:
    busy_workload(dsn)
    ops = all_ops(dsn)
    replica = bed.new_database()
    twice = bed.new_database()
    try:
        assert ingest(replica, ops) == len(ops)
        assert_identical(dsn, replica)
        before = snapshot(replica)
        assert ingest(replica, ops) == 0
        assert snapshot(replica) == before
        # Each op delivered twice in a row within one batch is applied once.
        assert ingest(twice, [o for op in ops for o in (op, op)]) == len(ops)
        assert_identical(dsn, twice)
    finally:
        bed.drop(replica)
        bed.drop(twice)


def test_replay_into_a_database_that_applied_a_prefix_catches_up(bed: Bed, dsn: str) -> None:
    busy_workload(dsn)
    ops = all_ops(dsn)
    replica = bed.new_database()
    try:
        prefix = len(ops) // 2
        assert ingest(replica, ops[:prefix]) == prefix
        assert replay_all(dsn, replica) == (len(ops), len(ops) - prefix)
        assert_identical(dsn, replica)

        # More work on the leader; the next replay applies exactly the new ops.
        with pgqueue.Queue(dsn, "alpha") as q:
            q.enqueue("later", dedup_key="k2")
            (held,) = q.lease(1)
            q.renew(held, checkpoint=pgqueue.Checkpoint(cursor_step="s", cursor=b"7"))
            q.ack(held)
        assert replay_all(dsn, replica) == (len(ops) + 4, 4)
        assert_identical(dsn, replica)
    finally:
        bed.drop(replica)


def test_a_replayed_database_continues_ids_without_collision(bed: Bed, dsn: str) -> None:
    busy_workload(dsn)
    replica = bed.new_database()
    try:
        replay_all(dsn, replica)
        with connection.connect(dsn) as conn:
            row = conn.execute("SELECT max(job_id), max(lease_id), max(seq)"
                               " FROM pgqueue.op_log").fetchone()
        assert row is not None
        max_job, max_lease, max_seq = row
        with pgqueue.Queue(replica, "alpha") as q:
            job_id = q.enqueue("after replay")
            (held,) = q.lease(1, visibility_timeout=30.0)
            newest = q.op_log(limit=1)[0]
        assert job_id > max_job
        assert held.lease_id > max_lease
        assert newest.seq > max_seq
    finally:
        bed.drop(replica)


def test_every_enqueue_op_carries_the_designed_fields(dsn: str) -> None:
    busy_workload(dsn)
    with connection.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT job_id, pgqueue.op_body(o), stream FROM pgqueue.op_log o"
            " WHERE op = 'Enqueue'"
            " ORDER BY seq").fetchall()
        assert len(rows) == 5
        for job_id, body, stream in rows:
            missing = ENQUEUE_FIELDS - body.keys()
            assert not missing, f"Enqueue of job {job_id} lacks {sorted(missing)}: {body}"
            assert body["job_id"] == job_id
            assert body["next_job_id"] > job_id
            assert body["attempts"] == 0
            assert body["stream"] == stream
            assert body["not_before_ms"] >= body["enqueued_at_ms"]
            # The op alone rebuilds the job as enqueued.
            now = conn.execute(
                "SELECT payload, priority, dedup_key, max_attempts, pgqueue.to_ms(enqueued_at)"
                " FROM pgqueue.jobs WHERE id = %s", [job_id]).fetchone()
            if now is None:  # acked or cancelled since
                continue
            payload, priority, dedup, max_attempts, enqueued_ms = now
            assert base64.b64decode(body["payload"]) == bytes(payload)
            assert body["priority"] == priority
            assert body["max_attempts"] == max_attempts
            assert body["enqueued_at_ms"] == enqueued_ms
            assert (body["dedup_key"] is None) == (dedup is None)
            if dedup is not None:
                assert base64.b64decode(body["dedup_key"]) == bytes(dedup)
