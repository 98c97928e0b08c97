"""Settings users choose for their database or role: with each, every path keeps working, or
fails with an error that names the setting; and `pgqueue db check` says what it found.

Each setting is made for the test's database (ALTER DATABASE) or for the connecting role in it
(ALTER ROLE ... IN DATABASE, so that no other test's database sees it), as a DBA would, and
every path then runs on new connections: migrations, producers (sync, async, in the caller's
transaction), leases of every kind, renewals, settles, reclaim, a maintenance pass, cron,
the observers, and a worker.
"""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

import pgqueue
from pgqueue.db import check, connection
from pgqueue.maintenance import maintain
from tests.dbhelp import force_reclaim, wait_for
from tests.pgbed import Bed

REPO = Path(__file__).resolve().parents[3]

app = pgqueue.App()


@app.job("ok")
def ok(job: pgqueue.JobContext) -> None:
    pass


@app.job("limited")
def limited(job: pgqueue.JobContext) -> None:
    pass


def _set(bed: Bed, dsn: str, name: str, value: str, *, for_role: bool = False) -> None:
    db = str(conninfo_to_dict(dsn)["dbname"])
    with connection.connect(bed.server_dsn) as conn:
        target = (sql.SQL("ALTER ROLE CURRENT_USER IN DATABASE {} SET {} = {}") if for_role
                  else sql.SQL("ALTER DATABASE {} SET {} = {}"))
        conn.execute(target.format(sql.Identifier(db), sql.Identifier(name), sql.Literal(value)))


def _every_path(dsn: str) -> None:
    """Every path a queue takes, on fresh connections; raises what the first failure raised."""
    with pgqueue.Queue(dsn, "settings") as q:
        q.enqueue({"n": 1})
        q.enqueue_many([pgqueue.NewJob(b"x", kind="ok") for _ in range(300)])
        assert q.enqueue(b"d", dedup_key="k") == q.enqueue(b"d", dedup_key="k")
        leased = q.lease(50)
        q.renew(leased[0], checkpoint=pgqueue.Checkpoint(cursor_step="a", cursor=b"1"))
        q.ack_many(leased[:40])
        q.nack(leased[40], error="failed on purpose")
        q.configure_kind("limited", max_concurrency=2, rate_limit=(100, 1.0), max_per_key=1)
        q.enqueue_many([pgqueue.NewJob(b"l", kind="limited", concurrency_key="a")
                        for _ in range(5)])
        assert q.lease(10)
        force_reclaim(dsn)
        q.reclaim_expired()
        with connection.connect(dsn) as conn:
            for _ in range(3):
                maintain.run_pass(conn)
        q.upsert_schedule("each minute", "* * * * *", kind="ok")
        q.tick_schedules()
        q.stats()
        q.jobs(limit=20)
        q.gauges()
        q.throughput()
        with psycopg.connect(dsn) as mine, mine.transaction():
            q.enqueue(b"mine", conn=mine, kind="ok")
    asyncio.run(_async_paths(dsn))
    _a_worker_drains(dsn)


async def _async_paths(dsn: str) -> None:
    async with pgqueue.AsyncQueue(dsn, "settings") as q:
        await asyncio.gather(*(q.enqueue({"n": n}, kind="ok") for n in range(30)))
        for held in await q.lease(5):
            await q.ack(held)


def _a_worker_drains(dsn: str) -> None:
    worker = pgqueue.Worker(app, dsn, streams=["settings"], concurrency=4, poll_interval=0.1,
                            maintenance_interval=0.1)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        with pgqueue.Queue(dsn, "settings") as q:
            wait_for(lambda: not any(s.count for s in q.stats()
                                     if s.state in ("pending", "leased")),
                     timeout=60, what="the worker to run every ready job")
    finally:
        worker.stop()
        thread.join(timeout=60)
    assert not thread.is_alive()


@pytest.mark.parametrize("name, value, for_role", [
    ("default_transaction_isolation", "repeatable read", False),
    ("default_transaction_isolation", "serializable", True),
    ("search_path", "public", False),
    ("search_path", "", True),
    ("lock_timeout", "200ms", False),
    ("idle_in_transaction_session_timeout", "500ms", True),
    ("statement_timeout", "1s", False),
])
def test_every_path_works_with_the_setting(bed: Bed, empty_dsn: str, name: str, value: str,
                                           for_role: bool) -> None:
    """Set before the schema is installed: the migration runs under it too."""
    _set(bed, empty_dsn, name, value, for_role=for_role)
    pgqueue.migrate(empty_dsn)
    _every_path(empty_dsn)


def test_a_short_statement_timeout_lets_migrations_run_and_names_itself(
        bed: Bed, empty_dsn: str) -> None:
    """50 ms for the database: the install and every ordinary path still run (a migration
    sets no limit of its own session), and a call held up past it is refused with an error
    that names statement_timeout, having written nothing."""
    _set(bed, empty_dsn, "statement_timeout", "50ms")
    pgqueue.migrate(empty_dsn)
    pgqueue.migrate(empty_dsn)
    with pgqueue.Queue(empty_dsn) as q:
        job = q.enqueue(b"held")
        (held,) = q.lease(1)
        with psycopg.connect(empty_dsn) as blocker:
            blocker.execute("SET statement_timeout = 0")
            blocker.execute("SELECT 1 FROM pgqueue.job WHERE id = %s FOR UPDATE", (job,))
            with pytest.raises(pgqueue.Contention, match="statement_timeout") as raised:
                q.ack(held)
            assert "nothing was written" in str(raised.value)
        q.ack(held)  # once the row is free
        assert q.job(job) is None


def test_a_short_lock_timeout_names_itself(bed: Bed, dsn: str) -> None:
    _set(bed, dsn, "lock_timeout", "20ms", for_role=True)
    with pgqueue.Queue(dsn) as q:
        job = q.enqueue(b"held")
        (held,) = q.lease(1)
        with psycopg.connect(dsn) as blocker:
            blocker.execute("SET lock_timeout = 0")
            blocker.execute("SELECT 1 FROM pgqueue.job WHERE id = %s FOR UPDATE", (job,))
            with pytest.raises(pgqueue.Contention, match="lock_timeout"):
                q.ack(held)
        q.ack(held)


def test_an_idle_transaction_past_its_timeout_names_it(bed: Bed, dsn: str) -> None:
    _set(bed, dsn, "idle_in_transaction_session_timeout", "100ms")
    with pgqueue.Queue(dsn) as q, psycopg.connect(dsn) as mine:
        mine.execute("SELECT 1")  # the transaction begins, and idles
        pid = mine.info.backend_pid
        with connection.connect(dsn) as watch:
            wait_for(lambda: watch.execute("SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity"
                                           " WHERE pid = %s)", (pid,)).fetchone() == (True,),
                     timeout=30, what="the server to end the idle transaction's session")
        with pytest.raises(pgqueue.ConnectionFailed,
                           match="idle_in_transaction_session_timeout"):
            q.enqueue(b"late", conn=mine)
        assert not q.jobs()


def test_behind_a_pooler_a_repeatable_read_default_fails_naming_the_setting(
        bed: Bed, dsn: str, pooled_dsn: str) -> None:
    """Behind a pooler pgqueue makes no session setting (it would stay on a server connection
    others get), so the server's default applies: a lease of a kind with limits refuses it,
    naming default_transaction_isolation; the rest runs."""
    _set(bed, dsn, "default_transaction_isolation", "repeatable read")
    with pgqueue.Queue(pooled_dsn) as q:
        q.enqueue_many([pgqueue.NewJob(b"x", kind="free") for _ in range(5)])
        assert len(q.lease(5)) == 5
        q.configure_kind("limited", max_concurrency=1)
        with pytest.raises(pgqueue.PgQueueError, match="default_transaction_isolation"):
            q.lease(1)
    found = {f.name: f for f in check.check(pooled_dsn)}
    assert found["default_transaction_isolation"].verdict == "fail"
    assert found["pooler"].value == "between"


def _db_check(dsn: str, *args: str) -> tuple[int, dict[str, dict[str, str]]]:
    done = subprocess.run([sys.executable, "-m", "pgqueue", "--dsn", dsn, "db", "check",
                           "--json", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=60, env={**os.environ})
    return done.returncode, {f["name"]: f for f in json.loads(done.stdout or "[]")}


def test_db_check_says_each_setting_with_a_verdict(bed: Bed, dsn: str) -> None:
    code, found = _db_check(dsn)
    assert code == 0, found
    assert set(found) >= {"server version", "pgqueue schema", "jit", "statement_timeout",
                          "lock_timeout", "idle_in_transaction_session_timeout",
                          "default_transaction_isolation", "search_path", "wal_level",
                          "pooler", "max_connections"}
    assert all(f["verdict"] in check.VERDICTS for f in found.values())
    assert found["pgqueue schema"]["value"] == f"revision {connection.SCHEMA_REVISION}"
    _set(bed, dsn, "statement_timeout", "50ms")
    _set(bed, dsn, "default_transaction_isolation", "serializable")
    code, found = _db_check(dsn)
    assert code == 0  # warnings only
    assert found["statement_timeout"]["verdict"] == "warn"
    assert "50ms" in found["statement_timeout"]["value"]
    assert found["default_transaction_isolation"]["verdict"] == "warn"
    code, found = _db_check(dsn, "--expect-connections", "100000")
    assert code == 1 and found["max_connections"]["verdict"] == "fail", found


def test_db_check_fails_a_database_without_the_schema(empty_dsn: str) -> None:
    done = subprocess.run([sys.executable, "-m", "pgqueue", "--dsn", empty_dsn, "db", "check"],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    line = next(x for x in done.stdout.splitlines() if "pgqueue schema" in x)
    assert line.startswith("fail") and "pgqueue db upgrade" in line


def test_the_check_s_rules() -> None:
    """judge alone, on what a server could say: an old server, JIT before the fix, logical
    replicas without logical WAL."""
    server = {"version_num": 120000, "version": "12.1", "jit": "on", "jit_available": True,
              "jit_above_cost": 100000.0, "jit_inline_above_cost": 500000.0,
              "jit_optimize_above_cost": 500000.0, "statement_timeout": "0",
              "lock_timeout": "0", "idle_in_transaction_session_timeout": "0",
              "idle_session_timeout": "10min", "timeouts_ms": {"idle_session_timeout": 600000},
              "default_transaction_isolation": "read committed", "search_path": "public",
              "wal_level": "replica", "max_connections": 100, "reserved_connections": 3,
              "connections": 90}
    schema = {"revision": "0020", "logical_replicas": 1, "live_workers": 2, "live_slots": 8}
    found = {f.name: f for f in check.judge(server, schema, pooled=False)}
    assert found["server version"].verdict == "fail"
    assert found["jit"].verdict == "fail" and "0021" in found["jit"].why
    assert found["wal_level"].verdict == "fail"
    assert found["idle_session_timeout"].verdict == "warn"
    assert found["max_connections"].verdict == "warn"
    assert found["pgqueue schema"].verdict == "fail"

