-- name: schema_revision
-- The alembic revision of the pgqueue schema (no row after a downgrade to base; a missing
-- table raises, which pgqueue reports as "run pgqueue db upgrade").
SELECT version_num AS revision FROM pgqueue.alembic_version LIMIT 1

-- name: database_exists
SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = %(name)s) AS exists

-- name: server_version
SELECT current_setting('server_version') AS version
