"""Lease plans that need no statistics

The oldest-ready index is kept out of the lease's reach (only a query naming
`not_before > '-infinity'` may use it), and a limited kind's jobs ahead of the cut are read as
index ranges.

Revision ID: 0007
Revises: 0006
"""
from __future__ import annotations

from pathlib import Path

from pgqueue_migrations.revision import Revision

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

REVISION = Revision(revision, down_revision, "lease_plans", Path(__file__).parent, compatible=True)


def upgrade() -> None:
    REVISION.upgrade()


def downgrade() -> None:
    REVISION.downgrade()
