"""Least privilege (pgqueue/sql/access.sql): each pgqueue role can make every call it is meant
to and no other, no role writes a table or the op log except through the transitions, a
refused call names the role it needs, and a transition's arguments or the caller's session
cannot steer it into another schema or another clock.

Login roles holding each pgqueue role (tests/logins.py) connect to a fresh database; the state
each call needs is prepared by the owner first.
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg import sql as pg_sql
from psycopg.types.json import Jsonb

import pgqueue
from pgqueue.client import settle
from pgqueue.db import connection, queries
from pgqueue.maintenance import maintain
from pgqueue.runtime import registry
from tests.dbhelp import op_counts, register_etl_step_sets, state_snapshot
from tests.logins import LEVELS, Logins

Call = Callable[[pgqueue.Queue, dict[str, Any]], object]
PASSWORD = "pw-0123456789"  # noqa: S105  (a test server's, trust on loopback)


@dataclass(frozen=True)
class Case:
    """A public call, the lowest pgqueue role that may make it, and the state it needs."""

    name: str
    needs: str
    call: Call


H1, H2 = "access-one", "access-two"


def _app() -> pgqueue.App:
    """An App whose step job the worker registers and a deploy check reads against."""
    app = pgqueue.App()
    etl = app.step_job("etl", max_concurrency=2)

    @etl.step("a")
    def a(ctx: Any) -> None:
        """Nothing: the step list is what is registered."""

    @app.job("k")
    def k(ctx: Any) -> None:
        """Nothing."""

    return app


def _prepare(q: pgqueue.Queue, dsn: str) -> dict[str, Any]:
    """What the calls act on, made by the owner: a pending job, a leased one, a dead one, a
    quarantined one (released by an operator), a step job parked because its step set
    changed (rewound, skipped or accepted by an operator), a schedule."""
    ctx: dict[str, Any] = {"pending": q.enqueue(b"p", kind="k")}
    register_etl_step_sets(dsn, H1, H2)
    step_job = q.enqueue(b"s", kind="etl", priority=250)
    (held,) = q.lease(1, visibility_timeout=60)
    assert held.job_id == step_job
    q.renew(held, checkpoint=pgqueue.Checkpoint(last_completed_step="a", cursor_step="b",
                                                 step_set_hash=H1))
    with q.connection() as conn:
        queries.scalar(conn, "mark_undecodable", {
            "stream": held.stream, "job_id": step_job, "lease_id": held.lease_id,
            "reason": "step_set_changed",
            "detail": Jsonb({"old_hash": H1, "new_hash": H2})})
    ctx["step_parked"] = step_job
    dead = q.enqueue(b"d", kind="k", max_attempts=1, priority=200)
    (lease,) = q.lease(1, visibility_timeout=60)
    assert lease.job_id == dead
    q.nack(lease, error="boom")
    ctx["dead"] = dead
    ctx["parked"] = q.enqueue(b"u", kind="k", priority=150)
    (parked,) = q.lease(1, visibility_timeout=60)
    with q.connection() as conn:
        queries.scalar(conn, "mark_undecodable", {"stream": parked.stream, "job_id": parked.job_id,
                                                  "lease_id": parked.lease_id,
                                                  "reason": "unknown_kind", "detail": Jsonb({})})
    ctx["leased_job"] = q.enqueue(b"l", kind="k", priority=100)
    (held,) = q.lease(1, visibility_timeout=60)
    ctx["lease"] = held
    q.upsert_schedule("nightly", "0 3 * * *", payload=b"n")
    return ctx


CASES = [
    # reader: the state, stats, history, metrics
    Case("job", "reader", lambda q, c: q.job(c["pending"])),
    Case("jobs", "reader", lambda q, c: q.jobs(all_streams=True)),
    Case("stats", "reader", lambda q, c: q.stats()),
    Case("history", "reader", lambda q, c: q.history(c["pending"])),
    Case("op_log", "reader", lambda q, c: q.op_log(limit=5)),
    Case("dead_letters", "reader", lambda q, c: q.dead_letters()),
    Case("kinds", "reader", lambda q, c: q.kinds()),
    Case("schedules", "reader", lambda q, c: q.schedules()),
    Case("gauges", "reader", lambda q, c: q.gauges()),
    Case("workers", "reader", lambda q, c: q.workers()),
    Case("replicas", "reader", lambda q, c: q.replicas()),
    Case("throughput", "reader", lambda q, c: q.throughput()),
    Case("count_jobs", "reader", lambda q, c: q.count_jobs(state="pending")),
    Case("jobs_page", "reader", lambda q, c: q.jobs_page(state="pending")),
    Case("jobs_preview", "reader", lambda q, c: q.jobs_preview(all_streams=True)),
    Case("dead_letters_preview", "reader", lambda q, c: q.dead_letters_preview()),
    Case("op_log_preview", "reader", lambda q, c: q.op_log_preview(limit=5)),
    Case("schedule_streams", "reader", lambda q, c: q.schedule_streams("nightly")),
    Case("deploy_check", "reader", lambda q, c: q.deploy_check(_app())),
    Case("deploy_streams", "reader", lambda q, c: q.deploy_streams(_app())),
    # producer
    Case("enqueue", "producer", lambda q, c: q.enqueue(b"x", kind="k")),
    Case("enqueue_many", "producer", lambda q, c: q.enqueue_many([pgqueue.NewJob(b"y")])),
    # worker
    Case("lease", "worker", lambda q, c: q.lease(1)),
    Case("renew", "worker", lambda q, c: q.renew(c["lease"])),
    Case("ack", "worker", lambda q, c: q.ack(c["lease"])),
    Case("nack", "worker", lambda q, c: q.nack(c["lease"], error="x")),
    Case("return_lease", "worker", lambda q, c: q.return_lease(c["lease"])),
    Case("reclaim_expired", "worker", lambda q, c: q.reclaim_expired()),
    Case("tick_schedules", "worker", lambda q, c: q.tick_schedules()),
    Case("configure_kind", "worker", lambda q, c: q.configure_kind("k", max_concurrency=3)),
    Case("register", "worker", lambda q, c: _with_conn(q, lambda conn: registry.register(
        conn, node=1, streams=["default"], concurrency=1))),
    Case("maintenance pass", "worker", lambda q, c: _with_conn(q, maintain.run_pass)),
    Case("ack_many", "worker", lambda q, c: q.ack_many([c["lease"]])),
    Case("renew_many", "worker", lambda q, c: q.renew_many([(c["lease"], None, None)])),
    Case("end as cancelled", "worker", lambda q, c: _with_conn(
        q, lambda conn: settle.end_cancelled(conn, c["lease"]))),
    Case("mark undecodable", "worker", lambda q, c: _with_conn(q, lambda conn: queries.scalar(
        conn, "mark_undecodable", {"stream": c["lease"].stream, "job_id": c["lease"].job_id,
                                   "lease_id": c["lease"].lease_id,
                                   "reason": "unknown_kind", "detail": Jsonb({})}))),
    Case("upcast", "worker", lambda q, c: _with_conn(q, lambda conn: queries.scalar(
        conn, "upcast_job", {"stream": c["lease"].stream, "job_id": c["lease"].job_id,
                             "lease_id": c["lease"].lease_id,
                             "payload": b"v2", "schema_version": 2}))),
    Case("register handlers", "worker", lambda q, c: _with_conn(
        q, lambda conn: registry.register_handlers(conn, _app(), ["default"]))),
    Case("deregister", "worker", lambda q, c: _with_conn(
        q, lambda conn: registry.deregister(conn, 1))),
    Case("heartbeat", "worker", lambda q, c: _with_conn(
        q, lambda conn: registry.heartbeat(conn, 1))),
    Case("job_preview", "reader", lambda q, c: q.job_preview(c["pending"], preview_bytes=4)),
    Case("step_list", "reader", lambda q, c: q.step_list("nohash")),
    Case("schedule", "reader", lambda q, c: q.schedule("nightly")),
    # operator
    Case("release", "operator", lambda q, c: q.release(c["parked"])),
    Case("resume_schedule", "operator", lambda q, c: q.resume_schedule("nightly")),
    Case("cancel", "operator", lambda q, c: q.cancel(c["pending"])),
    Case("cancel running", "operator", lambda q, c: q.cancel(c["leased_job"])),
    Case("requeue_dead_letter", "operator", lambda q, c: q.requeue_dead_letter(c["dead"])),
    Case("restart", "operator", lambda q, c: q.restart(c["pending"])),
    Case("rewind", "operator", lambda q, c: q.rewind(c["step_parked"], "a")),
    Case("skip_step", "operator", lambda q, c: q.skip_step(c["step_parked"])),
    Case("accept_step_set", "operator", lambda q, c: q.accept_step_set(c["step_parked"])),
    Case("act", "operator", lambda q, c: q.act(c["pending"], "restart")),
    Case("act_on_jobs", "operator", lambda q, c: q.act_on_jobs("restart", state="pending")),
    Case("configure_stream", "operator", lambda q, c: q.configure_stream(retry_base=2.0)),
    Case("upsert_schedule", "operator", lambda q, c: q.upsert_schedule("hourly", "0 * * * *")),
    Case("pause_schedule", "operator", lambda q, c: q.pause_schedule("nightly")),
    Case("remove_schedule", "operator", lambda q, c: q.remove_schedule("nightly")),
]


def _with_conn(q: pgqueue.Queue, fn: Callable[[queries.Conn], object]) -> object:
    with q.connection() as conn:
        return fn(conn)


@pytest.mark.parametrize("who", LEVELS[1:])
def test_each_role_makes_its_calls_and_is_refused_the_others_naming_the_role(
        q: pgqueue.Queue, dsn: str, logins: Logins, who: str) -> None:
    for i, case in enumerate(CASES):
        stream = f"case{i}"  # each case its own stream: what one did is no other's concern
        ctx = _prepare(q.for_stream(stream), dsn)
        before = state_snapshot(dsn), op_counts(dsn)
        with pgqueue.Queue(logins.dsn(dsn, who), stream=stream) as mine:
            if logins.allowed(who, case.needs):
                case.call(mine, ctx)  # runs as it does for the owner
                continue
            with pytest.raises(pgqueue.PermissionDenied) as refused:
                case.call(mine, ctx)
        needed = f"pgqueue_{case.needs}"
        assert refused.value.role == needed, (case.name, str(refused.value))
        assert f"that needs the pgqueue role {needed}" in str(refused.value), case.name
        assert f"pgqueue db grant {needed} --to {logins.names[who]}" in str(refused.value)
        assert (state_snapshot(dsn), op_counts(dsn)) == before, f"{case.name} changed state"


def test_a_login_holding_no_pgqueue_role_cannot_even_open_a_queue(
        dsn: str, logins: Logins) -> None:
    with pytest.raises(pgqueue.PermissionDenied) as refused:
        pgqueue.Queue(logins.dsn(dsn, "none")).stats()
    assert refused.value.role == "pgqueue_reader"
    assert f"pgqueue db grant pgqueue_reader --to {logins.names['none']}" in str(refused.value)


TABLES = ("job", "op_log", "dead_letter", "schedule")
WRITES = {
    "INSERT": "INSERT INTO pgqueue.{} SELECT * FROM pgqueue.{} LIMIT 1",
    "UPDATE": "UPDATE pgqueue.{} SET stream = stream",
    "DELETE": "DELETE FROM pgqueue.{}",
}


@pytest.mark.parametrize("who", LEVELS[1:])
def test_no_role_writes_a_table_directly(q: pgqueue.Queue, dsn: str, logins: Logins,
                                         who: str) -> None:
    _prepare(q, dsn)
    before = state_snapshot(dsn), op_counts(dsn)
    with connection.connect(logins.dsn(dsn, who)) as conn:
        for table in TABLES:
            assert conn.execute(pg_sql.SQL("SELECT count(*) FROM pgqueue.{}").format(
                pg_sql.Identifier(table))).fetchone() is not None  # reading is fine
            for what, template in WRITES.items():
                stmt = pg_sql.SQL(template.replace("{}", "{t}")).format(t=pg_sql.Identifier(table))
                with pytest.raises(psycopg.errors.InsufficientPrivilege,
                                   match=f"permission denied for table {table}"):
                    conn.execute(stmt)
                assert what  # each of the three refused
    assert (state_snapshot(dsn), op_counts(dsn)) == before


@pytest.mark.parametrize("helper", [
    "SELECT pgqueue.apply_op('Ack', 'default', %(job)s, NULL, '{}')",
    "SELECT pgqueue.bury('default', %(job)s, 1, 'x', now(), '{}', 'x')",
    "SELECT pgqueue.finish_cancel(j, 'handler') FROM pgqueue.job j WHERE j.id = %(job)s",
    "SELECT pgqueue.save_kind_config(NULL::pgqueue.kind_config)",
    "SELECT pgqueue.set_role('replica')",
    "SELECT pgqueue.ingest_ops('[]')",
])
def test_internal_helpers_are_the_owners_alone(q: pgqueue.Queue, dsn: str, logins: Logins,
                                               helper: str) -> None:
    job_id = q.enqueue(b"x")
    before = state_snapshot(dsn), op_counts(dsn)
    with connection.connect(logins.dsn(dsn, "operator")) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege,
                           match="permission denied for function"):
            conn.execute(helper, {"job": job_id})
    assert (state_snapshot(dsn), op_counts(dsn)) == before


def test_a_reader_cannot_call_a_transition_from_sql(q: pgqueue.Queue, dsn: str,
                                                    logins: Logins) -> None:
    job_id = q.enqueue(b"x")
    with connection.connect(logins.dsn(dsn, "reader")) as conn:
        for stmt in ("SELECT pgqueue.cancel(%s)", "SELECT * FROM pgqueue.release(%s)",
                     "SELECT * FROM pgqueue.lease('default', 1, 1000, 0, 0)"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(stmt, [job_id] if "%s" in stmt else None)
    assert q.job(job_id) is not None


def test_every_function_a_role_may_call_runs_as_the_owner_with_a_pinned_path(dsn: str) -> None:
    """The catalog: a function granted to a pgqueue role that reaches a table is SECURITY
    DEFINER with search_path pinned; no function is PUBLIC's; the rest are the owner's."""
    with connection.connect(dsn) as conn:
        rows = conn.execute("""
            SELECT p.proname, p.prosecdef, p.proconfig,
                   array(SELECT r FROM unnest(ARRAY['pgqueue_reader', 'pgqueue_producer',
                                                    'pgqueue_worker', 'pgqueue_operator']) r
                         WHERE has_function_privilege(r, p.oid, 'EXECUTE')) AS roles,
                   EXISTS (SELECT 1 FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
                           WHERE a.grantee = 0) AS public
            FROM pg_proc p WHERE p.pronamespace = 'pgqueue'::regnamespace""").fetchall()
    helpers = {"to_ms", "from_ms", "now_ms", "pinned_now", "b64", "unb64", "op_body",
               "error_summary", "verb_states", "job_verbs"}
    assert rows
    for name, definer, config, roles, public in rows:
        assert not public, f"{name} is executable by PUBLIC"
        if roles and name not in helpers:
            assert definer, f"{name} is granted to {roles} but runs as its caller"
            # (planner settings may follow: pgqueue.lease's plans must not hang on statistics,
            # and with a plan method off, no JIT: test_stock_server.py)
            assert config and config[0] == "search_path=pg_catalog, pgqueue, pg_temp", (name, config)
            assert all((c.startswith("enable_") and c.endswith("=off")) or c == "jit=off"
                       for c in config[1:]), (name, config)
        if name in helpers:
            assert not definer, f"{name} needs no owner's rights"
    granted = {name for name, _d, _c, roles, _p in rows if roles}
    assert {"enqueue", "lease", "ack", "cancel", "prune_op_log"} <= granted
    assert not {"apply_op", "save_job", "bury", "finish_cancel", "seed_rows", "set_role",
                "ingest_ops"} & granted


# -- the arguments and the session cannot steer a transition --------------------------------------


def test_names_with_quotes_stay_data(q: pgqueue.Queue, dsn: str, logins: Logins) -> None:
    stream = "x'); DROP TABLE pgqueue.job; --\"pgqueue\".\"op_log\""
    with pgqueue.Queue(logins.dsn(dsn, "producer"), stream=stream) as producer:
        job_id = producer.enqueue(b"payload'; DELETE FROM pgqueue.op_log; --", kind="k'\"")
    info = q.job(job_id)
    assert info is not None and info.stream == stream and info.kind == "k'\""
    assert op_counts(dsn)["Enqueue"] == 1


def test_a_callers_search_path_cannot_reach_into_a_transition(
        q: pgqueue.Queue, dsn: str, bed: Any, logins: Logins) -> None:
    """A role with a schema of its own shadows what a transition calls (now, hashtext, =
    on bigint, a table named job) and puts that schema first on its search_path: the
    transitions, which run with the owner's rights, use none of it."""
    login = logins.names["operator"]
    with connection.connect(dsn) as owner:  # the test database's owner gives it a schema
        owner.execute(pg_sql.SQL("CREATE SCHEMA evil AUTHORIZATION {}").format(
            pg_sql.Identifier(login)))
    with connection.connect(logins.dsn(dsn, "operator")) as conn:
        conn.execute("""
            CREATE FUNCTION evil.now() RETURNS timestamptz LANGUAGE plpgsql
                AS $$ BEGIN RAISE EXCEPTION 'hijacked: now'; END $$;
            CREATE FUNCTION evil.hashtext(text) RETURNS int LANGUAGE plpgsql
                AS $$ BEGIN RAISE EXCEPTION 'hijacked: hashtext'; END $$;
            CREATE FUNCTION evil.eq(bigint, bigint) RETURNS boolean LANGUAGE plpgsql
                AS $$ BEGIN RAISE EXCEPTION 'hijacked: ='; END $$;
            CREATE OPERATOR evil.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = evil.eq);
            CREATE TABLE evil.job (id bigint);
            CREATE TEMP TABLE job (id bigint);
            SET search_path = evil, pg_temp, pg_catalog, pgqueue, public;
        """)
        # the shadows are real: a helper that runs as its caller (now_ms) is caught by them
        with pytest.raises(psycopg.errors.RaiseException, match="hijacked: now"):
            conn.execute("SELECT pgqueue.now_ms()")
        job_id = conn.execute(
            "SELECT pgqueue.enqueue_one('default', 'x'::bytea, 'k', 0, NULL, NULL, NULL, NULL, NULL)"
        ).fetchone()
        leased = conn.execute("SELECT id, lease_id FROM pgqueue.lease('default', 1, 60000, 0, 0)"
                              ).fetchall()
        assert len(leased) == 1
        conn.execute("SELECT pgqueue.cancel(%s)", [leased[0][0]])
        conn.execute("SELECT * FROM pgqueue.nack(%s, %s, 'x', 0)", leased[0])
    assert job_id is not None
    assert op_counts(dsn) == {"Enqueue": 1, "Lease": 1, "RequestCancel": 1, "Cancel": 1}
    assert q.job(leased[0][0]) is None  # the nack of a job asked to stop ended it
    with connection.connect(dsn) as owner:
        owner.execute("DROP SCHEMA evil CASCADE")


def test_only_the_owner_may_pin_the_transitions_clock(q: pgqueue.Queue, dsn: str,
                                                      logins: Logins) -> None:
    job_id = q.enqueue(b"x")
    (lease,) = q.lease(1, visibility_timeout=60)
    far = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=365)).isoformat()
    with connection.connect(logins.dsn(dsn, "operator")) as conn:
        conn.execute("SELECT set_config('pgqueue.now', %s, false)", [far])
        with pytest.raises(psycopg.errors.InsufficientPrivilege,
                           match="only the pgqueue schema's owner may pin the clock"):
            conn.execute("SELECT * FROM pgqueue.reclaim_expired_jobs()")
    info = q.job(job_id)
    assert info is not None and info.state == "leased" and info.lease_id == lease.lease_id


def test_db_grant_gives_a_login_its_role(dsn: str, bed: Any, logins: Logins) -> None:
    from pgqueue.db import access

    name = logins.names["none"] + "_g"
    with connection.connect(bed.server_dsn) as conn:
        conn.execute(pg_sql.SQL("DROP ROLE IF EXISTS {}").format(pg_sql.Identifier(name)))
        conn.execute(pg_sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
            pg_sql.Identifier(name), pg_sql.Literal(logins.password)))
    try:
        assert access.grant(dsn, "producer", name) == f'GRANT "pgqueue_producer" TO "{name}";'
        from psycopg.conninfo import make_conninfo
        with pgqueue.Queue(make_conninfo(dsn, user=name, password=logins.password)) as mine:
            assert mine.enqueue(b"granted") > 0
            with pytest.raises(pgqueue.PermissionDenied):
                mine.lease(1)
    finally:
        with connection.connect(bed.server_dsn) as conn:
            conn.execute(pg_sql.SQL("DROP ROLE {}").format(pg_sql.Identifier(name)))
    with pytest.raises(ValueError, match="role must be one of"):
        access.grant(dsn, "superuser", name)
    with pytest.raises(ValueError, match="login must be a role name"):
        access.grant(dsn, "reader", "")


# -- an owner that is not a superuser, on a server without the roles yet --------------------------


def test_a_non_superuser_owner_migrates_once_an_administrator_made_the_roles(
        tmp_path: Any) -> None:
    """On a server of its own (its roles are the server's): an owner without CREATEROLE is
    stopped before anything is written, told the statements to run; once an administrator ran
    them, it migrates, grants the roles, and its transitions run for a worker login; a second
    database of the server migrates with the roles already there."""
    from psycopg.conninfo import make_conninfo

    from pgqueue.db import schema
    from pgqueue.db.embedded import EmbeddedServer

    server = EmbeddedServer(tmp_path / "pg", settings={"fsync": "off"})
    admin = server.start()
    try:
        with connection.connect(admin) as conn:
            for login, extra in (("owner", "CREATEDB"), ("jobs", "")):
                conn.execute(pg_sql.SQL("CREATE ROLE {} LOGIN {} PASSWORD {}").format(
                    pg_sql.Identifier(login), pg_sql.SQL(extra), pg_sql.Literal(PASSWORD)))
            conn.execute("CREATE DATABASE app OWNER owner")
            conn.execute("CREATE DATABASE other OWNER owner")
        owner = make_conninfo(admin, dbname="app", user="owner", password=PASSWORD)
        with pytest.raises(pgqueue.PermissionDenied) as refused:
            schema.upgrade(owner)
        assert "may not create them" in str(refused.value)
        assert "CREATE ROLE pgqueue_reader NOLOGIN" in str(refused.value)  # the hint
        assert schema.current(owner) is None  # nothing was written
        with connection.connect(admin) as conn:  # what the hint says, run by an administrator
            for role in ("reader", "producer", "worker", "operator"):
                conn.execute(pg_sql.SQL("CREATE ROLE {} NOLOGIN").format(
                    pg_sql.Identifier(f"pgqueue_{role}")))
            conn.execute("GRANT pgqueue_reader TO pgqueue_producer")
            conn.execute("GRANT pgqueue_producer TO pgqueue_worker")
            conn.execute("GRANT pgqueue_worker TO pgqueue_operator")
            for role in ("reader", "producer", "worker", "operator"):
                conn.execute(pg_sql.SQL("GRANT {} TO owner WITH ADMIN OPTION").format(
                    pg_sql.Identifier(f"pgqueue_{role}")))
        schema.upgrade(owner)
        schema.upgrade(make_conninfo(admin, dbname="other", user="owner", password=PASSWORD))
        from pgqueue.db import access
        access.grant(owner, "worker", "jobs")
        with pgqueue.Queue(make_conninfo(owner, user="jobs")) as worker:
            job_id = worker.enqueue(b"x")
            (lease,) = worker.lease(1)
            worker.ack(lease)
            assert worker.history(job_id) is not None
            with pytest.raises(pgqueue.PermissionDenied, match="pgqueue_operator"):
                worker.cancel(job_id)
    finally:
        server.stop("immediate")


# -- more calls, and the async API, under the roles ------------------------------------------------


def test_a_login_without_a_pgqueue_role_is_told_what_its_call_needs(
        q: pgqueue.Queue, dsn: str, logins: Logins) -> None:
    with pytest.raises(pgqueue.PermissionDenied) as refused:
        with pgqueue.Queue(logins.dsn(dsn, "none")) as nobody:
            nobody.enqueue(b"x")
    assert refused.value.role in ("pgqueue_reader", "pgqueue_producer")  # opening reads first


def test_a_producer_may_not_prune_the_op_log_nor_a_worker_choose_its_bounds(
        q: pgqueue.Queue, dsn: str, logins: Logins) -> None:
    from pgqueue.replicas import replica

    q.enqueue(b"x")
    before = op_counts(dsn)
    with connection.connect(logins.dsn(dsn, "worker")) as conn:
        with pytest.raises(pgqueue.PermissionDenied) as refused:
            replica.prune_batches(conn, keep=0, stale_after=0, batch=100, wait=0)
        assert refused.value.role == "pgqueue_operator"
        # the maintenance passes' own bounds (a week) are a worker's: nothing that young goes
        assert replica.prune_old_batches(conn, batch=100) == 0
    assert op_counts(dsn) == before
    with connection.connect(logins.dsn(dsn, "operator")) as conn:
        assert replica.prune_batches(conn, keep=0, stale_after=0, batch=100, wait=0) >= 1


@pytest.mark.parametrize("who", LEVELS[1:])
def test_no_role_moves_a_sequence(dsn: str, logins: Logins, who: str) -> None:
    with connection.connect(logins.dsn(dsn, who)) as conn:
        for seq in ("job_id_seq", "lease_id_seq", "op_log_seq_seq"):
            for stmt in ("SELECT nextval({})", "SELECT setval({}, 1)"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(pg_sql.SQL(stmt).format(pg_sql.Literal(f"pgqueue.{seq}")))


def test_the_async_api_under_the_roles(dsn: str, logins: Logins) -> None:
    import asyncio

    async def main() -> None:
        async with pgqueue.AsyncQueue(logins.dsn(dsn, "producer")) as producer:
            job_id = await producer.enqueue(b"x")
            assert (await producer.job(job_id)) is not None
            with pytest.raises(pgqueue.PermissionDenied) as refused:
                await producer.lease(1)
            assert refused.value.role == "pgqueue_worker"
        async with pgqueue.AsyncQueue(logins.dsn(dsn, "worker")) as worker:
            (lease,) = await worker.lease(1)
            await worker.ack(lease)
            with pytest.raises(pgqueue.PermissionDenied, match="pgqueue_operator"):
                await worker.configure_stream(retry_base=1.0)

    asyncio.run(main())


def test_the_owners_clock_is_the_owners(q: pgqueue.Queue, dsn: str, logins: Logins) -> None:
    """A cron tick for a given time pins the clock: the owner's (tests, a controlled pass)."""
    q.upsert_schedule("nightly", "0 3 * * *")
    with pgqueue.Queue(logins.dsn(dsn, "operator")) as operator:
        with pytest.raises(pgqueue.PermissionDenied, match="only the pgqueue schema's owner"):
            operator.tick_schedules(now=dt.datetime(2100, 1, 1, tzinfo=dt.timezone.utc))
        assert operator.tick_schedules().fired == 0  # by the database's clock: not due


def test_a_dashboard_whose_role_may_not_act_says_which_role_it_needs(
        q: pgqueue.Queue, dsn: str, logins: Logins) -> None:
    """An admin token on a dashboard that connects as a reader: the action is refused with
    403 and the role it needs, on the API and on the page, and the job is untouched."""
    from tests.integration.dashboard.dashboard_help import BEARER, dashboard

    job_id = q.enqueue(b"x")
    with dashboard(logins.dsn(dsn, "reader")) as client:
        answer = client.post(f"/api/jobs/{job_id}/cancel", headers=BEARER)
        assert answer.status_code == 403, answer.text
        assert "pgqueue_operator" in answer.json()["error"]
        assert "permission denied for table" not in answer.text
        page = client.post(f"/jobs/{job_id}/cancel", headers=BEARER)
        assert page.status_code == 403, page.text
        assert "pgqueue_operator" in page.text
    info = q.job(job_id)
    assert info is not None and info.state == "pending"


# -- what a role's own calls may not do, found by an adversarial review ---------------------------


def test_a_worker_cannot_upcast_past_the_streams_payload_limit(
        q: pgqueue.Queue, dsn: str, logins: Logins) -> None:
    q.configure_stream(max_payload_bytes=64)
    job_id = q.enqueue(b"small", schema_version=1)
    with connection.connect(logins.dsn(dsn, "worker")) as conn:
        (leased,) = conn.execute("SELECT id, lease_id FROM pgqueue.lease('default', 1, 60000, 0, 0)"
                                 ).fetchall()
        with pytest.raises(psycopg.Error, match="upcast payload is 65 bytes, over the limit of "
                                                "64 bytes of stream default"):
            conn.execute("SELECT pgqueue.upcast(%s, %s, %s, 2)", [*leased, b"x" * 65])
        assert conn.execute("SELECT pgqueue.upcast(%s, %s, %s, 2)",
                            [*leased, b"x" * 64]).fetchone() == (True,)
    info = q.job(job_id)
    assert info is not None and info.payload == b"x" * 64


def test_no_lease_is_granted_or_renewed_without_an_expiry(
        q: pgqueue.Queue, dsn: str, logins: Logins) -> None:
    """A NULL visibility would leave a lease that never expires, so never reclaimed."""
    job_id = q.enqueue(b"x")
    with connection.connect(logins.dsn(dsn, "worker")) as conn:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="visibility"):
            conn.execute("SELECT * FROM pgqueue.lease('default', 1, NULL, 0, 0)")
        (leased,) = conn.execute("SELECT id, lease_id FROM pgqueue.lease('default', 1, 60000, 0, 0)"
                                 ).fetchall()
        for visibility in ([None], [-1], []):
            with pytest.raises(psycopg.errors.InvalidParameterValue, match="visibility"):
                conn.execute("SELECT * FROM pgqueue.renew(%s, %s, %s::bigint[], ARRAY[NULL]::jsonb[])",
                             [[leased[0]], [leased[1]], visibility])
    info = q.job(job_id)
    assert info is not None and info.lease_expires_at is not None


def test_no_login_can_hold_a_limited_kinds_lock(q: pgqueue.Queue, dsn: str,
                                                logins: Logins) -> None:
    """The kind's lock is its settings row's: a login holding the advisory key the lease once
    used stalls nothing, and no role may lock the row (that needs UPDATE on the table)."""
    q.configure_kind("mail", max_concurrency=5)
    ids = q.enqueue_many([pgqueue.NewJob(b"m", kind="mail") for _ in range(3)])
    with connection.connect(logins.dsn(dsn, "none")) as squatter, \
            connection.connect(logins.dsn(dsn, "operator")) as operator:
        squatter.execute("SELECT pg_advisory_lock(hashtext('pgqueue.kind'), "
                         "hashtext('default/mail'))")
        squatter.execute("SELECT pg_advisory_lock(hashtext('pgqueue.kind_config'), "
                         "hashtext('default/mail'))")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            operator.execute("SELECT 1 FROM pgqueue.kind_config FOR KEY SHARE")
        operator.rollback()
        operator.execute("SET lock_timeout = '5s'")  # a stall would fail, not hang
        operator.execute("SELECT pgqueue.configure_kind_settings('default', 'mail', "
                         "'{\"max_concurrency\": 4}')")
        with pgqueue.Queue(logins.dsn(dsn, "worker")) as worker:
            assert sorted(held.job_id for held in worker.lease(5)) == ids
    (mail,) = [k for k in q.kinds() if k.kind == "mail"]
    assert mail.max_concurrency == 4


def test_no_login_can_stop_the_maintenance_passes(q: pgqueue.Queue, dsn: str,
                                                  logins: Logins) -> None:
    """The runners' election is a claim row only a worker's transition writes: a login
    holding the advisory key the election once used stops nothing, a reader may neither
    claim nor lock the row. One runner at a time; a runner that stops hands over at once."""
    with connection.connect(logins.dsn(dsn, "none")) as squatter, \
            connection.connect(logins.dsn(dsn, "reader")) as reader:
        squatter.execute("SELECT pg_advisory_lock(hashtext('pgqueue.maintenance'))")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            reader.execute("SELECT pgqueue.claim_maintenance(gen_random_uuid(), 60000)")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            reader.execute("SELECT 1 FROM pgqueue.maintenance_runner FOR KEY SHARE")
        first = maintain.Maintainer(logins.dsn(dsn, "worker"), interval=0.1)
        second = maintain.Maintainer(logins.dsn(dsn, "worker"), interval=0.1)
        try:
            assert first.tick() is not None and first.elected
            assert second.tick() is None and not second.elected  # one runner at a time
            assert first.tick() is not None  # its claim renewed
        finally:
            first._drop_connection()  # as run() does when it stops: the claim is given up
        try:
            assert second.tick() is not None and second.elected
        finally:
            second._drop_connection()
