"""Alembic environment: migrations run on the connection pgqueue.migrate hands in.

The version table lives in the pgqueue schema, so pgqueue owns nothing outside it.
"""
from __future__ import annotations

from alembic import context
from sqlalchemy import text

connection = context.config.attributes["connection"]
connection.execute(text("CREATE SCHEMA IF NOT EXISTS pgqueue"))
context.configure(
    connection=connection,
    version_table="alembic_version",
    version_table_schema="pgqueue",
    transaction_per_migration=True,
)
with context.begin_transaction():
    context.run_migrations()
