"""AsyncQueue: the producing and consuming calls of Queue as coroutines, with the same names,
arguments, return values and errors (Queue is generated from AsyncQueue's source; the test
of the generator is tests/unit/test_generated.py). Real Postgres, asyncio.run per test."""
from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Awaitable
from typing import TypeVar

import psycopg
import pytest

import pgqueue
from pgqueue.client import lease
from tests.dbhelp import pinned

pytestmark = pytest.mark.layouts("single", "citus", "stock")

T = TypeVar("T")
PAST = dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=1)


def run(coro: Awaitable[T]) -> T:
    async def main() -> T:
        return await coro

    return asyncio.run(main())


def test_enqueue_lease_renew_ack_nack_and_reclaim_as_coroutines(dsn: str) -> None:
    async def scenario() -> None:
        async with pgqueue.AsyncQueue(dsn, stream="mail") as q:
            one = await q.enqueue({"to": "a@example.com"}, kind="send", priority=5,
                                  dedup_key="welcome:1")
            assert await q.enqueue({"again": True}, kind="send", dedup_key="welcome:1") == one
            many = await q.enqueue_many([pgqueue.NewJob(b"b"), pgqueue.NewJob("c", delay=3600)])
            assert len(many) == 2 and one not in many
            leases = await q.lease(10, visibility_timeout=30)
            assert [x.job_id for x in leases] == [one, many[0]]  # priority first; c delayed
            first, second = leases
            expiry = await q.renew(first, checkpoint=pgqueue.Checkpoint(cursor_step="send",
                                                                         cursor=b"7"))
            assert isinstance(expiry, dt.datetime)
            assert (await q.renew_many([(second, 60.0, None)])).keys() == {second.lease_id}
            await q.ack(first)
            with pytest.raises(pgqueue.LeaseLost):
                await q.ack(first)
            assert await q.nack(second, error="boom", retry_in=0) is False
            assert await q.ack_many([second]) == set()  # nacked: that lease is gone
            assert await q.reclaim_expired() == 0

    run(scenario())
    with pgqueue.Queue(dsn, stream="mail") as q:
        jobs = {j.job_id: j for j in q.jobs()}
    assert len(jobs) == 2  # b (pending again, after its nack) and c (scheduled)
    nacked = next(j for j in jobs.values() if j.payload == b"b")
    assert (nacked.attempts, nacked.last_error) == (1, "boom")


# one server only: it pins the clock (pgqueue.now), which on Citus is the coordinator's session's,
# not the streams' nodes'
@pytest.mark.layouts("single")
def test_an_expired_lease_is_reclaimed_through_the_async_queue(dsn: str) -> None:
    with pgqueue.Queue(dsn) as q:
        job_id = q.enqueue(b"x")
    with pinned(dsn, PAST) as conn:  # leased an hour ago for a second: long expired now
        [held] = lease.lease(conn, "default", 1, 1.0, 0, 0)
    assert held.job_id == job_id

    async def reclaim() -> int:
        async with pgqueue.AsyncQueue(dsn) as q:
            return await q.reclaim_expired()

    assert run(reclaim()) == 1
    with pgqueue.Queue(dsn) as q:
        info = q.job(job_id)
    assert info is not None and (info.state, info.attempts) == ("pending", 1)


def test_enqueue_in_the_callers_async_transaction_commits_or_rolls_back(dsn: str) -> None:
    async def scenario() -> tuple[int, int]:
        async with pgqueue.AsyncQueue(dsn) as q:
            async with await psycopg.AsyncConnection.connect(dsn) as conn:
                kept = await q.enqueue(b"kept", conn=conn)
                await conn.commit()
                dropped = (await q.enqueue_many([pgqueue.NewJob(b"dropped")], conn=conn))[0]
                await conn.rollback()
            return kept, dropped

    kept, dropped = run(scenario())
    with pgqueue.Queue(dsn) as q:
        assert q.job(kept) is not None and q.job(dropped) is None


def test_conn_must_be_an_async_connection_and_others_are_refused_naming_conn(dsn: str) -> None:
    async def scenario() -> None:
        async with pgqueue.AsyncQueue(dsn) as q:
            with psycopg.connect(dsn) as sync_conn:
                with pytest.raises(TypeError, match=r"conn must be a psycopg\.AsyncConnection, "
                                                    r"or a SQLAlchemy AsyncConnection or "
                                                    r"AsyncSession .*; got psycopg\.Connection: "
                                                    r"a sync connection needs Queue"):
                    await q.enqueue(b"x", conn=sync_conn)
            with pytest.raises(TypeError, match=r"conn must be .*got builtins\.str$"):
                await q.enqueue_many([pgqueue.NewJob(b"x")], conn="dbname=x")

    run(scenario())


def test_bad_arguments_raise_the_errors_queue_raises(dsn: str) -> None:
    async def scenario() -> None:
        async with pgqueue.AsyncQueue(dsn) as q:
            with pytest.raises(ValueError, match="priority"):
                await q.enqueue(b"x", priority=999)
            with pytest.raises(TypeError, match="jobs"):
                await q.enqueue_many(b"not a list")  # type: ignore[arg-type]
            with pytest.raises(ValueError, match="limit"):
                await q.lease(0)

    run(scenario())
    with pytest.raises(ValueError, match="pool_size"):
        pgqueue.AsyncQueue(dsn, pool_size=0)
    with pytest.raises(ValueError, match="stream"):
        pgqueue.AsyncQueue(dsn, stream="")


def test_it_connects_at_first_use_and_names_a_missing_schema(empty_dsn: str) -> None:
    q = pgqueue.AsyncQueue(empty_dsn)  # a constructor cannot await: nothing happens yet

    async def use() -> None:
        try:
            await q.enqueue(b"x")
        finally:
            await q.close()

    with pytest.raises(pgqueue.SchemaMissing, match="pgqueue db upgrade"):
        run(use())


def test_several_dsns_use_the_reachable_leader(dsn: str) -> None:
    dead = "host=127.0.0.1 port=1 dbname=nothing connect_timeout=1"

    async def scenario() -> tuple[str, int]:
        async with pgqueue.AsyncQueue([dead, dsn]) as q:
            return q.dsn, await q.enqueue(b"to the leader")

    used, job_id = run(scenario())
    assert used == dsn
    with pgqueue.Queue(dsn) as q:
        assert q.job(job_id) is not None


def test_the_operator_reading_and_schedule_calls_as_coroutines(dsn: str) -> None:
    async def scenario() -> int:
        async with pgqueue.AsyncQueue(dsn, stream="ops") as q:
            await q.configure_stream(retry_base=0.01, retry_cap=0.02, max_payload_bytes=4096)
            with pytest.raises(ValueError, match="payload"):
                await q.enqueue(b"x" * 5000)
            doomed = await q.enqueue(b"doomed", max_attempts=1)
            [held] = await q.lease(1)
            assert await q.nack(held, error="fatal") is True
            assert [d.job_id for d in await q.dead_letters()] == [doomed]
            await q.requeue_dead_letter(doomed)
            info = await q.job(doomed)
            assert info is not None and info.state == "pending"
            [again] = await q.lease(1)
            await q.return_lease(again)
            with pytest.raises(pgqueue.InvalidState, match="release applies only"):
                await q.release(doomed)  # as Queue: not quarantined or undecodable
            assert [j.job_id for j in await q.jobs()] == [doomed]
            assert "ops" in {s.stream for s in await q.stats()}
            await q.cancel(doomed)
            assert await q.job(doomed) is None
            ops = [o.op for o in await q.op_log(job_id=doomed, limit=100)]
            assert ops[0] == "Cancel" and "Nack" in ops and "RequeueDeadLetter" in ops
            assert len(await q.op_log_preview(job_id=doomed, limit=1)) == 1
            await q.configure_kind("k", quarantine_after=2)
            made = await q.upsert_schedule("hourly", "0 * * * *", b"tick", kind="k")
            assert (made.name, made.cron, made.paused) == ("hourly", "0 * * * *", False)
            assert (await q.pause_schedule("hourly")).paused is True
            assert (await q.resume_schedule("hourly")).paused is False
            assert [x.name for x in await q.schedules()] == ["hourly"]
            assert await q.schedule_streams("hourly") == ["ops"]
            assert isinstance(await q.tick_schedules(), pgqueue.TickResult)
            await q.remove_schedule("hourly")
            assert await q.schedule("hourly") is None
            assert await q.workers() == []
            return doomed

    doomed = run(scenario())
    with pgqueue.Queue(dsn, stream="ops") as q:  # the same ops, read by the sync Queue
        assert q.op_log(job_id=doomed, limit=1)[0].op == "Cancel"


# one server only: replicas of a Citus cluster are not built (issue 27)
@pytest.mark.layouts("single")
def test_a_write_refused_by_a_demoted_leader_moves_to_the_new_one(dsn: str,
                                                                  empty_dsn: str) -> None:
    """As Queue: a replica's refusal changed nothing, so the call runs again on the leader."""
    pgqueue.migrate(empty_dsn)
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute("SELECT pgqueue.set_role('replica', 'second', 'elsewhere')")

    async def scenario() -> tuple[str, str, int]:
        async with pgqueue.AsyncQueue([empty_dsn, dsn]) as q:
            first = q.dsn  # the replica is passed over
            await q.enqueue(b"on the first leader")
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("SELECT pgqueue.set_role('replica', 'first', 'elsewhere')")
            with psycopg.connect(empty_dsn, autocommit=True) as conn:
                conn.execute("SELECT pgqueue.set_role('leader')")
            job_id = await q.enqueue(b"after the failover")
            return first, q.dsn, job_id

    first, now, job_id = run(scenario())
    assert (first, now) == (dsn, empty_dsn)
    with psycopg.connect(empty_dsn) as conn:
        row = conn.execute("SELECT payload FROM pgqueue.job WHERE id = %s", [job_id]).fetchone()
    assert row is not None and bytes(row[0]) == b"after the failover"


def test_a_sqlalchemy_async_session_or_connection_commits_or_rolls_back_the_job(
        dsn: str) -> None:
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
    from sqlalchemy.orm import Session

    from tests.integration.db.test_callers import engine_for

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY)")
    url = engine_for(dsn).url

    async def scenario() -> list[int]:
        engine = create_async_engine(url)
        ids = []
        try:
            async with pgqueue.AsyncQueue(dsn) as q:
                async with AsyncSession(engine) as session:
                    await session.execute(text("INSERT INTO orders VALUES (1)"))
                    ids.append(await q.enqueue(b"order 1", conn=session))
                    await session.commit()
                async with AsyncSession(engine) as session:
                    ids.append(await q.enqueue(b"never", conn=session))
                    await session.execute(text("INSERT INTO orders VALUES (2)"))
                    await session.rollback()
                async with engine.connect() as aconn:  # the enqueue first: begun for it
                    ids.append(await q.enqueue(b"order 3", conn=aconn))
                    await aconn.execute(text("INSERT INTO orders VALUES (3)"))
                    await aconn.commit()
                with pytest.raises(TypeError, match=r"conn must be .*AsyncSession.*a sync one "
                                                    r"needs Queue"):
                    await q.enqueue(b"x", conn=Session())
        finally:
            await engine.dispose()
        return ids

    ids = run(scenario())
    with psycopg.connect(dsn) as conn:
        orders = [r[0] for r in conn.execute("SELECT id FROM orders ORDER BY id")]
    with pgqueue.Queue(dsn) as q:
        kept = [i for i in ids if q.job(i) is not None]
    assert orders == [1, 3] and kept == [ids[0], ids[2]]


# -- concurrent enqueue calls share transactions (client/coalesce.py) ------------------------------


def op_xids(dsn: str, job_ids: list[int]) -> list[str]:
    """The transaction of each job's Enqueue op."""
    with psycopg.connect(dsn) as conn:
        return [r[0] for r in conn.execute(
            "SELECT xid::text FROM pgqueue.op_log WHERE op = 'Enqueue' AND job_id = ANY(%s) "
            "ORDER BY job_id", (job_ids,)).fetchall()]


def test_concurrent_enqueue_calls_share_transactions_and_each_gets_its_own_id(dsn: str) -> None:
    async def main() -> tuple[list[int], list[int]]:
        async with pgqueue.AsyncQueue(dsn, pool_size=2) as q:
            ids = await asyncio.gather(*(q.enqueue({"n": i}) for i in range(300)))
            lone = [await q.enqueue({"n": "alone"}), await q.enqueue({"n": "alone"})]
            return list(ids), lone

    ids, lone = run(main())
    assert len(set(ids)) == 300 and ids == sorted(ids)  # in the calls' order
    with pgqueue.Queue(dsn) as q:
        jobs = {j.job_id: j for j in q.jobs(limit=1000)}
    assert sorted(jobs) == sorted(ids + lone)
    assert [jobs[i].payload for i in ids] == [f'{{"n":{i}}}'.encode() for i in range(300)]
    xids = op_xids(dsn, ids)
    assert len(set(xids)) < 100  # shared commits, not one per call
    assert len(set(op_xids(dsn, lone))) == 2  # one after the other: each alone


def test_a_failing_call_in_a_shared_batch_fails_alone_with_its_own_error(dsn: str) -> None:
    """A payload over its stream's limit fails the shared transaction: nothing of it was
    written, each call runs alone, and only the oversized one raises, as it would alone."""
    with pgqueue.Queue(dsn) as q:
        q.configure_stream(max_payload_bytes=100)

    async def main() -> list[int | BaseException]:
        async with pgqueue.AsyncQueue(dsn, pool_size=1) as q:
            calls = [q.enqueue(b"x" * (500 if i == 7 else 10), dedup_key=f"k{i % 20}")
                     for i in range(40)]
            return list(await asyncio.gather(*calls, return_exceptions=True))

    outcomes = run(main())
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(errors) == 1 and outcomes[7] is errors[0]
    assert isinstance(errors[0], ValueError) and "500 bytes" in str(errors[0])
    ids = [o for o in outcomes if isinstance(o, int)]
    # a dedup key repeated among the calls gives one job, as one call after the other would
    assert len(set(ids)) == 20
    assert all(outcomes[i] == outcomes[i % 20] for i in range(20, 40) if i != 27)


def test_a_call_cancelled_before_its_batch_was_sent_is_left_out(dsn: str) -> None:
    async def main() -> tuple[int, bool]:
        async with pgqueue.AsyncQueue(dsn, pool_size=1) as q:
            first = asyncio.ensure_future(q.enqueue(b"first"))
            await asyncio.sleep(0)  # the first call holds the only connection
            doomed = asyncio.ensure_future(q.enqueue(b"cancelled"))
            kept = asyncio.ensure_future(q.enqueue(b"kept"))
            await asyncio.sleep(0)
            doomed.cancel()
            await first
            await kept
            return len(await q.jobs()), doomed.cancelled()

    count, cancelled = run(main())
    assert cancelled
    with pgqueue.Queue(dsn) as q:
        assert sorted(j.payload for j in q.jobs()) == [b"first", b"kept"]
    assert count == 2


@pytest.mark.layouts("single")
def test_an_app_enqueues_with_its_handlers_settings_through_either_queue(dsn: str) -> None:
    """app.enqueue takes a Queue, app.aenqueue an AsyncQueue; each job gets its handler's
    max_attempts; the wrong queue is refused naming the call to make instead."""
    app = pgqueue.App()

    @app.job("greet", max_attempts=5)
    def greet(job: pgqueue.JobContext) -> None:
        pass

    async def scenario() -> int:
        async with pgqueue.AsyncQueue(dsn) as aq:
            with pytest.raises(TypeError, match=r"await app\.aenqueue"):
                app.enqueue(aq, "greet", {"name": "Ada"})  # type: ignore[arg-type]
            return await app.aenqueue(aq, "greet", {"name": "Ada"})

    async_id = asyncio.run(scenario())
    with pgqueue.Queue(dsn) as q:
        sync_id = app.enqueue(q, "greet", {"name": "Grace"})
        with pytest.raises(TypeError, match=r"app\.enqueue\(queue"):
            asyncio.run(app.aenqueue(q, "greet", {}))  # type: ignore[arg-type]
        for job_id in (async_id, sync_id):
            info = q.job(job_id)
            assert info is not None and info.max_attempts == 5, info
