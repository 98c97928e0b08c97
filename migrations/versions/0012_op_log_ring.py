"""The op log on a ring of 32 partitions, truncated whole by its retention

Revision ID: 0012
Revises: 0011
"""
from __future__ import annotations

from pathlib import Path

from pgqueue_migrations.revision import Revision

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

REVISION = Revision(revision, down_revision, "op_log_ring", Path(__file__).parent, compatible=True)


def upgrade() -> None:
    REVISION.upgrade()


def downgrade() -> None:
    REVISION.downgrade()
