"""Enqueue: payload encoding, priority order, delays, dedup (also in batches and under
concurrent enqueuers), batches, streams, and the transactional enqueue with `conn=`."""
from __future__ import annotations

import datetime as dt
import json
import random
import threading
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue.client import enqueue, lease
from pgqueue.db import connection
from tests.asyncbridge import QueueApi
from tests.dbhelp import T0, UTC, op_counts, pinned, wait_for

pytestmark = [pytest.mark.layouts("single", "citus", "stock"),
              pytest.mark.flavours("sync", "async")]


def job_count(dsn: str) -> int:
    with connection.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM pgqueue.jobs").fetchone()
    assert row is not None
    return int(row[0])


def ids_of(leases: list[pgqueue.Lease]) -> list[int]:
    return [held.job_id for held in leases]


# -- payload ------------------------------------------------------------------------------------


def test_bytes_payload_is_stored_as_is(q: pgqueue.Queue) -> None:
    raw = bytes(range(256)) + b"\x00\xff"
    info = q.job(q.enqueue(raw))
    assert info is not None
    assert info.payload == raw


def test_str_payload_is_stored_as_utf8(q: pgqueue.Queue) -> None:
    text = "héllo wörld ✓ \u0000end"
    info = q.job(q.enqueue(text))
    assert info is not None
    assert info.payload == text.encode("utf-8")


@pytest.mark.parametrize("value", [{"to": "a@example.com", "n": [1, 2.5, None]}, [1, "two", {"3": True}]])
def test_dict_and_list_payloads_are_stored_as_json_text(q: pgqueue.Queue, value: Any) -> None:
    info = q.job(q.enqueue(value))
    assert info is not None
    assert json.loads(info.payload.decode("utf-8")) == value


def test_leased_payload_is_the_stored_bytes(q: pgqueue.Queue) -> None:
    job_id = q.enqueue({"k": "v"})
    [held] = q.lease()
    assert held.job_id == job_id
    assert json.loads(held.payload) == {"k": "v"}


def test_kind_and_max_attempts_are_stored(q: pgqueue.Queue) -> None:
    info = q.job(q.enqueue(b"x", kind="send_email", max_attempts=7, priority=3))
    assert info is not None
    assert (info.kind, info.max_attempts, info.priority, info.attempts, info.state) == (
        "send_email", 7, 3, 0, "pending")


# -- priority and order -------------------------------------------------------------------------


def test_higher_priority_first_and_fifo_by_id_within_a_priority(q: pgqueue.Queue) -> None:
    prios = [0, 5, 255, 5, 0, 255, 1]
    ids = [q.enqueue(f"p{p}", priority=p) for p in prios]
    expected = [i for _, i in sorted(zip(prios, ids, strict=True), key=lambda t: (-t[0], t[1]))]
    assert ids_of(q.lease(limit=len(ids))) == expected


def test_one_at_a_time_leases_follow_the_same_order(q: pgqueue.Queue) -> None:
    ids = q.enqueue_many([pgqueue.NewJob(b"a", priority=1), pgqueue.NewJob(b"b", priority=9),
                          pgqueue.NewJob(b"c", priority=1), pgqueue.NewJob(b"d", priority=9)])
    order = [q.lease()[0].job_id for _ in ids]
    assert order == [ids[1], ids[3], ids[0], ids[2]]
    assert q.lease() == []


# -- delay and not_before -----------------------------------------------------------------------


def test_delayed_job_is_scheduled_and_leasable_right_after_without_maintenance(
    q: pgqueue.Queue,
) -> None:
    job_id = q.enqueue(b"later", delay=0.2)
    info = q.job(job_id)
    assert info is not None
    assert info.state == "scheduled"
    assert q.lease() == []
    assert info.not_before is not None
    # leasable as soon as the database's clock passed its not_before, with no reclaim or
    # maintenance pass in between (to the millisecond, on a pinned clock: the next test but
    # one; on Citus the clock is the streams' nodes', which no test can pin)
    leased = wait_for(lambda: q.lease(), 10, "the delayed job to become leasable")
    assert ids_of(leased) == [job_id]


def test_delay_as_timedelta(q: pgqueue.Queue) -> None:
    job_id = q.enqueue(b"later", delay=dt.timedelta(hours=1))
    info = q.job(job_id)
    assert info is not None and info.not_before is not None
    assert info.state == "scheduled"
    left = (info.not_before - dt.datetime.now(UTC)).total_seconds()
    assert 3590 < left <= 3600.5


# one server only: it pins the clock (pgqueue.now), which on Citus is the coordinator's session's,
# not the streams' nodes'
@pytest.mark.layouts("single")
def test_never_leased_before_not_before_and_leasable_exactly_at_it(dsn: str, queue_api: QueueApi) -> None:
    with pinned(dsn, T0) as conn:
        [job_id] = enqueue.enqueue_many(conn, "default", [pgqueue.NewJob(b"x", delay=10)])
    with queue_api(dsn) as q:
        info = q.job(job_id)
        assert info is not None
        assert info.not_before == T0 + dt.timedelta(seconds=10)
        assert info.state == "scheduled"
    with pinned(dsn, T0 + dt.timedelta(seconds=9.999)) as conn:
        assert lease.lease(conn, "default", 10, 30.0, 0, 0) == []
    with pinned(dsn, T0 + dt.timedelta(seconds=10)) as conn:
        assert ids_of(lease.lease(conn, "default", 10, 30.0, 0, 0)) == [job_id]


# one server only: it pins the clock (pgqueue.now), which on Citus is the coordinator's session's,
# not the streams' nodes'
@pytest.mark.layouts("single")
def test_absolute_not_before(dsn: str, queue_api: QueueApi) -> None:
    with pinned(dsn, T0) as conn:
        later, past = enqueue.enqueue_many(conn, "default", [
            pgqueue.NewJob(b"later", not_before=T0 + dt.timedelta(minutes=5)),
            pgqueue.NewJob(b"past", not_before=T0 - dt.timedelta(days=1)),
        ])
        # a not_before in the past is ready now
        assert ids_of(lease.lease(conn, "default", 10, 30.0, 0, 0)) == [past]
    with queue_api(dsn) as q:
        info = q.job(later)
        assert info is not None
        assert (info.state, info.not_before) == ("scheduled", T0 + dt.timedelta(minutes=5))
    with pinned(dsn, T0 + dt.timedelta(minutes=5)) as conn:
        assert ids_of(lease.lease(conn, "default", 10, 30.0, 0, 0)) == [later]


def test_zero_delay_is_pending(q: pgqueue.Queue) -> None:
    info = q.job(q.enqueue(b"now", delay=0))
    assert info is not None
    assert info.state == "pending"


# -- dedup --------------------------------------------------------------------------------------


def test_dedup_returns_the_holders_id_and_inserts_nothing(q: pgqueue.Queue, dsn: str) -> None:
    first = q.enqueue(b"one", dedup_key="k")
    before_jobs, before_ops = job_count(dsn), op_counts(dsn)
    again = q.enqueue(b"two", dedup_key="k", priority=9)
    assert again == first
    assert job_count(dsn) == before_jobs
    assert op_counts(dsn) == before_ops
    info = q.job(first)
    assert info is not None
    assert (info.payload, info.priority, info.dedup_key) == (b"one", 0, b"k")


def test_str_dedup_key_is_stored_as_utf8_and_equals_the_same_bytes(q: pgqueue.Queue) -> None:
    first = q.enqueue(b"one", dedup_key="clé")
    info = q.job(first)
    assert info is not None
    assert info.dedup_key == "clé".encode()
    assert q.enqueue(b"two", dedup_key="clé".encode()) == first


def test_dedup_within_one_batch(q: pgqueue.Queue, dsn: str) -> None:
    ids = q.enqueue_many([
        pgqueue.NewJob(b"a", dedup_key="k1"),
        pgqueue.NewJob(b"b", dedup_key="k2"),
        pgqueue.NewJob(b"c", dedup_key="k1"),
        pgqueue.NewJob(b"d"),
        pgqueue.NewJob(b"e", dedup_key="k2"),
        pgqueue.NewJob(b"f", dedup_key="k1"),
    ])
    assert ids[2] == ids[0] and ids[5] == ids[0]
    assert ids[4] == ids[1]
    assert len({ids[0], ids[1], ids[3]}) == 3
    assert job_count(dsn) == 3
    assert op_counts(dsn) == {"Enqueue": 3}
    first = q.job(ids[0])
    assert first is not None and first.payload == b"a"


@pytest.mark.parametrize("holder_state", ["pending", "scheduled", "leased"])
def test_dedup_holds_for_every_live_state(q: pgqueue.Queue, dsn: str, holder_state: str) -> None:
    holder = q.enqueue(b"h", dedup_key=b"\x00key", delay=60 if holder_state == "scheduled" else None)
    if holder_state == "leased":
        assert ids_of(q.lease()) == [holder]
    info = q.job(holder)
    assert info is not None and info.state == holder_state
    ops = op_counts(dsn)
    assert q.enqueue(b"x", dedup_key=b"\x00key") == holder
    assert q.enqueue_many([pgqueue.NewJob(b"y", dedup_key=b"\x00key")]) == [holder]
    assert job_count(dsn) == 1
    assert op_counts(dsn) == ops


def test_dedup_key_is_freed_once_the_holder_is_acked(q: pgqueue.Queue) -> None:
    first = q.enqueue(b"1", dedup_key="k")
    [held] = q.lease()
    q.ack(held)
    second = q.enqueue(b"2", dedup_key="k")
    assert second != first
    info = q.job(second)
    assert info is not None and info.payload == b"2"
    assert q.job(first) is None


def test_dedup_key_is_freed_once_the_holder_is_dead(q: pgqueue.Queue) -> None:
    first = q.enqueue(b"1", dedup_key="k", max_attempts=1)
    [held] = q.lease()
    assert q.nack(held, error="boom") is True
    second = q.enqueue(b"2", dedup_key="k")
    assert second != first


def test_dedup_is_per_stream(dsn: str, queue_api: QueueApi) -> None:
    with queue_api(dsn, stream="a") as qa, queue_api(dsn, stream="b") as qb:
        a = qa.enqueue(b"a", dedup_key="same")
        b = qb.enqueue(b"b", dedup_key="same")
        assert a != b
        assert qa.enqueue(b"a2", dedup_key="same") == a
        assert qb.enqueue(b"b2", dedup_key="same") == b


def test_dedup_under_concurrent_enqueuers_single_calls(dsn: str, queue_api: QueueApi) -> None:
    keys = [f"key-{i}" for i in range(25)]
    threads = 8
    barrier = threading.Barrier(threads)
    results: list[dict[str, int]] = [{} for _ in range(threads)]
    errors: list[BaseException] = []

    def run(n: int) -> None:
        try:
            with queue_api(dsn, pool_size=1) as mine:
                order = keys[:]
                random.Random(n).shuffle(order)
                barrier.wait()
                for key in order:
                    results[n][key] = mine.enqueue(f"{n}:{key}", dedup_key=key)
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=run, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(30)
    assert errors == []
    with connection.connect(dsn) as conn:
        rows = conn.execute("SELECT dedup_key, id FROM pgqueue.job").fetchall()
        n_ops = conn.execute("SELECT count(*) FROM pgqueue.op_log WHERE op = 'Enqueue'").fetchone()
    holders = {bytes(k).decode(): int(i) for k, i in rows}
    assert len(rows) == len(keys) == len(holders)
    assert n_ops is not None and n_ops[0] == len(keys)
    for got in results:
        assert got == holders


def test_dedup_under_concurrent_batch_enqueuers(dsn: str, queue_api: QueueApi) -> None:
    """Producers enqueue the same keys in big batches, half of them in reverse order: every
    batch returns the holders' ids (no error, e.g. no deadlock between the batches)."""
    rounds, threads, n_keys = 5, 4, 1000
    barrier = threading.Barrier(threads)
    results: list[dict[str, int]] = [{} for _ in range(threads)]
    errors: list[BaseException] = []

    def run(n: int) -> None:
        try:
            with queue_api(dsn, pool_size=1) as mine:
                for r in range(rounds):
                    keys = [f"r{r}-key-{i}" for i in range(n_keys)]
                    order = keys if n % 2 == 0 else keys[::-1]
                    jobs = [pgqueue.NewJob(f"{n}:{k}", dedup_key=k) for k in order]
                    barrier.wait()
                    ids = mine.enqueue_many(jobs)
                    results[n].update(zip(order, ids, strict=True))
        except threading.BrokenBarrierError:
            pass
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    workers = [threading.Thread(target=run, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    assert errors == []
    with connection.connect(dsn) as conn:
        rows = conn.execute("SELECT dedup_key, id FROM pgqueue.job").fetchall()
    holders = {bytes(k).decode(): int(i) for k, i in rows}
    assert len(rows) == rounds * n_keys == len(holders)
    for got in results:
        assert got == holders


# -- batches ------------------------------------------------------------------------------------


def test_enqueue_many_returns_ids_in_input_order(q: pgqueue.Queue, dsn: str) -> None:
    jobs = [pgqueue.NewJob(f"job {i}", priority=(i * 37) % 256) for i in range(50)]
    ids = q.enqueue_many(jobs)
    assert len(ids) == 50 and len(set(ids)) == 50
    for i, job_id in enumerate(ids):
        info = q.job(job_id)
        assert info is not None
        assert info.payload == f"job {i}".encode()
        assert info.priority == (i * 37) % 256
    assert op_counts(dsn) == {"Enqueue": 50}


def test_enqueue_many_writes_the_batch_in_one_transaction(q: pgqueue.Queue, dsn: str) -> None:
    ids = q.enqueue_many([pgqueue.NewJob(b"x") for _ in range(100)])
    with connection.connect(dsn) as conn:
        xids = conn.execute(
            "SELECT count(DISTINCT xid), count(*) FROM pgqueue.op_log WHERE job_id = ANY(%s)",
            (ids,),
        ).fetchone()
    assert xids is not None and tuple(xids) == (1, 100)


def test_empty_batch_returns_nothing_and_writes_nothing(q: pgqueue.Queue, dsn: str) -> None:
    assert q.enqueue_many([]) == []
    assert job_count(dsn) == 0
    assert op_counts(dsn) == {}


def test_a_batch_mixing_optional_fields_keeps_each_jobs_own(q: pgqueue.Queue) -> None:
    """The library sends a NULL array for an optional column no job of the batch sets; a
    column one job sets travels whole, and the others keep NULL there."""
    ids = q.enqueue_many([
        pgqueue.NewJob(b"plain"),
        pgqueue.NewJob(b"later", kind="k", delay=60, dedup_key=b"d", schema_version=2),
        pgqueue.NewJob(b"plain too"),
    ])
    plain, later, plain_too = (q.job(job_id) for job_id in ids)
    assert plain is not None and later is not None and plain_too is not None
    assert (plain.kind, plain.state, plain_too.kind, plain_too.state) == (
        None, "pending", None, "pending")
    assert (later.kind, later.state) == ("k", "scheduled")
    assert q.enqueue_many([pgqueue.NewJob(b"again", dedup_key=b"d")]) == [later.job_id]


SQL_ENQUEUE = ("SELECT pgqueue.enqueue('s', ARRAY['\\x01', '\\x02']::bytea[], %s::text[], %s::int[], "
               "%s::bigint[], %s::timestamptz[], %s::bytea[], %s::int[], %s::int[])")


@pytest.mark.parametrize("dedup_keys", [None, [b"a", None]])
def test_sql_enqueue_takes_null_for_an_optional_column(dsn: str, dedup_keys: Any) -> None:
    with connection.connect(dsn) as conn:
        ids = [r[0] for r in conn.execute(
            SQL_ENQUEUE, [None, [3, 4], None, None, dedup_keys, [1, 2], None])]
        rows = conn.execute(
            "SELECT kind, priority, state, dedup_key, max_attempts, schema_version "
            "FROM pgqueue.job WHERE id = ANY(%s) ORDER BY id", [ids]).fetchall()
    assert len(ids) == 2
    keys = dedup_keys or [None, None]
    assert rows == [(None, 3, "pending", keys[0], 1, None), (None, 4, "pending", keys[1], 2, None)]


@pytest.mark.parametrize(("args", "message"), [
    ([None, None, None, None, None, [1, 2], None], "priorities and max_attempts must be arrays"),
    ([None, [1, 2], None, None, None, None, None], "priorities and max_attempts must be arrays"),
    ([["k"], [1, 2], None, None, None, [1, 2], None], "all arrays must have 2 elements"),
    ([None, [1, 2], [5], None, None, [1, 2], None], "all arrays must have 2 elements"),
])
def test_sql_enqueue_refuses_missing_or_short_arrays(dsn: str, args: list[Any], message: str) -> None:
    with connection.connect(dsn) as conn:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=message):
            conn.execute(SQL_ENQUEUE, args)
    assert job_count(dsn) == 0


# -- streams ------------------------------------------------------------------------------------


def test_streams_are_isolated(dsn: str, queue_api: QueueApi) -> None:
    with queue_api(dsn, stream="a") as qa, queue_api(dsn, stream="b") as qb:
        a_ids = [qa.enqueue(f"a{i}", priority=255) for i in range(3)]
        b_ids = [qb.enqueue(f"b{i}") for i in range(3)]
        got_b = qb.lease(limit=10)
        assert ids_of(got_b) == b_ids
        assert {held.stream for held in got_b} == {"b"}
        assert qb.lease(limit=10) == []
        assert ids_of(qa.lease(limit=10)) == a_ids


def test_job_ids_are_unique_across_streams_and_job_finds_any_stream(dsn: str, queue_api: QueueApi) -> None:
    with queue_api(dsn, stream="a") as qa, queue_api(dsn, stream="b") as qb:
        ids = []
        for i in range(5):
            ids.append(qa.enqueue(f"a{i}"))
            ids += qb.enqueue_many([pgqueue.NewJob(f"b{i}"), pgqueue.NewJob(f"b{i}!")])
        assert len(set(ids)) == len(ids)
        for job_id in ids:
            from_a, from_b = qa.job(job_id), qb.job(job_id)
            assert from_a is not None and from_a == from_b
        info = qa.job(ids[1])
        assert info is not None and info.stream == "b"


# -- transactional enqueue ----------------------------------------------------------------------


# one server only: on Citus an op's xid is its stream's node's, not the caller's transaction's
@pytest.mark.layouts("single")
@pytest.mark.flavours("sync")  # conn= a sync connection: test_async_queue.py has the async one
def test_transactional_enqueue_exists_only_after_commit(q: pgqueue.Queue, dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=False) as conn:
        xid = conn.execute("SELECT pg_current_xact_id()::text").fetchone()
        job_id = q.enqueue(b"in my transaction", conn=conn)
        assert q.job(job_id) is None
        assert q.lease() == []
        assert op_counts(dsn) == {}
        conn.commit()
    info = q.job(job_id)
    assert info is not None and info.payload == b"in my transaction"
    ops = q.op_log(job_id=job_id)
    assert [op.op for op in ops] == ["Enqueue"]
    assert xid is not None and ops[0].xid == xid[0]


@pytest.mark.flavours("sync")  # conn= a sync connection: test_async_queue.py has the async one
def test_transactional_enqueue_is_gone_after_rollback(q: pgqueue.Queue, dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=False) as conn:
        job_id = q.enqueue(b"never", conn=conn)
        conn.rollback()
    assert q.job(job_id) is None
    assert q.lease() == []
    assert job_count(dsn) == 0
    assert op_counts(dsn) == {}


@pytest.mark.flavours("sync")  # conn= a sync connection: test_async_queue.py has the async one
def test_transactional_enqueue_many_commit_and_rollback(q: pgqueue.Queue, dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=False) as conn:
        kept = q.enqueue_many([pgqueue.NewJob(b"a"), pgqueue.NewJob(b"b")], conn=conn)
        assert all(q.job(i) is None for i in kept)
        conn.commit()
        dropped = q.enqueue_many([pgqueue.NewJob(b"c"), pgqueue.NewJob(b"d")], conn=conn)
        assert all(q.job(i) is None for i in dropped)
        conn.rollback()
    assert all(q.job(i) is not None for i in kept)
    assert all(q.job(i) is None for i in dropped)
    assert op_counts(dsn) == {"Enqueue": 2}
    assert ids_of(q.lease(limit=10)) == kept


@pytest.mark.flavours("sync")  # conn= a sync connection: test_async_queue.py has the async one
def test_transactional_enqueue_rides_the_callers_other_writes(q: pgqueue.Queue, dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=False) as conn:
        conn.execute("CREATE TABLE public.orders (id int)")
        conn.execute("INSERT INTO public.orders VALUES (1)")
        job_id = q.enqueue({"order": 1}, conn=conn)
        conn.rollback()
        with pytest.raises(psycopg.errors.UndefinedTable):
            conn.execute("SELECT * FROM public.orders")
        conn.rollback()
    assert q.job(job_id) is None


def test_single_and_batch_enqueue_write_the_same_row_and_op(q: pgqueue.Queue, dsn: str) -> None:
    """enqueue (one job, pgqueue.enqueue_one) and enqueue_many (pgqueue.enqueue) are two SQL
    paths: the rows and op bodies they write must not differ but for ids and times."""
    kwargs: dict[str, Any] = {"kind": "k", "priority": 7, "delay": 30, "dedup_key": b"\x00d",
                              "max_attempts": 4, "schema_version": 3}
    one = q.enqueue({"a": 1}, **kwargs)
    (many,) = q.enqueue_many([pgqueue.NewJob({"a": 1}, **{**kwargs, "dedup_key": b"\x00e"})])
    with connection.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT to_jsonb(j) - 'id' - 'not_before' - 'enqueued_at' - 'dedup_key' "
            "FROM pgqueue.job j WHERE id = ANY(%s) ORDER BY id", ([one, many],)).fetchall()
        bodies = conn.execute(
            "SELECT pgqueue.op_body(o) - 'job_id' - 'next_job_id' - 'not_before_ms' "
            "- 'enqueued_at_ms' - 'dedup_key' FROM pgqueue.op_log o "
            "WHERE op = 'Enqueue' AND job_id = ANY(%s) ORDER BY job_id", ([one, many],)).fetchall()
    assert rows[0] == rows[1] and rows[0][0]["state"] == "scheduled"
    assert bodies[0] == bodies[1] and len(bodies) == 2


@pytest.mark.parametrize("when", ["infinity", "-infinity"])
def test_sql_enqueue_refuses_a_not_before_that_is_not_finite(dsn: str, when: str) -> None:
    """'infinity' would be a job that never comes due, whose op could not be written out for a
    replica (not_before in milliseconds); both enqueue functions refuse it, writing nothing."""
    with connection.connect(dsn) as conn:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="finite"):
            conn.execute(SQL_ENQUEUE, [None, [1, 2], None, [None, when], None, [1, 2], None])
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="finite"):
            conn.execute("SELECT pgqueue.enqueue_one('s', '\\x01'::bytea, NULL, 0, NULL, "
                         "%s::timestamptz, NULL, 25, NULL)", [when])
    assert job_count(dsn) == 0
    assert op_counts(dsn) == {}


LONG_KIND = "k" * 201
SQL_ENQUEUE_ALL = ("SELECT pgqueue.enqueue('s', ARRAY['\\x01', '\\x02']::bytea[], %s::text[], "
                   "ARRAY[0, 0], NULL, NULL, %s::bytea[], ARRAY[1, 1], NULL, NULL, false, "
                   "%s::jsonb[], %s::text[])")
SQL_ENQUEUE_ONE = ("SELECT pgqueue.enqueue_one('s', '\\x01'::bytea, %s, 0, %s, NULL, %s, 25, "
                   "NULL, NULL, false, %s::jsonb, %s)")


@pytest.mark.parametrize(("field", "value", "message"), [
    ("kind", LONG_KIND, "jobs\\[1\\].kind must be 1 to 200 characters"),
    ("kind", "", "jobs\\[1\\].kind must be 1 to 200 characters"),
    ("dedup_key", b"d" * 1025, "jobs\\[1\\].dedup_key must be at most 1024 bytes"),
    ("concurrency_key", "c" * 201, "jobs\\[1\\].concurrency_key must be 1 to 200 characters"),
    ("trace", json.dumps({"baggage": "b" * 16400}), "jobs\\[1\\].trace context must be at most"),
])
def test_sql_enqueue_refuses_fields_that_do_not_fit_naming_the_job(
        dsn: str, field: str, value: Any, message: str, queue_api: QueueApi) -> None:
    """A kind too long for the ready index used to be stored: once its job came due (a
    delay), every lease of its stream failed on the index. Both enqueue functions refuse it
    and the other oversized fields up front, writing nothing; the stream goes on leasing."""
    columns: dict[str, list[Any] | None] = {
        "kind": None, "dedup_key": None, "trace": None, "concurrency_key": None}
    columns[field] = [None, value]
    with connection.connect(dsn) as conn:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=message):
            conn.execute(SQL_ENQUEUE_ALL, [columns["kind"], columns["dedup_key"],
                                           columns["trace"], columns["concurrency_key"]])
        one = {name: (v[1] if v else None) for name, v in columns.items()}
        with pytest.raises(psycopg.errors.InvalidParameterValue,
                           match=message.replace("jobs\\[1\\].", "^")):
            conn.execute(SQL_ENQUEUE_ONE, [one["kind"], 1500, one["dedup_key"], one["trace"],
                                           one["concurrency_key"]])
    assert job_count(dsn) == 0
    assert op_counts(dsn) == {}
    with queue_api(dsn, stream="s") as q:
        q.enqueue(b"fits", kind="k" * 200, concurrency_key="c" * 200, dedup_key=b"d" * 1024)
        assert [held.kind for held in q.lease(5)] == ["k" * 200]


def test_the_api_refuses_a_kind_longer_than_200_characters(q: pgqueue.Queue) -> None:
    with pytest.raises(ValueError, match="kind must be 1 to 200 characters, got 201"):
        q.enqueue(b"x", kind=LONG_KIND)
    with pytest.raises(ValueError, match="kind must be 1 to 200 characters, got 201"):
        q.configure_kind(LONG_KIND, max_concurrency=1)
    with pytest.raises(ValueError, match="kind must be 1 to 200 characters, got 201"):
        q.upsert_schedule("s", "* * * * *", kind=LONG_KIND)
    with connection.connect(q.dsn) as conn:
        for sql in ("SELECT pgqueue.configure_kind_settings('default', %s, '{}')",
                    "SELECT pgqueue.upsert_schedule('default', 's', '* * * * *', 'UTC', "
                    "''::bytea, %s, 0, 25, 'one', 60000, false, now() + interval '1 minute')"):
            with pytest.raises(psycopg.errors.InvalidParameterValue,
                               match="kind must be 1 to 200 characters"):
                conn.execute(sql, [LONG_KIND])
    assert q.kinds() == [] and q.schedules() == []


def test_psql_enqueues_with_a_stream_and_a_payload_alone(dsn: str, q: pgqueue.Queue) -> None:
    """The optional arguments of pgqueue.enqueue_one have defaults: an operator in psql names
    only what they need, and gets what Queue.enqueue would have made."""
    with connection.connect(dsn) as conn:
        plain = conn.execute(
            """SELECT pgqueue.enqueue_one('emails', '{"to": "a@example.com"}')""").fetchone()
        with_names = conn.execute("SELECT pgqueue.enqueue_one('emails', 'x', p_kind => 'mail', "
                                  "p_priority => 7)").fetchone()
    assert plain is not None and with_names is not None
    job_id, named = plain[0], with_names[0]
    job = q.for_stream("emails").job(job_id)
    assert job is not None and job.payload == b'{"to": "a@example.com"}'
    assert (job.kind, job.priority, job.max_attempts, job.state) == (None, 0, 25, "pending")
    other = q.job(named)
    assert other is not None and (other.kind, other.priority) == ("mail", 7)


def test_a_jobs_own_time_limit_is_kept_and_a_bad_one_refused_on_every_way_in(
        dsn: str, q: pgqueue.Queue) -> None:
    """`timeout` at enqueue (API, batch, CLI, SQL): kept in milliseconds on the job, handed to
    the worker with its lease; zero or less refused naming the job, writing nothing."""
    cases: list[tuple[Any, type[Exception], str]] = [
        (0, ValueError, "timeout must be > 0 seconds, got 0"),
        (-2, ValueError, "timeout must be > 0 seconds, got -2"),
        ("1", TypeError, "timeout must be a number of seconds")]
    for bad, error, message in cases:
        with pytest.raises(error, match=message):
            q.enqueue(b"x", timeout=bad)
        with pytest.raises(error, match=r"jobs\[1\]\." + message):
            q.enqueue_many([pgqueue.NewJob(b"x"), pgqueue.NewJob(b"y", timeout=bad)])
    with connection.connect(dsn) as conn:
        with pytest.raises(psycopg.errors.InvalidParameterValue,
                           match=r"^timeout must be positive, got 0 ms"):
            conn.execute("SELECT pgqueue.enqueue_one('default', 'x', p_timeout_ms => 0)")
        with pytest.raises(psycopg.errors.InvalidParameterValue,
                           match=r"^jobs\[1\]\.timeout must be positive, got -5 ms"):
            conn.execute("SELECT pgqueue.enqueue('default', ARRAY['\\x01', '\\x02']::bytea[], "
                         "NULL, ARRAY[0, 0], NULL, NULL, NULL, ARRAY[1, 1], NULL, "
                         "p_timeouts_ms => ARRAY[10, -5])")
    assert job_count(dsn) == 0
    one = q.enqueue(b"a", timeout=dt.timedelta(seconds=90))
    many = q.enqueue_many([pgqueue.NewJob(b"b", timeout=0.0001), pgqueue.NewJob(b"c")])
    with connection.connect(dsn) as conn:
        ((sql_id,),) = conn.execute(
            "SELECT pgqueue.enqueue_one('default', 'd', p_timeout_ms => 2500)").fetchall()
    expected = {one: 90.0, many[0]: 0.001, many[1]: None, sql_id: 2.5}
    for job_id, limit in expected.items():
        info = q.job(job_id)
        assert info is not None and info.timeout == limit
    assert {held.job_id: held.timeout for held in q.lease(10)} == expected
