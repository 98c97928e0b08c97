"""Failures and time limits: a failure's one-line summary beside its traceback (job, dead
letter, Nack and Reclaim ops), and a job's own time limit (timeout_ms, set at enqueue).

Revision ID: 0010
Revises: 0009
"""
from __future__ import annotations

from pathlib import Path

from pgqueue_migrations.revision import Revision

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

REVISION = Revision(revision, down_revision, "failures_and_limits", Path(__file__).parent, compatible=True)


def upgrade() -> None:
    REVISION.upgrade()


def downgrade() -> None:
    REVISION.downgrade()
