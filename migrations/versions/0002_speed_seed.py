"""Speed and replica seeding: inlinable helpers, leaner enqueue/lease/ack op writes, a proven
logical-replica position, and seeding a replica from the leader's state after pruning.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""
from __future__ import annotations

from pgqueue_migrations.sqlfile import run_sql_file

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0002_speed_seed.sql")


def downgrade() -> None:
    run_sql_file("0002_speed_seed.down.sql")
