"""Every hot path on the server users run (Debian's PostgreSQL 15, JIT on at its default
thresholds), at the size a queue has in production, with no statement JIT-compiled.

A statement is compiled when the planner costs it above `jit_above_cost` (100,000), which a
plan reaches by the size of what it reads or, up to PostgreSQL 17, by a plan method turned off
that it cannot do without (10^10 each). Compiling costs 50-150 ms, so one compiled statement
on the hot path makes every lease a hundred times slower. The counters of pg_stat_statements
(nested statements tracked) say which statements of this test's database were compiled; the
`dsn` fixture fails any stock test that compiled one, and this test runs every path at size.
"""
from __future__ import annotations

import asyncio
import datetime as dt

import pytest

import pgqueue
from pgqueue.db import connection
from pgqueue.maintenance import maintain
from pgqueue.telemetry.metrics import database_registry
from tests.dbhelp import force_reclaim
from tests.integration.dashboard.dashboard_help import BEARER, dashboard
from tests.stockbed import StockBed

pytestmark = pytest.mark.layouts("stock")

#: Pending jobs behind every call (the size the JIT was first seen at).
PENDING = 20_000


def _backlog(q: pgqueue.Queue) -> None:
    for start in range(0, PENDING, 1000):
        q.enqueue_many([pgqueue.NewJob({"n": n}, kind=("limited" if n % 10 == 0 else "plain"),
                                       concurrency_key=f"k{n % 7}")
                        for n in range(start, start + 1000)])


def test_no_hot_statement_is_jit_compiled_with_a_backlog(dsn: str, q: pgqueue.Queue,
                                                         stock_bed: StockBed) -> None:
    _backlog(q)
    # producers: one job, a batch, a delayed one, a deduplicated one
    q.enqueue({"one": 1})
    q.enqueue_many([pgqueue.NewJob(b"x") for _ in range(100)])
    q.enqueue(b"later", delay=dt.timedelta(hours=1))
    q.enqueue(b"once", dedup_key="d1")
    q.enqueue(b"once", dedup_key="d1")
    # consumers on a stream without limits: leases of 1 and of 100, renew with a checkpoint,
    # ack, ack of many, nack, a lease after the caller's position
    for _ in range(5):
        for held in q.lease(1):
            q.ack(held)
    batch = q.lease(100, visibility_timeout=60)
    q.renew(batch[0], checkpoint=pgqueue.Checkpoint(cursor_step="a", cursor=b"7"))
    q.renew_many([(b, None, None) for b in batch[1:50]])
    q.ack_many(batch[:90])
    for held in batch[90:]:
        q.nack(held, error="failed on purpose")
    # the maintenance pass: reclaim of expired leases, promotion, rings, vacuum decisions
    leased = q.lease(50, visibility_timeout=60)
    assert leased
    force_reclaim(dsn)
    with connection.connect(dsn) as conn:
        maintain.run_pass(conn)
        maintain.run_pass(conn)
    # the kinds' limits (concurrency, rate, per key) in the lease
    q.configure_kind("limited", max_concurrency=5, rate_limit=(1000, 1.0), max_per_key=2)
    for _ in range(5):
        got = q.lease(20)
        q.ack_many(got)
    # operators and observers: stats, gauges, job lists, history, metrics, the dashboard
    q.stats()
    q.gauges()
    q.jobs(limit=50)
    q.jobs(state="pending", limit=50)
    q.throughput()
    q.history(batch[0].job_id)
    registry = database_registry(dsn)
    assert any(m.name.startswith("pgqueue_") for m in registry.collect())
    with dashboard(dsn) as client:
        for path in ("/", "/jobs", "/jobs?state=pending", f"/jobs/{batch[95].job_id}",
                     "/kinds", "/workers", "/schedules", "/api/stats", "/api/jobs",
                     "/api/jobs?state=pending&limit=200"):
            assert client.get(path, headers=BEARER).status_code == 200, path
    asyncio.run(_async_paths(dsn))
    compiled = stock_bed.jit_compiled(dsn)
    assert not compiled, "\n".join(map(str, compiled))


async def _async_paths(dsn: str) -> None:
    async with pgqueue.AsyncQueue(dsn) as aq:
        await aq.enqueue({"async": True})
        await asyncio.gather(*(aq.enqueue({"n": n}) for n in range(50)))
        for held in await aq.lease(10):
            await aq.ack(held)


@pytest.mark.layouts("single")
def test_every_function_that_turns_a_plan_method_off_turns_jit_off(dsn: str) -> None:
    """Up to PostgreSQL 17 a plan method turned off adds 10^10 to the cost of any plan that
    needs it, above every JIT threshold: a function that sets one must also set jit = off."""
    with connection.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT p.oid::regprocedure::text, p.proconfig FROM pg_proc p "
            "JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname = 'pgqueue' AND p.proconfig IS NOT NULL").fetchall()
    turning_off = {name: config for name, config in rows
                   if any(c.startswith("enable_") and c.endswith("=off") for c in config)}
    assert len(turning_off) >= 4  # lease, pick_within_limits, reclaim_due_jobs, expiry_unfinished
    unguarded = sorted(name for name, config in turning_off.items() if "jit=off" not in config)
    assert not unguarded, f"functions turning a plan method off without jit = off: {unguarded}"
