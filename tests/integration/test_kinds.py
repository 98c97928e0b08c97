"""Kind settings (pgqueue/kinds.py, configure_kind_settings in pgqueue/sql/operate.sql): set, left as
they are when not given, cleared with None; each change one ConfigureKind op with the kind's
whole settings, which a replay rebuilds; bad input refused with nothing written; a worker's
handlers record the limits they name and leave the rest."""
from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

import pgqueue
from pgqueue import connection, registry
from tests.dbhelp import op_counts
from tests.pgbed import Bed


def _kinds(q: pgqueue.Queue) -> dict[str, pgqueue.KindConfig]:
    return {k.kind: k for k in q.kinds()}


def test_a_setting_not_given_is_left_and_none_clears_it(q: pgqueue.Queue, dsn: str) -> None:
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
    with pgqueue.Queue(dsn, stream="other") as other:
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


def test_a_replay_rebuilds_the_settings(q: pgqueue.Queue, dsn: str, bed: Bed) -> None:
    q.configure_kind("mail", max_concurrency=3, rate_limit=(10, 60), max_per_key=2)
    q.configure_kind("report", quarantine_after=4)
    q.configure_kind("gone", max_concurrency=1)
    q.configure_kind("gone", max_concurrency=None)
    with connection.connect(dsn) as conn:  # an op of the previous release: quarantine_after alone
        conn.execute("SELECT pgqueue.configure_kind('default', 'old', 2)")
    target = bed.new_database()
    try:
        pgqueue.replay(dsn, target)
        with pgqueue.Queue(target) as replica:
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


def test_sql_callers_get_the_same_checks(q: pgqueue.Queue, dsn: str) -> None:
    with connection.connect(dsn) as conn:
        conn.execute("SELECT pgqueue.configure_kind_settings('default', 'mail', %s)",
                     [Jsonb({"max_concurrency": 4, "rate_count": 2, "rate_ms": 1000})])
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute("SELECT pgqueue.configure_kind_settings('default', 'mail', %s)",
                         [Jsonb({"max_concurrency": 0})])
        with pytest.raises(psycopg.errors.CheckViolation):  # a count needs its window
            conn.execute("SELECT pgqueue.configure_kind_settings('default', 'mail', %s)",
                         [Jsonb({"rate_ms": None})])
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="unknown kind setting"):
            conn.execute("SELECT pgqueue.configure_kind_settings('default', 'mail', %s)",
                         [Jsonb({"max_cuncurrency": 1})])
    assert _kinds(q)["mail"] == pgqueue.KindConfig("default", "mail", None, 4, (2, 1.0))


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
