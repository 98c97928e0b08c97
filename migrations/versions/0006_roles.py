"""Least privilege: a database role for each part, and no way around the transitions

Revision ID: 0006
Revises: 0005
"""
from __future__ import annotations

from pathlib import Path

from pgqueue_migrations.revision import Revision

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

REVISION = Revision(revision, down_revision, "roles", Path(__file__).parent, compatible=True)


def upgrade() -> None:
    REVISION.upgrade()


def downgrade() -> None:
    REVISION.downgrade()
