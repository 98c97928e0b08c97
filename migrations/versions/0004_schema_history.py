"""pgqueue.schema_history: the revisions applied and the oldest code each can run.

Revision ID: 0004
Revises: 0003
"""
from __future__ import annotations

from pathlib import Path

from pgqueue_migrations.revision import Revision

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

REVISION = Revision(revision, down_revision, "schema_history", Path(__file__).parent, compatible=True)


def upgrade() -> None:
    REVISION.upgrade()


def downgrade() -> None:
    REVISION.downgrade()
