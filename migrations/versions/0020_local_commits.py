"""Citus: a call's statements commit on its stream's node alone. No modifying CTE feeds an
INSERT (Citus sends such a CTE's rows to every node, then commits there in two phases): the op
log's rows (and a lease's expiry entry) are written from arrays, in a statement of their own.
And a worker records the kinds it handles, with its handlers' settings (worker.kinds).

Revision ID: 0020
Revises: 0019
"""
from __future__ import annotations

from pathlib import Path

from pgqueue_migrations.revision import Revision

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

REVISION = Revision(revision, down_revision, "local_commits", Path(__file__).parent, compatible=True)


def upgrade() -> None:
    REVISION.upgrade()


def downgrade() -> None:
    REVISION.downgrade()
