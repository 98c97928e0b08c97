"""SQL defaults: pgqueue.enqueue_one takes defaults for its optional arguments, so psql can
call it with a stream and a payload (`SELECT pgqueue.enqueue_one('emails', '{}')`). Code only.

Revision ID: 0009
Revises: 0008
"""
from __future__ import annotations

from pathlib import Path

from pgqueue_migrations.revision import Revision

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

REVISION = Revision(revision, down_revision, "sql_defaults", Path(__file__).parent, compatible=True)


def upgrade() -> None:
    REVISION.upgrade()


def downgrade() -> None:
    REVISION.downgrade()
