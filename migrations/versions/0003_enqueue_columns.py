"""The Enqueue op's job fields as typed columns of the op row (no per-job jsonb body);
pgqueue.op_body gives the whole body back.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""
from __future__ import annotations

from pgqueue_migrations.sqlfile import run_sql_file

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0003_enqueue_columns.sql")


def downgrade() -> None:
    run_sql_file("0003_enqueue_columns.down.sql")
