"""Run one of the revision .sql files through the migration's raw psycopg connection.

The files hold plpgsql bodies and several statements, so they go to the driver untouched
(no SQLAlchemy parameter parsing).
"""
from __future__ import annotations

from pathlib import Path

from alembic import op

VERSIONS = Path(__file__).resolve().parent / "versions"


def run_sql_file(name: str) -> None:
    """Execute versions/NAME on the migration connection, inside alembic's transaction."""
    sql = (VERSIONS / name).read_text(encoding="utf-8")
    driver = op.get_bind().connection.driver_connection
    assert driver is not None
    driver.execute(sql)  # type: ignore[attr-defined]
