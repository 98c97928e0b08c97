-- Undo 0001: drop every pgqueue object except alembic's version table (alembic owns it).
DROP VIEW IF EXISTS pgqueue.jobs;
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT p.oid::regprocedure AS fn FROM pg_proc p
             WHERE p.pronamespace = 'pgqueue'::regnamespace LOOP
        EXECUTE format('DROP FUNCTION IF EXISTS %s CASCADE', r.fn);
    END LOOP;
END
$$;
DROP TABLE IF EXISTS pgqueue.op_log, pgqueue.dead_letter, pgqueue.job, pgqueue.stream_config,
    pgqueue.step_set, pgqueue.kind_config, pgqueue.worker, pgqueue.schedule, pgqueue.node,
    pgqueue.replica, pgqueue.follow_state CASCADE;
DROP SEQUENCE IF EXISTS pgqueue.job_id_seq, pgqueue.lease_id_seq;
