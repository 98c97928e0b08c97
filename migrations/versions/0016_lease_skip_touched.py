"""A lease after its position passes over ready entries another lease touched (xmax set).

Revision ID: 0016
Revises: 0015
"""
from __future__ import annotations

from pathlib import Path

from pgqueue_migrations.revision import Revision

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

REVISION = Revision(revision, down_revision, "lease_skip_touched", Path(__file__).parent, compatible=True)


def upgrade() -> None:
    REVISION.upgrade()


def downgrade() -> None:
    REVISION.downgrade()
