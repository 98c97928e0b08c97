"""Role hardening

What each pgqueue role may do holds at the edges: a job's kind, keys and trace context are
checked where every enqueue passes (a kind too long for the ready index failed every lease of
its stream once the job came due), an upcast keeps the stream's payload limit, a tick advances
only a due schedule that is not paused, a lease and a renewal refuse a NULL visibility, and a
limited kind is locked by its settings row, and the maintenance runners elect one of
themselves by a claim row (pgqueue.maintenance_runner, the one new table), neither of which
any login can hold from outside (the advisory locks they replace, any login could take).

Revision ID: 0008
Revises: 0007
"""
from __future__ import annotations

from pathlib import Path

from pgqueue_migrations.revision import Revision

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

REVISION = Revision(revision, down_revision, "hardening", Path(__file__).parent, compatible=True)


def upgrade() -> None:
    REVISION.upgrade()


def downgrade() -> None:
    REVISION.downgrade()
