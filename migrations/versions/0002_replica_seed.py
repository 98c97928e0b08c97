"""Seeding a replica from its leader's state (node.seed_snapshot, seeded_through).

Revision ID: 0002
Revises: 0001
"""
from __future__ import annotations

from pathlib import Path

from pgqueue_migrations.revision import Revision

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

REVISION = Revision(revision, down_revision, "replica_seed", Path(__file__).parent, compatible=False)


def upgrade() -> None:
    REVISION.upgrade()


def downgrade() -> None:
    REVISION.downgrade()
