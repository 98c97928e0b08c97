"""Kind settings (pgqueue/client/kinds.py, configure_kind_settings in pgqueue/sql/operate.sql): set, left as
they are when not given, cleared with None; each change one ConfigureKind op with the kind's
whole settings, which a replay rebuilds; bad input refused with nothing written; a worker's
handlers record the limits they name and leave the rest."""
from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

import pgqueue
from pgqueue.db import connection
from pgqueue.runtime import registry
from tests.asyncbridge import QueueApi
from tests.dbhelp import op_counts
from tests.pgbed import Bed

pytestmark = [pytest.mark.layouts("single", "citus", "stock"),
              pytest.mark.flavours("sync", "async")]


def _kinds(q: pgqueue.Queue) -> dict[str, pgqueue.KindConfig]:
    return {k.kind: k for k in q.kinds()}


def test_a_setting_not_given_is_left_and_none_clears_it(q: pgqueue.Queue, dsn: str,
                                                        queue_api: QueueApi) -> None:
    q.configure_kind("mail", max_concurrency=3, rate_limit=(10, 1.5))
    q.configure_kind("mail", max_per_key=2)
    assert _kinds(q)["mail"] == pgqueue.KindConfig("default", "mail", None, 3, (10, 1.5), 2)
    q.configure_kind("mail", rate_limit=None, quarantine_after=5)
    assert _kinds(q)["mail"] == pgqueue.KindConfig("default", "mail", 5, 3, None, 2)
    before = op_counts(dsn).get("ConfigureKind", 0)
    q.configure_kind("mail", max_concurrency=3)  # no change: no op
    q.configure_kind("mail")  # nothing given: nothing done
    assert op_counts(dsn).get("ConfigureKind", 0) == before
    q.configure_kind("mail", quarantine_after=None, max_concurrency=None, max_per_key=None)
    assert "mail" not in _kinds(q)  # nothing set: no row
    with queue_api(dsn, stream="other") as other:
        other.configure_kind("mail", max_concurrency=1)
        assert [(k.stream, k.kind) for k in other.kinds(all_streams=True)] == [("other", "mail")]
    assert _kinds(q) == {}


def test_each_change_is_one_op_with_the_whole_settings(q: pgqueue.Queue) -> None:
    q.configure_kind("mail", max_concurrency=3)
    q.configure_kind("mail", rate_limit=(10, 60))
    (op,) = [o for o in q.op_log(limit=1) if o.op == "ConfigureKind"]
    assert op.body == {"stream": "default", "kind": "mail", "quarantine_after": None,
                       "max_concurrency": 3, "rate_count": 10, "rate_ms": 60000,
                       "max_per_key": None}


def test_a_replay_rebuilds_the_settings(q: pgqueue.Queue, dsn: str, bed: Bed, queue_api: QueueApi) -> None:
    q.configure_kind("mail", max_concurrency=3, rate_limit=(10, 60), max_per_key=2)
    q.configure_kind("report", quarantine_after=4)
    q.configure_kind("gone", max_concurrency=1)
    q.configure_kind("gone", max_concurrency=None)
    with connection.connect(dsn) as conn:  # an op of the previous release: quarantine_after alone
        conn.execute("SELECT pgqueue.configure_kind('default', 'old', 2)")
    target = bed.new_database()
    try:
        pgqueue.replay(dsn, target)
        with queue_api(target) as replica:
            assert _kinds(replica) == _kinds(q)
        assert _kinds(q)["old"] == pgqueue.KindConfig("default", "old", 2)
    finally:
        bed.drop(target)


@pytest.mark.parametrize(("given", "error", "message"), [
    ({"max_concurrency": 0}, ValueError, "max_concurrency must be 1 to"),
    ({"max_concurrency": -2}, ValueError, "max_concurrency must be 1 to"),
    ({"max_per_key": 0}, ValueError, "max_per_key must be 1 to"),
    ({"max_concurrency": True}, TypeError, "max_concurrency must be an int"),
    ({"quarantine_after": 0}, ValueError, "quarantine_after must be 1 to"),
    ({"rate_limit": (0, 1)}, ValueError, "rate_limit count must be 1 to"),
    ({"rate_limit": (5, 0)}, ValueError, "rate_limit seconds must be > 0"),
    ({"rate_limit": (5, -1)}, ValueError, "rate_limit seconds must be > 0"),
    ({"rate_limit": 5}, TypeError, r"rate_limit must be \(count, seconds\)"),
    ({"rate_limit": (5, 1, 2)}, TypeError, r"rate_limit must be \(count, seconds\)"),
])
def test_bad_settings_are_refused_and_nothing_is_written(q: pgqueue.Queue, dsn: str,
                                                         given: dict[str, Any], error: type,
                                                         message: str) -> None:
    q.configure_kind("mail", max_concurrency=3)
    before = op_counts(dsn)
    with pytest.raises(error, match=message):
        q.configure_kind("mail", **given)
    assert op_counts(dsn) == before
    assert _kinds(q)["mail"] == pgqueue.KindConfig("default", "mail", max_concurrency=3)


@pytest.mark.parametrize(("settings", "message"), [
    ({"max_concurrency": 0}, "max_concurrency must be a whole number of at least 1"),
    ({"max_per_key": -2}, "max_per_key must be a whole number of at least 1"),
    ({"quarantine_after": 1.5}, "quarantine_after must be a whole number"),
    ({"max_concurrency": "3"}, r"max_concurrency must be a whole number .*got \"3\""),
    ({"max_concurrency": 2**31}, "max_concurrency must be a whole number"),
    ({"rate_count": 5, "rate_ms": 0}, "rate_ms must be a whole number of at least 1"),
    ({"rate_ms": None}, "rate_count and rate_ms are set together"),  # a count needs its window
    ({"max_cuncurrency": 1}, "unknown kind setting"),
])
def test_sql_callers_get_the_same_checks_naming_the_setting(
        q: pgqueue.Queue, dsn: str, settings: dict[str, Any], message: str) -> None:
    with connection.connect(dsn) as conn:
        conn.execute("SELECT pgqueue.configure_kind_settings('default', 'mail', %s)",
                     [Jsonb({"max_concurrency": 4, "rate_count": 2, "rate_ms": 1000})])
        before = op_counts(dsn)
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=message):
            conn.execute("SELECT pgqueue.configure_kind_settings('default', 'mail', %s)",
                         [Jsonb(settings)])
    assert op_counts(dsn) == before
    assert _kinds(q)["mail"] == pgqueue.KindConfig("default", "mail", None, 4, (2, 1.0))


def test_a_limited_stream_refuses_a_lease_in_a_snapshot_older_than_its_locks(
        q: pgqueue.Queue, dsn: str) -> None:
    """The limits count other leases under a kind's lock: only READ COMMITTED gives each
    statement a snapshot taken after it, so another isolation level is refused, naming it."""
    q.configure_kind("mail", max_concurrency=1)
    q.enqueue_many([pgqueue.NewJob(b"x", kind="mail") for _ in range(3)])
    before = op_counts(dsn)
    with connection.connect(dsn, autocommit=False) as conn:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        with pytest.raises(psycopg.errors.FeatureNotSupported,
                           match="enforces only at READ COMMITTED, not REPEATABLE READ"):
            conn.execute("SELECT * FROM pgqueue.lease('default', 5, 30000, 0, 0)")
        conn.rollback()
    assert op_counts(dsn) == before
    assert len(q.lease(limit=5)) == 1  # the library's own connections: read committed


def test_a_worker_records_the_limits_its_handlers_name_and_leaves_the_rest(
        q: pgqueue.Queue, dsn: str) -> None:
    q.configure_kind("mail", max_concurrency=7, max_per_key=2)
    q.configure_kind("report", rate_limit=(5, 1))
    app = pgqueue.App()
    app.job("mail", rate_limit=(10, 1))(lambda ctx: None)
    app.job("report")(lambda ctx: None)  # names no limit: configure_kind's stay
    steps = app.step_job("resize", max_concurrency=2, quarantine_after=4)
    steps.step("one")(lambda ctx: None)
    with connection.connect(dsn) as conn:
        registry.register_handlers(conn, app, ["default"])
    assert _kinds(q) == {
        "mail": pgqueue.KindConfig("default", "mail", None, 7, (10, 1.0), 2),
        "report": pgqueue.KindConfig("default", "report", rate_limit=(5, 1.0)),
        "resize": pgqueue.KindConfig("default", "resize", 4, 2)}
    with pytest.raises(ValueError, match="max_concurrency must be 1 to"):
        app.job("other", max_concurrency=0)
    with pytest.raises(ValueError, match="rate_limit seconds must be > 0"):
        app.step_job("other", rate_limit=(1, 0))


# -- the limits in the lease ----------------------------------------------------------------------


def _kinds_of(leases: list[pgqueue.Lease]) -> list[str]:
    return sorted((lease.kind or "") for lease in leases)


def test_max_concurrency_holds_and_a_finished_job_frees_its_slot(q: pgqueue.Queue,
                                                                 dsn: str) -> None:
    q.configure_kind("a", max_concurrency=2)
    q.enqueue_many([pgqueue.NewJob(b"a", kind="a") for _ in range(5)])
    q.enqueue_many([pgqueue.NewJob(b"b", kind="b") for _ in range(3)])
    first = q.lease(limit=10)
    assert _kinds_of(first) == ["a", "a", "b", "b", "b"]
    assert q.lease(limit=10) == []  # a is at its limit; b has none left
    held_a = [lease for lease in first if lease.kind == "a"]
    q.ack(held_a[0])
    (again,) = q.lease(limit=10)  # the ack freed one slot at once
    assert again.kind == "a"
    q.nack(again, error="x", retry_in=3600)  # back to pending (delayed): the slot is free
    (third,) = q.lease(limit=10)
    assert third.kind == "a" and third.job_id != again.job_id
    with connection.connect(dsn) as conn:  # an expired lease reclaimed frees its slot too
        conn.execute("UPDATE pgqueue.job SET lease_expires_at = now() - interval '1 s' "
                     "WHERE id = %s", [third.job_id])
    assert q.reclaim_expired() == 1
    assert _kinds_of(q.lease(limit=10)) == ["a"]


def test_a_limited_backlog_holds_back_no_other_kind(q: pgqueue.Queue) -> None:
    q.configure_kind("bulk", max_concurrency=1)
    q.enqueue_many([pgqueue.NewJob(b"x", kind="bulk", priority=9) for _ in range(300)])
    urgent = q.enqueue_many([pgqueue.NewJob(b"y", kind="mail") for _ in range(4)])
    unkinded = q.enqueue(b"z")
    leased = q.lease(limit=10)
    assert _kinds_of(leased) == ["", "bulk", "mail", "mail", "mail", "mail"]
    assert {lease.job_id for lease in leased} >= {*urgent, unkinded}
    assert leased[0].kind == "bulk"  # still in priority order


def test_the_rate_limit_counts_leases_in_its_window(q: pgqueue.Queue) -> None:
    q.configure_kind("api", rate_limit=(3, 0.5))
    q.enqueue_many([pgqueue.NewJob(b"x", kind="api") for _ in range(10)])
    first = q.lease(limit=10)
    assert len(first) == 3
    for lease in first:
        q.ack(lease)  # finishing does not give back a start: the window counts them
    assert q.lease(limit=10) == []
    deadline = time.monotonic() + 10
    later: list[pgqueue.Lease] = []
    while not later and time.monotonic() < deadline:  # polls until the window has passed
        later = q.lease(limit=10)
    assert len(later) == 3


def test_limits_hold_under_concurrent_leasers(dsn: str, q: pgqueue.Queue, queue_api: QueueApi) -> None:
    """Eight threads on their own connections lease and ack as fast as they can; the jobs of
    the kind held at once never exceed its max_concurrency."""
    limit = 3
    q.configure_kind("scarce", max_concurrency=limit)
    q.enqueue_many([pgqueue.NewJob(b"s", kind="scarce") for _ in range(200)])
    q.enqueue_many([pgqueue.NewJob(b"f") for _ in range(200)])
    held: set[int] = set()
    most = [0]
    guard = threading.Lock()
    errors: list[BaseException] = []

    def work() -> None:
        try:
            with queue_api(dsn, pool_size=1) as mine:
                while True:
                    got = mine.lease(limit=4)
                    if not got:
                        return
                    scarce = {lease.job_id for lease in got if lease.kind == "scarce"}
                    with guard:
                        held.update(scarce)
                        most[0] = max(most[0], len(held))
                    for lease in got:
                        with guard:
                            held.discard(lease.job_id)
                        mine.ack(lease)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert q.count_jobs().count == 0  # every job was leased and acked
    assert 1 <= most[0] <= limit


# -- per-key limits ---------------------------------------------------------------------------------


def _keys_of(leases: list[pgqueue.Lease], q: pgqueue.Queue) -> list[str]:
    found = [q.job(lease.job_id) for lease in leases]
    return sorted((j.concurrency_key or "-") for j in found if j is not None)


def test_max_per_key_holds_and_frees(q: pgqueue.Queue) -> None:
    q.configure_kind("t", max_per_key=2)
    q.enqueue_many([pgqueue.NewJob(b"a", kind="t", concurrency_key="A") for _ in range(10)])
    q.enqueue_many([pgqueue.NewJob(b"b", kind="t", concurrency_key="B") for _ in range(3)])
    q.enqueue_many([pgqueue.NewJob(b"-", kind="t") for _ in range(2)])  # no key: no key limit
    first = q.lease(limit=20)
    assert _keys_of(first, q) == ["-", "-", "A", "A", "B", "B"]
    assert q.lease(limit=20) == []
    q.ack(next(lease for lease in first if _keys_of([lease], q) == ["A"]))
    assert _keys_of(q.lease(limit=20), q) == ["A"]  # the ack freed one of A's slots


def test_a_key_at_its_limit_holds_back_no_other_key(q: pgqueue.Queue) -> None:
    q.configure_kind("t", max_per_key=1, max_concurrency=5)
    q.enqueue_many([pgqueue.NewJob(b"a", kind="t", concurrency_key="big", priority=9)
                    for _ in range(300)])
    small = [q.enqueue(b"s", kind="t", concurrency_key=f"small-{i}") for i in range(6)]
    leased = q.lease(limit=20)
    assert _keys_of(leased, q) == ["big", "small-0", "small-1", "small-2", "small-3"]
    assert {lease.job_id for lease in leased} >= set(small[:4])  # max_concurrency 5 in all


def test_the_key_travels_with_the_job(q: pgqueue.Queue, dsn: str, bed: Bed, queue_api: QueueApi) -> None:
    job_id = q.enqueue(b"x", kind="t", concurrency_key="tenant-7", max_attempts=1)
    (batch,) = q.enqueue_many([pgqueue.NewJob(b"y", kind="t", concurrency_key="tenant-8",
                                              dedup_key="d")])
    info = q.job(job_id)
    assert info is not None and info.concurrency_key == "tenant-7"
    for lease in q.lease(limit=10):
        if lease.job_id == job_id:
            q.nack(lease, error="x")  # dies: the dead letter keeps its key
    dead = q.job(job_id)
    assert dead is not None and dead.state == "dead" and dead.concurrency_key == "tenant-7"
    q.requeue_dead_letter(job_id)
    target = bed.new_database()
    try:
        pgqueue.replay(dsn, target)
        with queue_api(target) as replica:
            for jid, key in ((job_id, "tenant-7"), (batch, "tenant-8")):
                got = replica.job(jid)
                assert got is not None and got.concurrency_key == key
    finally:
        bed.drop(target)


@pytest.mark.parametrize(("key", "error", "message"), [
    ("", ValueError, "concurrency_key must be 1 to 200 characters"),
    ("k" * 201, ValueError, "concurrency_key must be 1 to 200 characters"),
    (7, TypeError, "concurrency_key must be a str"),
    ("a\x00b", ValueError, "concurrency_key"),
])
def test_a_bad_key_is_refused_and_nothing_written(q: pgqueue.Queue, dsn: str, key: Any,
                                                  error: type, message: str) -> None:
    before = op_counts(dsn)
    with pytest.raises(error, match=message):
        q.enqueue(b"x", concurrency_key=key)
    with pytest.raises(error, match=message):
        q.enqueue_many([pgqueue.NewJob(b"x"), pgqueue.NewJob(b"y", concurrency_key=key)])
    assert op_counts(dsn) == before
    assert q.enqueue(b"x", concurrency_key="k" * 200) > 0  # the longest there may be


def test_a_narrower_window_still_counts_the_leases_inside_it(q: pgqueue.Queue) -> None:
    """Leases counted in a long window's buckets still count when the window is shortened:
    each bucket keeps its own end."""
    q.configure_kind("api", rate_limit=(2, 60))
    q.enqueue_many([pgqueue.NewJob(b"x", kind="api") for _ in range(6)])
    assert len(q.lease(limit=10)) == 2
    q.configure_kind("api", rate_limit=(2, 1.0))
    assert q.lease(limit=10) == []  # the two leases are within the last second


def test_a_lease_locks_only_what_it_leases(q: pgqueue.Queue, dsn: str) -> None:
    """A lease of a stream with a limited kind, its transaction still open, leaves every job
    it did not lease to the next lease: it locked none of them, and not the limited kind
    either, whose jobs came after its ten (a kind that would not make the cut is neither
    locked nor counted)."""
    q.configure_kind("limited", max_concurrency=100)
    q.enqueue_many([pgqueue.NewJob(b"x", kind=f"k{i % 20}") for i in range(200)])
    q.enqueue_many([pgqueue.NewJob(b"x", kind="limited") for _ in range(50)])
    with psycopg.connect(dsn) as held:  # not autocommit: the first lease's locks stay
        first = held.execute("SELECT id FROM pgqueue.lease('default', 10, 30000, 0, 0)").fetchall()
        assert len(first) == 10
        second = q.lease(limit=300)
        assert len(second) == 240  # every job but the ten the open lease holds
        assert _kinds_of(second).count("limited") == 50
        assert not {r[0] for r in first} & {lease.job_id for lease in second}
        held.rollback()
    assert len(q.lease(limit=300)) == 10  # the open lease rolled back: its ten
