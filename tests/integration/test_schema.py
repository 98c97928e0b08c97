"""Schema management: upgrade, downgrade, current, and refusing a missing or newer schema."""
from __future__ import annotations

import pytest

import pgqueue
from pgqueue import connection, schema


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
