-- access: Who may do what. A role for each part of a deployment, granted to login roles by an
-- administrator (`pgqueue db grant ROLE --to LOGIN`):
--
--   pgqueue_reader    reads the state: the tables and views, stats, history, metrics, the
--                     dashboard read-only
--   pgqueue_producer  enqueues (also from SQL); a reader
--   pgqueue_worker    leases, renews, acks, nacks, returns, parks, upcasts, ends a cancelled
--                     job, registers itself and its handlers' step lists and kind settings,
--                     runs the maintenance passes (reclaim, cron ticks, the week-old ops'
--                     prune); a producer (handlers and cron ticks enqueue)
--   pgqueue_operator  every operator verb, schedules, stream and kind settings, pruning the op
--                     log to other bounds; a worker
--
-- Only the owner may VACUUM the job table (MAINTAIN, on Postgres 17, would also let a role
-- LOCK or CLUSTER it, stalling the queue): an owner's `pgqueue maintain` vacuums it whoever
-- holds the maintenance election.
--
-- None of them may INSERT, UPDATE or DELETE a table: every change goes through a transition
-- function, which runs with the schema owner's rights (SECURITY DEFINER, search_path pinned
-- to pg_catalog, pgqueue, pg_temp, no SQL built from its arguments) and logs its op. Only the
-- owner migrates, and runs the replica tasks (attach, follow, seed, verify, promote).
-- Internal helpers (save_job, bury, apply_op, ...) are executable by the owner alone.
--
-- Roles are the server's, shared by its databases: a login granted pgqueue_producer is a
-- producer in every database of the server it may connect to that has the pgqueue schema.

-- schema: tables ----------------------------------------------------------------------------
-- The roles (once per server; NOLOGIN: they are granted to login roles, never used to log in)
-- and what each includes. Creating them needs CREATEROLE; without it the install stops,
-- naming the statements an administrator runs first.
DO $$
DECLARE
    v_role text;
    v_member text;
    v_missing text[] := '{}';
BEGIN
    FOREACH v_role IN ARRAY ARRAY['pgqueue_reader', 'pgqueue_producer', 'pgqueue_worker',
                                  'pgqueue_operator'] LOOP
        CONTINUE WHEN EXISTS (SELECT 1 FROM pg_roles WHERE rolname = v_role);
        BEGIN
            EXECUTE format('CREATE ROLE %I NOLOGIN', v_role);
        EXCEPTION
            WHEN duplicate_object OR unique_violation THEN NULL;  -- another install made it
            WHEN insufficient_privilege THEN v_missing := v_missing || v_role;
        END;
    END LOOP;
    IF cardinality(v_missing) > 0 THEN
        RAISE EXCEPTION 'the pgqueue roles % do not exist and this role may not create them',
            array_to_string(v_missing, ', ')
            USING ERRCODE = '42501',
                  HINT = 'an administrator runs: CREATE ROLE pgqueue_reader NOLOGIN; CREATE ROLE pgqueue_producer NOLOGIN; CREATE ROLE pgqueue_worker NOLOGIN; CREATE ROLE pgqueue_operator NOLOGIN; GRANT pgqueue_reader TO pgqueue_producer; GRANT pgqueue_producer TO pgqueue_worker; GRANT pgqueue_worker TO pgqueue_operator; (WITH ADMIN OPTION to the schema owner, so it may grant them)';
    END IF;
    FOR v_role, v_member IN VALUES ('pgqueue_reader', 'pgqueue_producer'),
                                   ('pgqueue_producer', 'pgqueue_worker'),
                                   ('pgqueue_worker', 'pgqueue_operator') LOOP
        CONTINUE WHEN pg_has_role(v_member, v_role, 'MEMBER');
        EXECUTE format('GRANT %I TO %I', v_role, v_member);
    END LOOP;
END
$$;

-- schema: functions -------------------------------------------------------------------------
-- Reloaded with the code at every revision: first nothing for anyone, then exactly what each
-- role needs (functions are executable by PUBLIC unless revoked).
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA pgqueue FROM PUBLIC, pgqueue_reader, pgqueue_producer,
    pgqueue_worker, pgqueue_operator;
REVOKE ALL ON ALL TABLES IN SCHEMA pgqueue FROM PUBLIC, pgqueue_reader, pgqueue_producer,
    pgqueue_worker, pgqueue_operator;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA pgqueue FROM PUBLIC, pgqueue_reader, pgqueue_producer,
    pgqueue_worker, pgqueue_operator;
REVOKE ALL ON SCHEMA pgqueue FROM PUBLIC, pgqueue_reader, pgqueue_producer, pgqueue_worker,
    pgqueue_operator;

-- reader: the schema, every table and view to read, and the helpers its queries call
GRANT USAGE ON SCHEMA pgqueue TO pgqueue_reader;
GRANT SELECT ON ALL TABLES IN SCHEMA pgqueue TO pgqueue_reader;
GRANT EXECUTE ON FUNCTION pgqueue.to_ms, pgqueue.from_ms, pgqueue.now_ms, pgqueue.pinned_now, pgqueue.b64,
    pgqueue.unb64, pgqueue.op_body, pgqueue.fold_job_counts, pgqueue.replica_status,
    pgqueue.error_summary, pgqueue.each_stream, pgqueue.verb_states, pgqueue.job_verbs
    TO pgqueue_reader;

-- producer
GRANT EXECUTE ON FUNCTION pgqueue.enqueue, pgqueue.enqueue_one TO pgqueue_producer;

-- worker
GRANT EXECUTE ON FUNCTION pgqueue.lease, pgqueue.renew, pgqueue.start_rated, pgqueue.ack,
    pgqueue.nack, pgqueue.return_leases, pgqueue.mark_undecodable, pgqueue.end_cancelled,
    pgqueue.upcast, pgqueue.reclaim_expired_jobs, pgqueue.reclaim_expired,
    pgqueue.reclaim_due_jobs, pgqueue.recycle_lease_expiry,
    pgqueue.register_step_set, pgqueue.configure_kind_settings, pgqueue.configure_kind,
    pgqueue.register_worker, pgqueue.register_worker_kinds, pgqueue.heartbeat_worker,
    pgqueue.deregister_worker,
    pgqueue.prune_workers, pgqueue.claim_due_schedules, pgqueue.advance_schedule,
    pgqueue.prune_old_ops, pgqueue.touch_replicas, pgqueue.claim_maintenance,
    pgqueue.release_maintenance, pgqueue.recycle_ready, pgqueue.recycle_op_log,
    pgqueue.recycle_rings
    TO pgqueue_worker;

-- operator
GRANT EXECUTE ON FUNCTION pgqueue.release, pgqueue.rewind, pgqueue.restart, pgqueue.skip_step,
    pgqueue.accept_step_set, pgqueue.cancel, pgqueue.requeue_dead_letter, pgqueue.apply_to_jobs,
    pgqueue.apply_verb_to_jobs,
    pgqueue.configure_stream, pgqueue.upsert_schedule, pgqueue.remove_schedule,
    pgqueue.lock_schedule, pgqueue.prune_op_log, pgqueue.set_op_log_retention
    TO pgqueue_operator;

-- queries -----------------------------------------------------------------------------------

-- name: grant_version_table
-- After a fresh install's stamp made alembic's version table: every role reads the revision.
GRANT SELECT ON pgqueue.alembic_version TO pgqueue_reader
