"""Errors and bad input: every bad call raises a clear error naming the problem and changes
nothing; database-side problems raise PgQueueError subclasses with safe messages."""
from __future__ import annotations

import datetime as dt
import inspect
import math
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue import errors
from pgqueue.db import connection, run
from tests.pgbed import Bed

UNREACHABLE = "host=127.0.0.1 port=1 dbname=x user=u password=hunter2"
UNREACHABLE_URL = "postgresql://u:hunter2@127.0.0.1:1/x"


def totals(dsn: str) -> tuple[int, int, int]:
    """(jobs, dead letters, ops): what "changes nothing" compares."""
    with connection.connect(dsn) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM pgqueue.job), (SELECT count(*) FROM pgqueue.dead_letter),"
            " (SELECT count(*) FROM pgqueue.op_log)"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2])


@pytest.fixture(scope="module")
def shared_dsn(bed: Bed) -> Iterator[str]:
    """One database for the many bad-argument cases below: each compares before and after."""
    d = bed.new_database()
    yield d
    bed.drop(d)


@pytest.fixture(scope="module")
def shared_q(shared_dsn: str) -> Iterator[pgqueue.Queue]:
    with pgqueue.Queue(shared_dsn) as queue:
        queue.enqueue(b"already there")
        yield queue


# -- the error classes --------------------------------------------------------------------------


def test_every_error_class_derives_from_pgqueue_error() -> None:
    classes = [obj for _, obj in inspect.getmembers(errors, inspect.isclass)
               if issubclass(obj, Exception) and obj.__module__ == errors.__name__]
    assert pgqueue.PgQueueError in classes
    assert len(classes) >= 8
    for cls in classes:
        assert issubclass(cls, pgqueue.PgQueueError), cls
    for name in ("ConnectionFailed", "SchemaError", "SchemaMissing", "SchemaTooNew", "LeaseLost",
                 "JobNotFound", "DedupConflict", "NotLeader"):
        assert issubclass(getattr(pgqueue, name), pgqueue.PgQueueError), name
    assert issubclass(pgqueue.SchemaMissing, pgqueue.SchemaError)
    assert issubclass(pgqueue.SchemaTooNew, pgqueue.SchemaError)


# -- connection and schema ----------------------------------------------------------------------


@pytest.mark.parametrize("bad_dsn", [UNREACHABLE, UNREACHABLE_URL])
def test_unreachable_dsn_names_host_and_port_never_the_password(bad_dsn: str) -> None:
    with pytest.raises(pgqueue.ConnectionFailed) as caught:
        pgqueue.Queue(bad_dsn)
    message = str(caught.value)
    assert "127.0.0.1:1" in message
    assert "hunter2" not in message
    assert "hunter2" not in repr(caught.value)
    shown = "".join(traceback.format_exception(caught.type, caught.value, caught.tb))
    assert "hunter2" not in shown


def test_unreachable_dsn_on_direct_connect() -> None:
    with pytest.raises(pgqueue.ConnectionFailed) as caught:
        connection.connect(UNREACHABLE)
    assert "127.0.0.1:1" in str(caught.value)
    assert "hunter2" not in str(caught.value)


def test_migrate_on_an_unreachable_dsn_fails_cleanly() -> None:
    with pytest.raises(pgqueue.PgQueueError) as caught:
        pgqueue.migrate(UNREACHABLE)
    assert "127.0.0.1:1" in str(caught.value)
    assert "hunter2" not in str(caught.value)


def test_missing_schema_says_run_pgqueue_db_upgrade(empty_dsn: str) -> None:
    with pytest.raises(pgqueue.SchemaMissing, match="pgqueue db upgrade") as caught:
        pgqueue.Queue(empty_dsn)
    assert isinstance(caught.value, pgqueue.SchemaError)
    assert isinstance(caught.value, pgqueue.PgQueueError)
    # nothing was created behind the caller's back
    with connection.connect(empty_dsn) as conn:
        row = conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'pgqueue'").fetchone()
    assert row is not None and row[0] == 0


def test_newer_schema_is_refused(dsn: str) -> None:
    with connection.connect(dsn) as conn:
        conn.execute("UPDATE pgqueue.alembic_version SET version_num = '9999'")
    with pytest.raises(pgqueue.SchemaTooNew, match="9999") as caught:
        pgqueue.Queue(dsn)
    assert isinstance(caught.value, pgqueue.PgQueueError)
    assert "newer" in str(caught.value)


def test_older_schema_says_run_pgqueue_db_upgrade(dsn: str) -> None:
    with connection.connect(dsn) as conn:
        conn.execute("UPDATE pgqueue.alembic_version SET version_num = '0000'")
    with pytest.raises(pgqueue.SchemaMissing, match="pgqueue db upgrade"):
        pgqueue.Queue(dsn)


def test_a_statement_timeout_is_not_reported_as_a_lost_connection(q: pgqueue.Queue,
                                                                   dsn: str) -> None:
    """A query cancelled by the server (here: a statement timeout while waiting on another
    transaction's dedup key) is a PgQueueError, but the connection is fine: it must not be
    reported as ConnectionFailed ("lost the database connection")."""
    with psycopg.connect(dsn, autocommit=False) as holder, \
            psycopg.connect(dsn, autocommit=False) as waiter:
        q.enqueue(b"first", dedup_key="k", conn=holder)  # uncommitted: holds the key
        waiter.execute("SET statement_timeout = 200")
        with pytest.raises(pgqueue.PgQueueError) as caught:
            q.enqueue(b"second", dedup_key="k", conn=waiter)
        waiter.rollback()
        assert waiter.execute("SELECT 1").fetchone() == (1,)  # the connection is alive
        holder.rollback()
    assert not isinstance(caught.value, pgqueue.ConnectionFailed), caught.value


def test_a_connection_lost_at_commit_is_connection_failed(dsn: str) -> None:
    """A transaction block's COMMIT on a connection the server ended raises ConnectionFailed,
    not a raw psycopg error (a scheduler process died of one when its backend was terminated
    between a cron pass's last statement and its commit)."""
    with connection.connect(dsn) as conn, psycopg.connect(dsn, autocommit=True) as admin:
        pid = conn.info.backend_pid
        with pytest.raises(pgqueue.ConnectionFailed, match="lost the database connection"):
            with run.transaction(conn):
                assert run.scalar(conn, "schedule_clock") is not None
                admin.execute("SELECT pg_terminate_backend(%s)", [pid])
                deadline = time.monotonic() + 10
                while admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s",
                                    [pid]).fetchone():
                    assert time.monotonic() < deadline, "the backend was never terminated"
                    time.sleep(0.02)


def test_queue_refuses_a_bad_dsn_argument() -> None:
    with pytest.raises(TypeError, match="dsn"):
        pgqueue.Queue("")
    with pytest.raises(TypeError, match="dsn"):
        pgqueue.Queue(None)  # type: ignore[arg-type]


# -- bad input changes nothing ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["", "x" * 201])
def test_bad_stream_name_is_refused(dsn: str, name: str) -> None:
    with pytest.raises(ValueError, match="stream"):
        pgqueue.Queue(dsn, stream=name)
    assert totals(dsn) == (0, 0, 0)


def test_stream_name_of_200_characters_is_fine(dsn: str) -> None:
    with pgqueue.Queue(dsn, stream="x" * 200) as q:
        job_id = q.enqueue(b"ok")
        info = q.job(job_id)
        assert info is not None and info.stream == "x" * 200


def test_stream_name_must_be_a_str(dsn: str) -> None:
    with pytest.raises(TypeError, match="stream"):
        pgqueue.Queue(dsn, stream=5)  # type: ignore[arg-type]


BAD_ENQUEUES: list[tuple[str, dict[str, Any], type[Exception], str]] = [
    ("priority -1", {"priority": -1}, ValueError, "priority"),
    ("priority 256", {"priority": 256}, ValueError, "priority"),
    ("priority bool", {"priority": True}, TypeError, "priority"),
    ("priority float", {"priority": 1.5}, TypeError, "priority"),
    ("negative delay", {"delay": -0.001}, ValueError, "delay"),
    ("negative timedelta", {"delay": dt.timedelta(seconds=-1)}, ValueError, "delay"),
    ("nan delay", {"delay": math.nan}, ValueError, "delay"),
    ("str delay", {"delay": "5"}, TypeError, "delay"),
    ("negative max_attempts", {"max_attempts": -1}, ValueError, "max_attempts"),
    ("naive not_before", {"not_before": dt.datetime(2030, 1, 1)}, ValueError, "not_before"),
    ("both delay and not_before",
     {"delay": 1, "not_before": dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc)},
     ValueError, "not_before"),
    ("dedup key of 1025 bytes", {"dedup_key": b"k" * 1025}, ValueError, "dedup_key"),
    ("dedup key of 1025 str characters", {"dedup_key": "k" * 1025}, ValueError, "dedup_key"),
    ("dedup key over 1 KiB in UTF-8", {"dedup_key": "é" * 513}, ValueError, "dedup_key"),
    ("dedup key of another type", {"dedup_key": 5}, TypeError, "dedup_key"),
    ("empty kind", {"kind": ""}, ValueError, "kind"),
    ("NUL in kind", {"kind": "send\x00email"}, ValueError, "kind must not contain a NUL"),
]


@pytest.mark.parametrize(("kwargs", "exc", "names"), [b[1:] for b in BAD_ENQUEUES],
                         ids=[b[0] for b in BAD_ENQUEUES])
def test_bad_enqueue_arguments_are_refused_and_change_nothing(
    shared_q: pgqueue.Queue, shared_dsn: str, kwargs: dict[str, Any], exc: type[Exception],
    names: str,
) -> None:
    before = totals(shared_dsn)
    with pytest.raises(exc, match=names):
        shared_q.enqueue(b"x", **kwargs)
    with pytest.raises(exc, match=names):
        shared_q.enqueue_many([pgqueue.NewJob(b"ok"), pgqueue.NewJob(b"x", **kwargs)])
    assert totals(shared_dsn) == before


def test_dedup_key_of_exactly_1_kib_is_fine(q: pgqueue.Queue) -> None:
    a = q.enqueue(b"x", dedup_key=b"k" * 1024)
    assert q.enqueue(b"y", dedup_key="k" * 1024) == a


class Unserialisable:
    pass


@pytest.mark.parametrize("payload", [object(), {1, 2}, Unserialisable(), {"nested": {1}},
                                     [math.inf], {"f": lambda: 1}],
                         ids=["object", "set", "class", "nested set", "inf", "function"])
def test_payload_neither_bytes_str_nor_json_is_refused(shared_q: pgqueue.Queue, shared_dsn: str,
                                                       payload: Any) -> None:
    before = totals(shared_dsn)
    with pytest.raises(TypeError, match="payload"):
        shared_q.enqueue(payload)
    with pytest.raises(TypeError, match="payload"):
        shared_q.enqueue_many([pgqueue.NewJob(b"ok"), pgqueue.NewJob(payload)])
    assert totals(shared_dsn) == before


def test_enqueue_many_needs_new_jobs(shared_q: pgqueue.Queue, shared_dsn: str) -> None:
    before = totals(shared_dsn)
    with pytest.raises(TypeError, match="NewJob"):
        shared_q.enqueue_many([b"raw"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="NewJob"):
        shared_q.enqueue_many(pgqueue.NewJob(b"x"))  # type: ignore[arg-type]
    assert totals(shared_dsn) == before


@pytest.mark.parametrize("vt", [0, -1, -0.5, math.nan])
def test_bad_visibility_timeout_is_refused_and_changes_nothing(q: pgqueue.Queue, dsn: str,
                                                               vt: float) -> None:
    q.enqueue(b"x")
    before = totals(dsn)
    with pytest.raises(ValueError, match="visibility_timeout"):
        q.lease(visibility_timeout=vt)
    assert totals(dsn) == before
    info = q.job(q.jobs()[0].job_id)
    assert info is not None and info.state == "pending"
    [held] = q.lease()
    before = totals(dsn)
    with pytest.raises(ValueError, match="visibility_timeout"):
        q.renew(held, visibility_timeout=vt)
    assert totals(dsn) == before
    after = q.job(held.job_id)
    assert after is not None and after.lease_expires_at == held.expires_at


@pytest.mark.parametrize(("call", "exc", "names"), [
    (lambda q: q.lease(limit=0), ValueError, "limit"),
    (lambda q: q.lease(limit=-3), ValueError, "limit"),
    (lambda q: q.lease(limit=1.0), TypeError, "limit"),
    (lambda q: q.jobs(state="nope"), ValueError, "state"),
    (lambda q: q.dead_letters(limit=0), ValueError, "limit"),
    (lambda q: q.configure_stream(quarantine_after=0), ValueError, "quarantine_after"),
    (lambda q: q.configure_stream(retry_base=-1), ValueError, "retry_base"),
    (lambda q: q.configure_stream(retry_cap=-1), ValueError, "retry_cap"),
    (lambda q: q.renew("not a lease"), TypeError, "lease"),
    (lambda q: q.ack("not a lease"), TypeError, "lease"),
    (lambda q: q.nack("not a lease"), TypeError, "lease"),
], ids=["limit 0", "limit negative", "limit float", "state", "dead limit", "quarantine 0",
        "retry_base", "retry_cap", "renew lease", "ack lease", "nack lease"])
def test_other_bad_arguments_are_refused_and_change_nothing(
    shared_q: pgqueue.Queue, shared_dsn: str, call: Callable[[Any], object],
    exc: type[Exception], names: str,
) -> None:
    before = totals(shared_dsn)
    with pytest.raises(exc, match=names):
        call(shared_q)
    assert totals(shared_dsn) == before


def test_renew_with_a_checkpoint_that_is_not_a_checkpoint(q: pgqueue.Queue, dsn: str) -> None:
    q.enqueue(b"x")
    [held] = q.lease()
    before = totals(dsn)
    with pytest.raises(TypeError, match="checkpoint"):
        q.renew(held, checkpoint={"cursor": b""})  # type: ignore[arg-type]
    assert totals(dsn) == before


# -- absurd durations: a bad argument, not a database problem -----------------------------------


@pytest.mark.parametrize(("kwargs", "names"), [
    ({"delay": 1e20}, "delay"),
    ({"delay": 1e13}, "delay"),  # ~300,000 years: past what Postgres timestamps hold
], ids=["delay 1e20", "delay 1e13"])
def test_an_absurd_delay_is_a_bad_argument(shared_q: pgqueue.Queue, shared_dsn: str,
                                           kwargs: dict[str, Any], names: str) -> None:
    before = totals(shared_dsn)
    with pytest.raises((ValueError, TypeError), match=names):
        shared_q.enqueue(b"x", **kwargs)
    assert totals(shared_dsn) == before


def test_an_absurd_visibility_timeout_is_a_bad_argument_not_a_missing_schema(
    q: pgqueue.Queue, dsn: str,
) -> None:
    q.enqueue(b"x")
    before = totals(dsn)
    with pytest.raises((ValueError, TypeError), match="visibility_timeout"):
        q.lease(visibility_timeout=1e20)
    assert totals(dsn) == before


def test_an_absurd_retry_in_is_a_bad_argument_not_a_missing_schema(q: pgqueue.Queue,
                                                                    dsn: str) -> None:
    q.enqueue(b"x")
    [held] = q.lease()
    before = totals(dsn)
    with pytest.raises((ValueError, TypeError), match="retry_in"):
        q.nack(held, retry_in=1e20)
    assert totals(dsn) == before
    info = q.job(held.job_id)
    assert info is not None and (info.state, info.attempts) == ("leased", 0)


# -- NUL: refused by name where a name is stored as text, harmless in bytes ----------------------


def test_a_nul_in_a_stream_name_is_refused_by_name(dsn: str) -> None:
    with pytest.raises(ValueError, match=r"^stream must not contain a NUL"):
        pgqueue.Queue(dsn, stream="de\x00fault")
    assert totals(dsn) == (0, 0, 0)


@pytest.mark.parametrize(("call", "message"), [
    (lambda q: q.upsert_schedule("night\x00ly", "0 2 * * *", b"x"), "^name must not contain a NUL"),
    (lambda q: q.upsert_schedule("nightly", "0 2 * * *", b"x", kind="re\x00port"),
     "^kind must not contain a NUL"),
    (lambda q: q.configure_kind("re\x00port", quarantine_after=2), "^kind must not contain a NUL"),
    (lambda q: q.rewind(q.jobs()[0].job_id, "fe\x00tch"), "^to_step must not contain a NUL"),
], ids=["schedule name", "schedule kind", "configure kind", "rewind to_step"])
def test_a_nul_in_a_name_is_refused_by_name_and_changes_nothing(
        shared_q: pgqueue.Queue, shared_dsn: str, call: Callable[[Any], object],
        message: str) -> None:
    before = totals(shared_dsn)
    with pytest.raises(ValueError, match=message):
        call(shared_q)
    assert totals(shared_dsn) == before
    assert shared_q.schedules() == []


def test_a_nul_in_a_handler_s_kind_is_refused_when_declared() -> None:
    app = pgqueue.App()
    with pytest.raises(ValueError, match=r"^kind must not contain a NUL"):
        app.job("re\x00port")


def test_a_nul_in_a_dedup_key_is_an_ordinary_byte(q: pgqueue.Queue) -> None:
    first = q.enqueue(b"x", dedup_key="a\x00b")
    assert q.enqueue(b"y", dedup_key=b"a\x00b") == first  # the same key, as str or bytes
    assert q.enqueue(b"z", dedup_key="a") != first  # not cut at the NUL
    info = q.job(first)
    assert info is not None and info.dedup_key == b"a\x00b"


def test_a_nul_in_a_nack_s_error_does_not_stop_the_nack(q: pgqueue.Queue) -> None:
    job_id = q.enqueue(b"x")
    [held] = q.lease()
    assert q.nack(held, error="bad\x00byte", retry_in=0) is False
    info = q.job(job_id)
    assert info is not None
    assert (info.state, info.attempts, info.last_error) == ("pending", 1, "bad\ufffdbyte")


def test_a_nul_in_a_step_name_is_refused_when_declared() -> None:
    job = pgqueue.App().step_job("etl")
    with pytest.raises(ValueError, match=r"^step name must not contain a NUL"):
        job.step("fe\x00tch")
