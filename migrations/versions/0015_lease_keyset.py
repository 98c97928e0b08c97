"""Leases start where the caller's last lease ended; ring truncation waits briefly for its lock

Revision ID: 0015
Revises: 0014
"""
from __future__ import annotations

from pathlib import Path

from pgqueue_migrations.revision import Revision

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

REVISION = Revision(revision, down_revision, "lease_keyset", Path(__file__).parent, compatible=True)


def upgrade() -> None:
    REVISION.upgrade()


def downgrade() -> None:
    REVISION.downgrade()
