"""Guarantees at the edges: cron fire times once ever, payload limits, request tokens, fixes.

Revision ID: 0005
Revises: 0004
"""
from __future__ import annotations

from pathlib import Path

from pgqueue_migrations.revision import Revision

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

REVISION = Revision(revision, down_revision, "edge_guarantees", Path(__file__).parent, compatible=False)


def upgrade() -> None:
    REVISION.upgrade()


def downgrade() -> None:
    REVISION.downgrade()
