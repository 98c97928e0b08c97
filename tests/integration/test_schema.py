"""Schema management: upgrade, downgrade, current, and refusing a missing or newer schema."""
from __future__ import annotations

from typing import Any

import pytest
from psycopg.types.json import Jsonb

import pgqueue
from pgqueue import connection, schema
from tests.integration.test_oplog import assert_identical, op_count
from tests.pgbed import Bed


def test_queue_on_database_without_schema_says_run_upgrade(empty_dsn: str) -> None:
    with pytest.raises(pgqueue.SchemaMissing, match="pgqueue db upgrade"):
        pgqueue.Queue(empty_dsn)


def test_migrate_is_idempotent_and_reports_head(empty_dsn: str) -> None:
    assert schema.current(empty_dsn) is None
    pgqueue.migrate(empty_dsn)
    pgqueue.migrate(empty_dsn)
    assert schema.current(empty_dsn) == schema.head() == connection.SCHEMA_REVISION


def test_downgrade_to_base_then_upgrade_again(dsn: str) -> None:
    with pgqueue.Queue(dsn) as q:
        q.enqueue("x")
    schema.downgrade(dsn, "base")
    assert schema.current(dsn) is None
    with pytest.raises(pgqueue.SchemaMissing):
        pgqueue.Queue(dsn)
    pgqueue.migrate(dsn)
    with pgqueue.Queue(dsn) as q:
        assert q.stats() == []


def test_newer_schema_is_refused(dsn: str) -> None:
    with connection.connect(dsn) as conn:
        conn.execute("UPDATE pgqueue.alembic_version SET version_num = '9999'")
    with pytest.raises(pgqueue.SchemaTooNew, match="newer"):
        pgqueue.Queue(dsn)
    with pytest.raises(pgqueue.SchemaTooNew):
        pgqueue.migrate(dsn)


# -------------------------------------------------------------------------------------------
# 0003: an Enqueue op's job fields moved from its jsonb body to typed op_log columns
# -------------------------------------------------------------------------------------------

def enqueue_sql(tag: str) -> tuple[str, ...]:
    """Raw SQL, so it runs on any revision: a ready job, a delayed one with a dedup key, and
    batches with priorities, max_attempts, a schema version and a dedup key; then a lease."""
    key = tag.encode().hex()
    return (
        "SELECT pgqueue.enqueue_one('s', '\\x6f6e65'::bytea, 'k', 3, NULL, NULL, NULL, 5, NULL)",
        f"SELECT pgqueue.enqueue_one('s', '\\x00ff'::bytea, NULL, 0, 60000, NULL, "
        f"'\\x{key}'::bytea, 0, 2)",
        "SELECT pgqueue.enqueue('t', ARRAY['\\x01'::bytea, '\\x02'::bytea], ARRAY['a', NULL], "
        "ARRAY[9, 1], ARRAY[NULL, 5000]::bigint[], ARRAY[NULL, NULL]::timestamptz[], "
        "ARRAY[NULL, NULL]::bytea[], ARRAY[1, 0], ARRAY[7, NULL])",
        f"SELECT pgqueue.enqueue('t', ARRAY['\\x03'::bytea], ARRAY['d'], ARRAY[0], "
        f"ARRAY[NULL]::bigint[], ARRAY[NULL]::timestamptz[], ARRAY['\\x{key}'::bytea], ARRAY[0], "
        f"ARRAY[NULL]::int[])",
        "SELECT count(*) FROM pgqueue.lease('t', 1, 30000, 1, 1)",
    )


#: An Enqueue op as 0002 stored it: every field in its body.
BODY_KEYS = {"job_id", "stream", "kind", "payload", "priority", "state", "enqueued_at_ms",
             "not_before_ms", "dedup_key", "attempts", "max_attempts", "schema_version",
             "next_job_id"}


def run_sql(dsn: str, statements: tuple[str, ...]) -> None:
    with connection.connect(dsn) as conn:
        for statement in statements:
            conn.execute(statement)


def enqueue_bodies(dsn: str, expr: str) -> list[tuple[int, dict[str, Any]]]:
    with connection.connect(dsn) as conn:
        return [(r[0], r[1]) for r in conn.execute(
            f"SELECT seq, {expr} FROM pgqueue.op_log o WHERE op = 'Enqueue' ORDER BY seq")]


def ingest_everything(source: str, target: str) -> int:
    """Hand the source's whole op log to the target's ingest_ops (works on either revision)."""
    with connection.connect(source) as conn:
        ops = [r[0] for r in conn.execute(
            "SELECT to_jsonb(o) FROM pgqueue.op_log o ORDER BY seq").fetchall()]
    with connection.connect(target) as conn:
        row = conn.execute("SELECT pgqueue.ingest_ops(%s)", [Jsonb(ops)]).fetchone()
    assert row is not None
    return int(row[0])


def test_enqueue_ops_of_both_formats_replay_to_the_same_state(bed: Bed) -> None:
    source = bed.new_database(migrated=False)
    target = bed.new_database()
    try:
        schema.upgrade(source, "0002")
        run_sql(source, enqueue_sql("a"))  # ops with the whole body (0002)
        old = enqueue_bodies(source, "body")
        assert len(old) == 5 and all(set(b) == BODY_KEYS for _, b in old)
        schema.upgrade(source, "0003")
        run_sql(source, enqueue_sql("b"))
        new = enqueue_bodies(source, "body")[5:]
        assert len(new) == 5
        assert all(set(b) == {"enqueued_at_ms", "attempts"} for _, b in new)
        # op_body gives the old ops back unchanged and the new ones whole, in the same shape
        whole = enqueue_bodies(source, "pgqueue.op_body(o)")
        assert whole[:5] == old
        assert all(set(b) == BODY_KEYS for _, b in whole)
        assert [b["state"] for _, b in whole] == ["pending", "scheduled", "pending", "scheduled",
                                                  "pending"] * 2
        assert ingest_everything(source, target) == op_count(source)
        assert_identical(source, target)
    finally:
        bed.drop(source)
        bed.drop(target)


def test_downgrade_from_0003_puts_every_enqueue_body_back(bed: Bed) -> None:
    source = bed.new_database()
    target = bed.new_database(migrated=False)
    try:
        run_sql(source, enqueue_sql("a"))
        whole = enqueue_bodies(source, "pgqueue.op_body(o)")
        assert len(whole) == 5
        schema.downgrade(source, "0002")
        assert enqueue_bodies(source, "body") == whole  # nothing lost
        schema.upgrade(target, "0002")
        assert ingest_everything(source, target) == op_count(source)
        assert_identical(source, target)
    finally:
        bed.drop(source)
        bed.drop(target)
