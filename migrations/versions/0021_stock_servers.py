"""Stock servers: no hot statement is JIT-compiled

Revision ID: 0021
Revises: 0020
"""
from __future__ import annotations

from pathlib import Path

from pgqueue_migrations.revision import Revision

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

REVISION = Revision(revision, down_revision, "stock_servers", Path(__file__).parent, compatible=True)


def upgrade() -> None:
    REVISION.upgrade()


def downgrade() -> None:
    REVISION.downgrade()
