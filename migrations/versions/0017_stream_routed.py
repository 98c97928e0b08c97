"""Every statement of a transition names its stream (Citus routes it to one node); the worker's calls
take the stream

Revision ID: 0017
Revises: 0016
"""
from __future__ import annotations

from pathlib import Path

from pgqueue_migrations.revision import Revision

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

REVISION = Revision(revision, down_revision, "stream_routed", Path(__file__).parent, compatible=True)


def upgrade() -> None:
    REVISION.upgrade()


def downgrade() -> None:
    REVISION.downgrade()
