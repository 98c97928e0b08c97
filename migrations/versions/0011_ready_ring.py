"""Ready jobs found through a ring of truncated partitions, not an index of job

Revision ID: 0011
Revises: 0010
"""
from __future__ import annotations

from pathlib import Path

from pgqueue_migrations.revision import Revision

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

REVISION = Revision(revision, down_revision, "ready_ring", Path(__file__).parent, compatible=True)


def upgrade() -> None:
    REVISION.upgrade()


def downgrade() -> None:
    REVISION.downgrade()
