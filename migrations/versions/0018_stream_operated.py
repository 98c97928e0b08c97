"""Operator verbs on one job take the job's stream (on Citus they run on its node)

Revision ID: 0018
Revises: 0017
"""
from __future__ import annotations

from pathlib import Path

from pgqueue_migrations.revision import Revision

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

REVISION = Revision(revision, down_revision, "stream_operated", Path(__file__).parent, compatible=True)


def upgrade() -> None:
    REVISION.upgrade()


def downgrade() -> None:
    REVISION.downgrade()
