"""The queue core: jobs, leases, checkpoints, dead letters, op log, transitions.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""
from __future__ import annotations

from pgqueue_migrations.sqlfile import run_sql_file

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0001_core.sql")


def downgrade() -> None:
    run_sql_file("0001_core.down.sql")
