-- The login roles of docker-compose.yml's parts, made by its superuser when each Postgres
-- server is first initialised (the postgres image runs /docker-entrypoint-initdb.d/*.sql on
-- POSTGRES_DB). Each part connects as its own login; the pgqueue roles are granted to them by
-- the `migrate` service after the schema exists (README, "Roles"):
--
--   queue_owner  owns the database and the pgqueue schema: migrations, `pgqueue maintain`,
--                the replica tasks, the demo. Not a superuser; CREATEROLE lets its first
--                migration make the four NOLOGIN pgqueue roles (and grant them).
--   web          the web service: pgqueue_producer
--   jobs         the workers: pgqueue_worker
--   dashboard    the dashboard, read-only: pgqueue_reader
--
-- The passwords are the compose file's demo ones: change them (ALTER ROLE ... PASSWORD)
-- anywhere but a laptop. Safe to run again, and on a second database of the same server.
DO $$
DECLARE
    v_login text;
BEGIN
    FOREACH v_login IN ARRAY ARRAY['queue_owner', 'web', 'jobs', 'dashboard'] LOOP
        CONTINUE WHEN EXISTS (SELECT 1 FROM pg_roles WHERE rolname = v_login);
        EXECUTE format('CREATE ROLE %I LOGIN PASSWORD %L', v_login, v_login);
    END LOOP;
    ALTER ROLE queue_owner CREATEROLE;
    EXECUTE format('ALTER DATABASE %I OWNER TO queue_owner', current_database());
END
$$;
