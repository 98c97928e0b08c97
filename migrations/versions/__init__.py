"""Alembic revisions. Revision ids are zero-padded integers, so "newer" is a comparison."""
