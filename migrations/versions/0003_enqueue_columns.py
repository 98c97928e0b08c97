"""The Enqueue op's job fields as typed op_log columns; pgqueue.op_body gives the whole body.

Revision ID: 0003
Revises: 0002
"""
from __future__ import annotations

from pathlib import Path

from pgqueue_migrations.revision import Revision

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

REVISION = Revision(revision, down_revision, "enqueue_columns", Path(__file__).parent, compatible=False)


def upgrade() -> None:
    REVISION.upgrade()


def downgrade() -> None:
    REVISION.downgrade()
