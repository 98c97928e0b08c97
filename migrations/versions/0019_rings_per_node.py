"""The rings' truncation and the counts' folding take a stream (on Citus they run on its shard group's node)

Revision ID: 0019
Revises: 0018
"""
from __future__ import annotations

from pathlib import Path

from pgqueue_migrations.revision import Revision

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

REVISION = Revision(revision, down_revision, "rings_per_node", Path(__file__).parent, compatible=True)


def upgrade() -> None:
    REVISION.upgrade()


def downgrade() -> None:
    REVISION.downgrade()
