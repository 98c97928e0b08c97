-- maintain: Maintenance: the runners' election, and pruning the op log past what every
-- replica confirmed.

-- schema: tables ----------------------------------------------------------------------------

-- Who runs the maintenance passes of this database (pgqueue/maintenance/maintain.py): one claim, renewed
-- by its holder at every pass, that another runner takes once it lapses or once the holder's
-- session is gone. Bookkeeping, not queue state: not in the op log. (It replaced a session
-- advisory lock, which any login could take and hold, stopping reclaim and cron ticks.)
CREATE TABLE pgqueue.maintenance_runner (
    only_one boolean PRIMARY KEY DEFAULT true CHECK (only_one),
    holder   uuid NOT NULL,         -- the runner (one per Maintainer)
    pid      int NOT NULL,          -- its session's backend
    until    timestamptz NOT NULL   -- the claim lapses then unless renewed
);

-- schema: functions -------------------------------------------------------------------------

-- Claim (or renew) the maintenance runner's place for p_ttl_ms: true when the caller holds it.
-- Taken over when the claim lapsed or its holder's session ended (a runner killed is replaced
-- at the next pass elsewhere; a frozen one once its claim lapses). A worker's: no other role
-- may write the row, nor lock it (locking needs UPDATE on the table).
CREATE OR REPLACE FUNCTION pgqueue.claim_maintenance(p_holder uuid, p_ttl_ms bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    IF p_holder IS NULL OR p_ttl_ms IS NULL OR p_ttl_ms < 1 THEN
        RAISE EXCEPTION 'claim_maintenance: a holder and a ttl of at least 1 ms'
            USING ERRCODE = '22023';
    END IF;
    INSERT INTO pgqueue.maintenance_runner AS m (holder, pid, until)
    VALUES (p_holder, pg_backend_pid(), v_now + p_ttl_ms * interval '1 millisecond')
    ON CONFLICT (only_one) DO UPDATE
    SET holder = excluded.holder, pid = excluded.pid, until = excluded.until
    WHERE m.holder = excluded.holder OR m.until < v_now
       OR NOT EXISTS (SELECT 1 FROM pg_stat_activity a
                      WHERE a.pid = m.pid AND a.datname = current_database());
    RETURN FOUND;
END
$$;

-- Give the claim up (a runner that stops): the next pass elsewhere takes it at once.
CREATE OR REPLACE FUNCTION pgqueue.release_maintenance(p_holder uuid) RETURNS void
LANGUAGE sql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$ UPDATE pgqueue.maintenance_runner SET until = '-infinity' WHERE holder = p_holder $$;

-- Empty the partitions of pgqueue.ready that past periods filled once they hold no ready
-- job, by TRUNCATE: their dead entries are gone at once, whatever holds the vacuum horizon
-- back (a vacuum could remove none of them then). The partitions of the last period, this
-- one and the next are left alone (entries still being written). A partition still holding
-- ready jobs is emptied too when they are few (at most 1,000): their entries move to this
-- period's partition first, in the same transaction; a backlog larger than that drains
-- through leases. All of them in one lock request and one TRUNCATE; the lock is tried
-- without queueing for 10 ms, then queued for at most 50 ms (pgqueue.lock_for_truncate:
-- every lease reads all the ring's partitions and waits behind a queued request, but a busy
-- queue's leases overlap back to back and leave no free moment); when it cannot be had they
-- are left for the next pass.
-- Returns how many partitions were emptied. A worker's (maintenance passes): SECURITY
-- DEFINER for the TRUNCATE, which needs the owner.
CREATE OR REPLACE FUNCTION pgqueue.recycle_ready(p_stream text DEFAULT pgqueue.each_stream())
RETURNS int
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    v_now smallint := pgqueue.ring_slot();
    v_job regclass := pgqueue.shard_of('job', p_stream);
    v_part regclass;
    v_parts regclass[] := '{}';
    v_slot smallint;
    v_live int;
BEGIN
    FOREACH v_slot IN ARRAY pgqueue.ring_past_slots() LOOP
        v_part := pgqueue.shard_of('ready_' || v_slot, p_stream);
        CONTINUE WHEN pg_relation_size(v_part) = 0;  -- empty since its last truncation
        EXECUTE format('SELECT count(*) FROM (SELECT 1 FROM %s r JOIN %s j '
                       'ON j.id = r.job_id AND j.state = ''pending'' LIMIT 1001) c', v_part, v_job)
        INTO v_live;
        CONTINUE WHEN v_live > 1000;
        v_parts := v_parts || v_part;
    END LOOP;
    IF cardinality(v_parts) = 0 OR NOT pgqueue.lock_for_truncate(v_parts, 5, 50) THEN
        RETURN 0;
    END IF;
    -- nobody reads or writes these partitions now: their ready jobs' entries move, the rest
    -- (taken, or no longer pending) go with them
    FOREACH v_part IN ARRAY v_parts LOOP
        EXECUTE format('INSERT INTO %s (slot, stream, priority, job_id, kind) '
                       'SELECT DISTINCT ON (r.job_id) $1, r.stream, r.priority, r.job_id, r.kind '
                       'FROM %s r JOIN %s j ON j.id = r.job_id '
                       'AND j.state = ''pending'' AND j.priority = r.priority',
                       pgqueue.shard_of('ready', p_stream), v_part, v_job)
        USING v_now;
    END LOOP;
    EXECUTE 'TRUNCATE ' || (SELECT string_agg(format('%s', p), ', ') FROM unnest(v_parts) p);
    RETURN cardinality(v_parts);
END
$$;

-- The rings' upkeep of one shard group on a Citus cluster, p_stream naming it (any stream
-- hashed to it: citus_shard_keys): the call runs on the group's node, a transaction of that
-- node alone, and folds the counts' deltas, then empties the ready entries', the leases'
-- expiries' and the op log's past partitions of the group's shards (pgqueue.fold_job_counts,
-- pgqueue.recycle_ready, pgqueue.recycle_lease_expiry, pgqueue.recycle_op_log, each as on one
-- server). A worker's (maintenance passes).
CREATE OR REPLACE FUNCTION pgqueue.recycle_rings(p_stream text DEFAULT pgqueue.each_stream(),
                                                 OUT folded bigint, OUT ready int,
                                                 OUT expiry int, OUT ops bigint)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
BEGIN
    folded := pgqueue.fold_job_counts(p_stream);
    ready := pgqueue.recycle_ready(p_stream);
    expiry := pgqueue.recycle_lease_expiry(p_stream);
    SELECT r.pruned INTO ops FROM pgqueue.recycle_op_log(p_stream) r;
END
$$;

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
-- On Citus, p_stream names a shard group (as pgqueue.recycle_rings): the call runs on its node,
-- keeps the group's ring (op_log_ring's rows under that stream) by that node's sequence and
-- transaction ids, and empties the group's shards of op_log; a Citus cluster has no replicas
-- of pgqueue's, so none is waited for. On one server p_stream is left out (its ring is
-- the rows under '').
-- Returns the ops removed and whether the sequence moved on. A worker's (maintenance
-- passes): SECURITY DEFINER for the TRUNCATE and setval, which need the owner.
CREATE OR REPLACE FUNCTION pgqueue.recycle_op_log(p_stream text DEFAULT pgqueue.each_stream(),
                                                  OUT pruned bigint, OUT rotated boolean)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    v_ring text := coalesce(p_stream, '');
    v_keep interval;
    v_role text;
    v_last bigint;
    v_called boolean;
    v_step bigint;
    v_next bigint;
    v_cur smallint;
    v_xmin xid8 := pg_snapshot_xmin(pg_current_snapshot());
    v_part regclass;
    v_max bigint;
    v_n bigint;
    v_applied bigint;
    v_opened timestamptz;
    v_at timestamptz;
    v_xid xid8;
    r record;
BEGIN
    pruned := 0;
    rotated := false;
    SELECT n.role INTO v_role FROM pgqueue.node n;
    SELECT p.retention INTO v_keep FROM pgqueue.op_log_policy p;
    IF v_role <> 'leader'
       OR NOT pg_try_advisory_xact_lock(hashtext('pgqueue.recycle_op_log' || v_ring)) THEN
        RETURN;
    END IF;
    IF p_stream IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pgqueue.op_log_ring g
                                            WHERE g.stream = p_stream) THEN
        FOR k IN 0 .. 31 LOOP  -- the group's first pass: its ring
            INSERT INTO pgqueue.op_log_ring (stream, slot) VALUES (p_stream, k);
        END LOOP;
    END IF;
    -- this node's sequence: the step between its seqs (1; on Citus 1024, each node's seqs
    -- k * 1024 + its group id) and the next it hands out
    SELECT s.last_value, s.is_called INTO v_last, v_called FROM pgqueue.op_log_seq_seq s;
    SELECT q.increment_by INTO v_step FROM pg_sequences q
    WHERE q.schemaname = 'pgqueue' AND q.sequencename = 'op_log_seq_seq';
    v_next := v_last + CASE WHEN v_called THEN v_step ELSE 0 END;
    v_cur := (v_next >> 32) % 32;
    FOR r IN SELECT g.slot FROM pgqueue.op_log_ring g
             WHERE g.stream = v_ring AND g.slot <> v_cur AND g.closed_at IS NULL LOOP
        IF pg_relation_size(pgqueue.shard_of('op_log_' || r.slot, p_stream)) > 0 THEN
            -- left by a promotion, an upgrade or a pass that failed after its move: every
            -- writer drew its xid before this moment, so below the snapshot's xmax
            -- (values first: Citus runs no UPDATE with a volatile function in it)
            v_at := clock_timestamp();
            v_xid := greatest(pg_current_xact_id(), pg_snapshot_xmax(pg_current_snapshot()));
            UPDATE pgqueue.op_log_ring SET closed_at = v_at, closed_xid = v_xid
            WHERE stream = v_ring AND slot = r.slot;
        END IF;
    END LOOP;
    -- oldest first: the partition after the current one in the ring holds the lowest seqs
    FOR r IN SELECT g.slot, g.closed_at, g.closed_xid FROM pgqueue.op_log_ring g
             WHERE g.stream = v_ring AND g.slot <> v_cur AND g.closed_at IS NOT NULL
             ORDER BY (g.slot - v_cur + 31) % 32 LOOP
        EXIT WHEN r.closed_at > now() - v_keep OR r.closed_xid >= v_xmin;
        v_part := pgqueue.shard_of('op_log_' || r.slot, p_stream);
        EXECUTE format('SELECT max(seq) FROM %s', v_part) INTO v_max;  -- its primary key's end
        IF v_max IS NOT NULL AND p_stream IS NULL THEN
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
        WHERE stream = v_ring AND slot = r.slot;
        IF v_max IS NOT NULL AND p_stream IS NULL THEN  -- (node: a reference table on Citus)
            UPDATE pgqueue.node SET pruned_through = greatest(pruned_through, v_max);
        END IF;
        pruned := pruned + v_n;
    END LOOP;
    v_part := pgqueue.shard_of('op_log_' || v_cur, p_stream);
    IF pg_relation_size(v_part) = 0 THEN
        RETURN;  -- nothing written to the current partition yet
    END IF;
    v_at := clock_timestamp();
    UPDATE pgqueue.op_log_ring SET opened_at = v_at
    WHERE stream = v_ring AND slot = v_cur AND opened_at IS NULL
    RETURNING opened_at INTO v_opened;
    IF v_opened IS NULL THEN
        SELECT g.opened_at INTO v_opened FROM pgqueue.op_log_ring g
        WHERE g.stream = v_ring AND g.slot = v_cur;
    END IF;
    IF v_opened <= clock_timestamp() - v_keep / 24
       -- the xid recorded below must be drawn after the move (not already this transaction's,
       -- drawn before it by a truncation above: then the next pass moves on)
       AND pg_current_xact_id_if_assigned() IS NULL
       -- (on Citus: in every shard group on this node, whose seqs move on with the node's)
       AND (SELECT coalesce(sum(pg_relation_size(x)), 0)
            FROM unnest(pgqueue.shards_here('op_log_' || (v_cur + 1) % 32, p_stream)) x) = 0 THEN
        -- the first seq of the next window is its multiple of 2^32 plus this node's residue
        -- (0 on one server, the group id on Citus: 2^32 is a multiple of the step)
        PERFORM setval('pgqueue.op_log_seq_seq',
                       (((v_next >> 32) + 1) << 32) + v_next % v_step - v_step, true);
        -- after the move. A transaction that wrote to the partition left holds its lock until
        -- it ends, so the truncation's lock (tried, never waited for) passes it over whatever
        -- its xid; one that drew a seq but has not written yet writes into the emptied
        -- partition later, which step 1 marks closed again: nothing is lost either way
        v_at := clock_timestamp();
        v_xid := pg_current_xact_id();
        UPDATE pgqueue.op_log_ring SET closed_at = v_at, closed_xid = v_xid
        WHERE stream = v_ring AND slot = v_cur;
        rotated := true;
    END IF;
END
$$;

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

-- Delete the oldest ops: the prefix of the log, in seq order, whose ops are older than p_keep,
-- were written by a transaction that has finished, and are applied by every replica that is
-- not stale (replica_status's rules, which for a logical replica wait up to p_wait to be
-- exact); at most p_limit. Only that prefix and the op after it are read: a maintenance pass
-- with nothing old to prune costs one index probe (0002 scanned the whole log on every pass:
-- 47 ms at 450,000 ops, every second, growing with the week of ops it keeps). An old op
-- behind a younger one (a long transaction's) waits until that one is old too, so every op up
-- to pruned_through is gone (but for an op of a transaction that was still open when it was
-- pruned past, which takes a transaction older than p_keep; 0002 had the same gap).
-- A leader's write: a replica refuses it (PQ401 naming its leader), as it refuses every queue
-- write; its log is the leader's, and what it may drop is the leader's decision.
CREATE OR REPLACE FUNCTION pgqueue.prune_op_log(p_keep interval,
                                                p_stale_after interval DEFAULT interval '1 day',
                                                p_limit int DEFAULT 10000,
                                                p_wait interval DEFAULT interval '1 second')
RETURNS int
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    v_cutoff timestamptz := now() - p_keep;
    v_xmin xid8 := pg_snapshot_xmin(pg_current_snapshot());
    -- ops from before a promotion are committed whatever their (another leader's) xid says
    v_promoted bigint := (SELECT n.promoted_through FROM pgqueue.node n);
    v_last bigint;
    v_applied bigint;
    v_n int;
BEGIN
    PERFORM pgqueue.require_leader();
    IF p_limit IS NULL OR p_limit < 1 THEN
        RAISE EXCEPTION 'prune_op_log: limit must be >= 1, got %', p_limit USING ERRCODE = '22023';
    END IF;
    PERFORM 1 FROM (SELECT o.seq, o.at, o.xid FROM pgqueue.op_log o ORDER BY o.seq LIMIT 1) f
    WHERE f.at < v_cutoff AND (f.seq <= v_promoted OR f.xid < v_xmin);
    IF NOT FOUND THEN
        RETURN 0;  -- the oldest op is young (or unfinished): nothing to prune
    END IF;
    SELECT max(p.seq) INTO v_last
    FROM (SELECT o.seq, bool_and(o.at < v_cutoff AND (o.seq <= v_promoted OR o.xid < v_xmin))
                            OVER (ORDER BY o.seq) AS old
          FROM (SELECT seq, at, xid FROM pgqueue.op_log ORDER BY seq LIMIT p_limit) o) p
    WHERE p.old;
    IF v_last IS NULL THEN
        -- another prune took the old ops between the two reads (each statement has its own
        -- snapshot): nothing left to do, and a NULL here must never reach the DELETE's bound
        RETURN 0;
    END IF;
    SELECT min(s.applied_seq) INTO v_applied
    FROM pgqueue.replica_status(p_stale_after, p_wait, v_last) s WHERE NOT s.stale;
    v_last := least(v_last, v_applied);  -- least ignores NULL: no replica, no bound
    DELETE FROM pgqueue.op_log o WHERE o.seq <= v_last;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    IF v_n > 0 THEN
        UPDATE pgqueue.node SET pruned_through = greatest(pruned_through, v_last);
    END IF;
    RETURN v_n;
END
$$;

-- The maintenance passes' prune, which is all a worker may prune: ops older than a week,
-- past what every replica seen in the last day applied, without waiting for a logical
-- replica's slot. Other bounds (pgqueue.prune_op_log, `pgqueue oplog prune`) are an
-- operator's choice: a worker must not be able to empty the log or cut a replica off.
CREATE OR REPLACE FUNCTION pgqueue.prune_old_ops(p_limit int) RETURNS int
LANGUAGE sql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
    SELECT pgqueue.prune_op_log(interval '7 days', interval '1 day', p_limit, interval '0')
$$;

-- queries -----------------------------------------------------------------------------------

-- name: maintenance_node
-- What a maintenance pass starts from: this database's role and epoch, and whether it is a
-- Citus cluster's (then the leader's share runs stream by stream: schema_on_citus).
SELECT n.role, n.epoch, EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') AS citus
FROM pgqueue.node n

-- name: schema_on_citus
-- Whether this database is a Citus cluster's: then the calls that lock jobs of several
-- streams (reclaim, cron ticks) go stream by stream, since Citus takes a lock on one node
-- only. From the extension, not pgqueue.layout: correct on either layout, and on a schema
-- older than 0017 too.
SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') AS citus

-- name: claim_maintenance
-- Elect one maintenance runner per database (pgqueue.claim_maintenance): whether this one is.
SELECT pgqueue.claim_maintenance(%(holder)s::uuid, %(ttl_ms)s::bigint) AS elected

-- name: release_maintenance
SELECT pgqueue.release_maintenance(%(holder)s::uuid)

-- name: oplog_prune_old
-- One batch of the maintenance passes' prune (pgqueue.prune_old_ops): how many ops it deleted.
SELECT pgqueue.prune_old_ops(%(limit)s::int) AS pruned

-- name: recycle_op_log
-- The op log's retention by whole partitions, and the ring's rotation (pgqueue.recycle_op_log).
SELECT pruned, rotated FROM pgqueue.recycle_op_log()

-- name: recycle_op_log_of
-- recycle_op_log for one shard group on Citus (%(stream)s: its key, citus_shard_keys), on its node.
SELECT pruned, rotated FROM pgqueue.recycle_op_log(%(stream)s::text)

-- name: set_op_log_retention
SELECT extract(epoch FROM pgqueue.set_op_log_retention(%(seconds)s * interval '1 second'))::float8
       AS seconds

-- name: op_log_retention
-- How long the maintenance passes keep ops, and the ring's partitions in use.
SELECT extract(epoch FROM p.retention)::float8 AS seconds,
       (SELECT count(*) FROM pgqueue.op_log_ring g
        WHERE g.opened_at IS NOT NULL OR g.closed_at IS NOT NULL) AS partitions,
       (SELECT min(g.closed_at) FROM pgqueue.op_log_ring g) AS oldest_closed_at
FROM pgqueue.op_log_policy p

-- name: recycle_ready
-- Truncate the ready entries' partitions that hold no ready job (pgqueue.recycle_ready).
SELECT pgqueue.recycle_ready() AS emptied

-- name: citus_shard_keys
-- On Citus: a key for each shard group of the job table, a stream name hashed into it
-- ('shard:N', the first N whose hash falls in the group's range, checked against Citus's own
-- placement): a maintenance call naming it runs on the group's node (recycle_rings_of).
SELECT s.shardid,
       (SELECT 'shard:' || g FROM generate_series(1, 1000000) g
        WHERE worker_hash('shard:' || g) BETWEEN s.shardminvalue::int AND s.shardmaxvalue::int
          AND get_shard_id_for_distribution_column('pgqueue.job', 'shard:' || g) = s.shardid
        LIMIT 1) AS key
FROM pg_dist_shard s
WHERE s.logicalrelid = 'pgqueue.job'::regclass
ORDER BY s.shardid

-- name: recycle_rings_of
-- The rings' upkeep of one shard group on Citus (pgqueue.recycle_rings), on its node.
SELECT folded, ready, expiry, ops FROM pgqueue.recycle_rings(%(stream)s::text)

-- name: prune_workers
-- Forget workers that stopped heartbeating long ago.
SELECT pgqueue.prune_workers(%(older_than)s::float8) AS pruned

-- name: may_vacuum_job
-- Whether this session may VACUUM the job table: its owner (or a member, or a superuser), or
-- on Postgres 17 and later a role an administrator granted MAINTAIN on it.
SELECT pg_has_role(c.relowner, 'USAGE')
       OR (current_setting('server_version_num')::int >= 170000
           AND has_table_privilege(c.oid, CASE WHEN current_setting('server_version_num')::int >= 170000
                                               THEN 'MAINTAIN' ELSE 'SELECT' END)) AS may
FROM pg_class c WHERE c.oid = 'pgqueue.job'::regclass

-- name: job_dead_tuples
-- Dead row versions in the hot job table (from the statistics collector; about a second old).
SELECT n_live_tup AS live, n_dead_tup AS dead,
       extract(epoch FROM now() - greatest(last_vacuum, last_autovacuum))::float8 AS since_vacuum
FROM pg_stat_user_tables WHERE schemaname = 'pgqueue' AND relname = 'job'

-- name: vacuum_horizon
-- The vacuum horizon of this database's tables, as the 32-bit transaction id it stands at
-- (`horizon`, 0 to 2^32 - 1: compared modulo 2^32, pgqueue/maintenance/vacuum.py): what died
-- in a transaction from it on, no vacuum can remove yet. It is held back by the oldest of: a
-- session of this database with a transaction id or a snapshot (idle in transaction, a long
-- REPEATABLE READ report), a standby's feedback, a replication slot, a prepared transaction.
-- `holder` says which (NULL: none, the horizon is the next transaction id), `held_seconds`
-- for how long (a session's transaction, a prepared transaction; NULL for a slot). The xid
-- itself, not an age: two readings of one holder give the same number. Running vacuums are
-- left out: their snapshots hold back no other vacuum. A role that may not see other roles'
-- sessions sees no horizon they hold: vacuuming then goes by the dead rows alone, as before.
WITH held AS (
    SELECT CASE WHEN a.backend_xmin IS NULL OR age(a.backend_xid) >= age(a.backend_xmin)
                THEN a.backend_xid ELSE a.backend_xmin END AS xid,
           a.backend_xid IS NOT NULL
               AND (a.backend_xmin IS NULL OR age(a.backend_xid) >= age(a.backend_xmin)) AS own,
           format('session %s (%s, %s since %s)', a.pid,
                  coalesce(nullif(a.application_name, ''), a.usename::text, a.backend_type),
                  coalesce(a.state, a.backend_type),
                  to_char(coalesce(a.xact_start, a.backend_start), 'YYYY-MM-DD HH24:MI:SS TZ')) AS holder,
           extract(epoch FROM clock_timestamp() - coalesce(a.xact_start, a.backend_start))::float8
               AS held_seconds
    FROM pg_stat_activity a
    WHERE a.pid <> pg_backend_pid()
      AND (a.datname = current_database() OR a.backend_type = 'walsender')
      AND (a.backend_xid IS NOT NULL OR a.backend_xmin IS NOT NULL)
      -- a vacuum's snapshot holds back no other vacuum (PROC_IN_VACUUM)
      AND a.pid NOT IN (SELECT v.pid FROM pg_stat_progress_vacuum v)
    UNION ALL
    SELECT s.xmin, true, format('replication slot %s', s.slot_name), NULL::float8
    FROM pg_replication_slots s WHERE s.xmin IS NOT NULL
    UNION ALL
    SELECT x.transaction, true, format('prepared transaction %s', quote_literal(x.gid)),
           extract(epoch FROM clock_timestamp() - x.prepared)::float8
    FROM pg_prepared_xacts x WHERE x.database = current_database()
)
SELECT coalesce(h.xid::text::bigint,
                pg_snapshot_xmax(pg_current_snapshot())::text::bigint % 4294967296) AS horizon,
       h.holder, h.held_seconds
FROM (SELECT 1) one LEFT JOIN LATERAL (
    SELECT held.xid, held.holder, held.held_seconds FROM held
    -- the session whose own transaction id holds it, not the snapshots that merely saw that
    -- transaction running
    ORDER BY age(held.xid) DESC, held.own DESC, held.held_seconds DESC NULLS FIRST
    LIMIT 1) h ON true

-- name: job_heap_use
-- What the job table's heap takes, and what its live rows would need (pgqueue/maintenance/
-- vacuum.py shrinks it when it is many times that): a row is its columns' average widths plus
-- its header and line pointer (28 bytes), packed to the table's fillfactor (70 %), as the last
-- VACUUM (ANALYZE) counted them; 1 kB a row when the statistics cannot be read. NULL
-- live_bytes: the table was never analyzed.
SELECT pg_relation_size(c.oid) AS heap_bytes,
       CASE WHEN c.reltuples >= 0 THEN (c.reltuples * w.row_bytes / 0.7)::bigint END AS live_bytes,
       w.row_bytes
FROM pg_class c,
     LATERAL (SELECT 28 + coalesce(sum(s.avg_width), 996)::int AS row_bytes FROM pg_stats s
              WHERE s.schemaname = 'pgqueue' AND s.tablename = 'job') w
WHERE c.oid = 'pgqueue.job'::regclass

-- name: setting_get
-- A setting of this session, to put back after a change (queries.vacuum_full).
SELECT current_setting(%(name)s) AS value

-- name: setting_set
-- Set a setting for the rest of this session (not only the transaction).
SELECT set_config(%(name)s, %(value)s, false) AS value

-- name: maintenance_session
-- The elected runner's session ends by itself when it stays idle this long (a frozen or
-- stopped process keeps its TCP connection alive otherwise): the server closes it, and the
-- next claim elsewhere takes the runner's place.
SELECT set_config('idle_session_timeout', %(timeout)s, false) AS timeout
