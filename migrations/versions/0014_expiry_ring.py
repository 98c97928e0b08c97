"""Expired leases found through a ring of truncated partitions by expiry time

Revision ID: 0014
Revises: 0013
"""
from __future__ import annotations

from pathlib import Path

from pgqueue_migrations.revision import Revision

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

REVISION = Revision(revision, down_revision, "expiry_ring", Path(__file__).parent, compatible=True)


def upgrade() -> None:
    REVISION.upgrade()


def downgrade() -> None:
    REVISION.downgrade()
