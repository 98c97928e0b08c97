"""The op log's recycling rotates only in a pass that truncated nothing (the xid it records
must be drawn after the move), and closes a partition found left with an xid above every
writer's. Code only.

Revision ID: 0013
Revises: 0012
"""
from __future__ import annotations

from pathlib import Path

from pgqueue_migrations.revision import Revision

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

REVISION = Revision(revision, down_revision, "op_log_rotation_xid", Path(__file__).parent, compatible=True)


def upgrade() -> None:
    REVISION.upgrade()


def downgrade() -> None:
    REVISION.downgrade()
