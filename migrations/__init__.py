"""pgqueue's alembic migrations: each revision runs a plain .sql file a DBA can read."""
