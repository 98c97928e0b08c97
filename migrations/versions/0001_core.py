"""The queue core: jobs, dead letters, settings, schedules, the op log, node and replicas.

Revision ID: 0001
Revises: None
"""
from __future__ import annotations

from pathlib import Path

from pgqueue_migrations.revision import Revision

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

REVISION = Revision(revision, down_revision, "core", Path(__file__).parent, compatible=False)


def upgrade() -> None:
    REVISION.upgrade()


def downgrade() -> None:
    REVISION.downgrade()
