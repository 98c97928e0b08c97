-- GENERATED FILE: do not edit. What pgqueue schema revision 0012 changed in the functions and
-- views, object by object, against the code of revision 0011 (frozen by
-- `python -m pgqueue_migrations.new` when revision 0013 was started). Each entry is headed
-- by the object it defines and the one it follows, then its whole text (or `removed`); the
-- code of 0012 is every frozen file up to it applied in order (migrations/frozen.py). Loaded
-- when a database is upgraded to 0012 or downgraded to it; the current definitions live in
-- pgqueue/sql/.

-- @@ function pgqueue.ingest_op
-- @@ after function pgqueue.apply_op

-- Ingest one op from another database's log (a whole op_log row): record it and apply it,
-- unless this database already holds that seq (delivering an op twice changes nothing) or its
-- transaction is already in a seeded state. Ops must arrive in the source's commit order; per
-- job that is seq order, because a transition holds the job's row lock when it appends its op.
CREATE OR REPLACE FUNCTION pgqueue.ingest_op(o pgqueue.op_log) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
BEGIN
    -- no conflict target: the primary keys are the partitions' (seq decides the partition)
    INSERT INTO pgqueue.op_log SELECT o.*
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF NOT pgqueue.reflected(o.xid) THEN
        PERFORM pgqueue.apply_op(o.op, o.job_id, o.lease_id, pgqueue.op_body(o));
    END IF;
    RETURN true;
END
$$;
-- @@ function pgqueue.recycle_op_log
-- @@ after function pgqueue.recycle_ready

-- The maintenance passes' retention of the op log, by whole partitions of its ring (see
-- pgqueue.op_log): no DELETE, so nothing is left for vacuum, whatever holds its horizon back.
-- 1. A partition the sequence has left is marked closed (the time, and a transaction id drawn
--    after it was left, above every xid that wrote to it) if it was not already: after a
--    promotion or an upgrade.
-- 2. The closed partitions are truncated in seq order while the oldest is wholly older than
--    the retention (pgqueue.op_log_policy), every transaction that wrote to it has
--    ended, and every replica seen in the last day applied its last op (replica_status's
--    rules, without waiting for a logical replica's slot, as prune_old_ops). The lock is only
--    tried (pgqueue.lock_for_truncate); a partition a reader holds is left for the next pass.
-- 3. The sequence moves on to the next partition (the next multiple of 2^32) once the current
--    one was first written to more than a 24th of the retention ago, if the next one is empty.
-- Nothing on a replica: its log is its leader's. One pass at a time (a transaction lock).
-- Returns the ops removed and whether the sequence moved on. A worker's (maintenance
-- passes): SECURITY DEFINER for the TRUNCATE and setval, which need the owner.
CREATE OR REPLACE FUNCTION pgqueue.recycle_op_log(OUT pruned bigint, OUT rotated boolean)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    v_keep interval;
    v_role text;
    v_last bigint;
    v_called boolean;
    v_next bigint;
    v_cur smallint;
    v_xmin xid8 := pg_snapshot_xmin(pg_current_snapshot());
    v_part regclass;
    v_max bigint;
    v_n bigint;
    v_applied bigint;
    v_opened timestamptz;
    r record;
BEGIN
    pruned := 0;
    rotated := false;
    SELECT n.role INTO v_role FROM pgqueue.node n;
    SELECT p.retention INTO v_keep FROM pgqueue.op_log_policy p;
    IF v_role <> 'leader' OR NOT pg_try_advisory_xact_lock(hashtext('pgqueue.recycle_op_log')) THEN
        RETURN;
    END IF;
    SELECT s.last_value, s.is_called INTO v_last, v_called FROM pgqueue.op_log_seq_seq s;
    v_next := v_last + CASE WHEN v_called THEN 1 ELSE 0 END;  -- the next seq handed out
    v_cur := (v_next >> 32) % 32;
    FOR r IN SELECT g.slot FROM pgqueue.op_log_ring g
             WHERE g.slot <> v_cur AND g.closed_at IS NULL LOOP
        IF pg_relation_size(format('pgqueue.op_log_%s', r.slot)::regclass) > 0 THEN
            UPDATE pgqueue.op_log_ring
            SET closed_at = clock_timestamp(), closed_xid = pg_current_xact_id()
            WHERE slot = r.slot;
        END IF;
    END LOOP;
    -- oldest first: the partition after the current one in the ring holds the lowest seqs
    FOR r IN SELECT g.slot, g.closed_at, g.closed_xid FROM pgqueue.op_log_ring g
             WHERE g.slot <> v_cur AND g.closed_at IS NOT NULL
             ORDER BY (g.slot - v_cur + 31) % 32 LOOP
        EXIT WHEN r.closed_at > now() - v_keep OR r.closed_xid >= v_xmin;
        v_part := format('pgqueue.op_log_%s', r.slot)::regclass;
        EXECUTE format('SELECT max(seq) FROM %s', v_part) INTO v_max;  -- its primary key's end
        IF v_max IS NOT NULL THEN
            SELECT min(s.applied_seq) INTO v_applied
            FROM pgqueue.replica_status(interval '1 day', interval '0', v_max) s
            WHERE NOT s.stale;
            EXIT WHEN v_applied < v_max;
        END IF;
        -- what is removed, counted only now (a partition waiting for a replica is not read on
        -- every pass) and before the lock (which would hold readers of the log meanwhile)
        EXECUTE format('SELECT count(*) FROM %s', v_part) INTO v_n;
        EXIT WHEN NOT pgqueue.lock_for_truncate(ARRAY[v_part], 25);
        EXECUTE format('TRUNCATE %s', v_part);
        UPDATE pgqueue.op_log_ring SET opened_at = NULL, closed_at = NULL, closed_xid = NULL
        WHERE slot = r.slot;
        IF v_max IS NOT NULL THEN
            UPDATE pgqueue.node SET pruned_through = greatest(pruned_through, v_max);
        END IF;
        pruned := pruned + v_n;
    END LOOP;
    v_part := format('pgqueue.op_log_%s', v_cur)::regclass;
    IF pg_relation_size(v_part) = 0 THEN
        RETURN;  -- nothing written to the current partition yet
    END IF;
    UPDATE pgqueue.op_log_ring SET opened_at = clock_timestamp()
    WHERE slot = v_cur AND opened_at IS NULL
    RETURNING opened_at INTO v_opened;
    IF v_opened IS NULL THEN
        SELECT g.opened_at INTO v_opened FROM pgqueue.op_log_ring g WHERE g.slot = v_cur;
    END IF;
    IF v_opened <= clock_timestamp() - v_keep / 24
       AND pg_relation_size(format('pgqueue.op_log_%s', (v_cur + 1) % 32)::regclass) = 0 THEN
        PERFORM setval('pgqueue.op_log_seq_seq', (((v_next >> 32) + 1) << 32) - 1, true);
        -- after the move: every transaction that drew a seq of the partition left has an
        -- older xid than this one, and began before this moment
        UPDATE pgqueue.op_log_ring
        SET closed_at = clock_timestamp(), closed_xid = pg_current_xact_id()
        WHERE slot = v_cur;
        rotated := true;
    END IF;
END
$$;
-- @@ function pgqueue.set_op_log_retention
-- @@ after function pgqueue.recycle_op_log

-- Set how long the maintenance passes keep ops (pgqueue.recycle_op_log); returns it. An
-- operator's (who may prune the log anyway), not a worker's: a worker must not be able to
-- empty the log.
CREATE OR REPLACE FUNCTION pgqueue.set_op_log_retention(p_keep interval) RETURNS interval
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
BEGIN
    IF p_keep IS NULL OR p_keep < interval '1 second' THEN
        RAISE EXCEPTION 'op log retention must be at least 1 second, got %', p_keep
            USING ERRCODE = '22023';
    END IF;
    UPDATE pgqueue.op_log_policy SET retention = p_keep;
    RETURN p_keep;
END
$$;
-- @@ GRANT EXECUTE ON FUNCTION pgqueue.lease, pgqueue.renew, pgqueue.start_rated, pgqueue.ack, pgqueue.na
-- @@ after GRANT EXECUTE ON FUNCTION pgqueue.enqueue, pgqueue.enqueue_one TO pgqueue_producer;

-- worker
GRANT EXECUTE ON FUNCTION pgqueue.lease, pgqueue.renew, pgqueue.start_rated, pgqueue.ack,
    pgqueue.nack, pgqueue.return_leases, pgqueue.mark_undecodable, pgqueue.end_cancelled,
    pgqueue.upcast, pgqueue.reclaim_expired_jobs, pgqueue.reclaim_expired,
    pgqueue.register_step_set, pgqueue.configure_kind_settings, pgqueue.configure_kind,
    pgqueue.register_worker, pgqueue.heartbeat_worker, pgqueue.deregister_worker,
    pgqueue.prune_workers, pgqueue.claim_due_schedules, pgqueue.advance_schedule,
    pgqueue.prune_old_ops, pgqueue.touch_replicas, pgqueue.claim_maintenance,
    pgqueue.release_maintenance, pgqueue.recycle_ready, pgqueue.recycle_op_log
    TO pgqueue_worker;
-- @@ GRANT EXECUTE ON FUNCTION pgqueue.release, pgqueue.rewind, pgqueue.restart, pgqueue.skip_step, pgque
-- @@ after GRANT EXECUTE ON FUNCTION pgqueue.lease, pgqueue.renew, pgqueue.start_rated, pgqueue.ack, pgqueue.na

-- operator
GRANT EXECUTE ON FUNCTION pgqueue.release, pgqueue.rewind, pgqueue.restart, pgqueue.skip_step,
    pgqueue.accept_step_set, pgqueue.cancel, pgqueue.requeue_dead_letter, pgqueue.apply_to_jobs,
    pgqueue.apply_verb_to_jobs,
    pgqueue.configure_stream, pgqueue.upsert_schedule, pgqueue.remove_schedule,
    pgqueue.lock_schedule, pgqueue.prune_op_log, pgqueue.set_op_log_retention
    TO pgqueue_operator;
