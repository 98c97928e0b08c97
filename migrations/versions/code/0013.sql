-- GENERATED FILE: do not edit. What pgqueue schema revision 0013 changed in the functions and
-- views, object by object, against the code of revision 0012 (frozen by
-- `python -m pgqueue_migrations.new` when revision 0014 was started). Each entry is headed
-- by the object it defines and the one it follows, then its whole text (or `removed`); the
-- code of 0013 is every frozen file up to it applied in order (migrations/frozen.py). Loaded
-- when a database is upgraded to 0013 or downgraded to it; the current definitions live in
-- pgqueue/sql/.

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
            -- left by a promotion, an upgrade or a pass that failed after its move: every
            -- writer drew its xid before this moment, so below the snapshot's xmax
            UPDATE pgqueue.op_log_ring
            SET closed_at = clock_timestamp(),
                closed_xid = greatest(pg_current_xact_id(), pg_snapshot_xmax(pg_current_snapshot()))
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
       -- the xid recorded below must be drawn after the move (not already this transaction's,
       -- drawn before it by a truncation above: then the next pass moves on)
       AND pg_current_xact_id_if_assigned() IS NULL
       AND pg_relation_size(format('pgqueue.op_log_%s', (v_cur + 1) % 32)::regclass) = 0 THEN
        PERFORM setval('pgqueue.op_log_seq_seq', (((v_next >> 32) + 1) << 32) - 1, true);
        -- after the move. A transaction that wrote to the partition left holds its lock until
        -- it ends, so the truncation's lock (tried, never waited for) passes it over whatever
        -- its xid; one that drew a seq but has not written yet writes into the emptied
        -- partition later, which step 1 marks closed again: nothing is lost either way
        UPDATE pgqueue.op_log_ring
        SET closed_at = clock_timestamp(), closed_xid = pg_current_xact_id()
        WHERE slot = v_cur;
        rotated := true;
    END IF;
END
$$;
