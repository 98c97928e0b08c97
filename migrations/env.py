"""Alembic environment: migrations run on the connection pgqueue.migrate hands in.

The version table lives in the pgqueue schema, so pgqueue owns nothing outside it. An upgrade
(`commit_each_revision`) commits each revision in a transaction of its own, so that one
revision's locks are not still held while the next one waits for others (running clients
would deadlock against the upgrade); an install's stamp and a downgrade are one transaction.
"""
from __future__ import annotations

from alembic import context
from sqlalchemy import text

connection = context.config.attributes["connection"]
connection.execute(text("CREATE SCHEMA IF NOT EXISTS pgqueue"))
if context.config.attributes.get("commit_each_revision"):
    connection.commit()
context.configure(
    connection=connection,
    version_table="alembic_version",
    version_table_schema="pgqueue",
    transaction_per_migration=True,
)
with context.begin_transaction():
    context.run_migrations()
