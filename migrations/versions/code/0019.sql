-- GENERATED FILE: do not edit. What pgqueue schema revision 0019 changed in the functions and
-- views, object by object, against the code of revision 0018 (frozen by
-- `python -m pgqueue_migrations.new` when revision 0020 was started). Each entry is headed
-- by the object it defines and the one it follows, then its whole text (or `removed`); the
-- code of 0019 is every frozen file up to it applied in order (migrations/frozen.py). Loaded
-- when a database is upgraded to 0019 or downgraded to it; the current definitions live in
-- pgqueue/sql/.

-- @@ function pgqueue.shard_of
-- @@ after function pgqueue.lock_for_truncate

-- A table of pgqueue named for a maintenance call (p_table: 'job', 'ready', 'ready_3', ...):
-- the table itself on one server (p_stream NULL); on a Citus node, the table's shard that
-- holds p_stream's rows there (e.g. pgqueue.ready_3_102010), which the maintenance calls run
-- on that node read and empty (pgqueue.recycle_rings). There a statement naming the
-- distributed table may touch p_stream's rows only, and the shard holds the rows of every
-- stream hashed to it; a shard is written by name only with citus.enable_manual_changes_to_shards,
-- set here for the rest of the transaction.
CREATE OR REPLACE FUNCTION pgqueue.shard_of(p_table text, p_stream text) RETURNS regclass
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_shard bigint;
BEGIN
    IF p_stream IS NULL THEN
        RETURN format('pgqueue.%I', p_table)::regclass;
    END IF;
    PERFORM set_config('citus.enable_manual_changes_to_shards', 'on', true);
    -- by EXECUTE: the function is Citus's, absent on one server
    EXECUTE 'SELECT get_shard_id_for_distribution_column($1, $2)'
        INTO v_shard USING format('pgqueue.%I', p_table)::regclass, p_stream;
    RETURN format('pgqueue.%I', p_table || '_' || v_shard)::regclass;
END
$$;
-- @@ function pgqueue.shards_here
-- @@ after function pgqueue.shard_of

-- Every shard of a table of pgqueue on this Citus node (p_stream: any stream, as for
-- pgqueue.shard_of; NULL: the table itself, on one server): what a maintenance call on one
-- shard group checks of the others on the node (the op log's next partition is empty in all
-- of them before the node's sequence moves on to it, pgqueue.recycle_op_log).
CREATE OR REPLACE FUNCTION pgqueue.shards_here(p_table text, p_stream text) RETURNS regclass[]
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_shards regclass[];
BEGIN
    IF p_stream IS NULL THEN
        RETURN ARRAY[format('pgqueue.%I', p_table)::regclass];
    END IF;
    EXECUTE 'SELECT coalesce(array_agg(format(''pgqueue.%I'', $1 || ''_'' || s.shardid)::regclass), '
            '''{}'') FROM pg_dist_shard s JOIN pg_dist_placement p ON p.shardid = s.shardid '
            'WHERE s.logicalrelid = format(''pgqueue.%I'', $1)::regclass '
            'AND p.groupid = (SELECT groupid FROM pg_dist_local_group)'
        INTO v_shards USING p_table;
    RETURN v_shards;
END
$$;
-- @@ function pgqueue.raise_node_ids
-- @@ after function pgqueue.shards_here

-- On a Citus node whose group is p_group (elsewhere nothing): raise its id sequences so that
-- the next job id, lease id and op seq each exceed the floor given (the highest any node has
-- handed out, plus a margin: pgqueue.cluster.placement), keeping the node's own form
-- k * 1024 + group. Run before streams move onto the node, so that a moved stream's ids and
-- op seqs keep increasing (FIFO by id, replay by seq). True when this node is the one.
CREATE OR REPLACE FUNCTION pgqueue.raise_node_ids(p_group int, p_job bigint, p_lease bigint,
                                                  p_op bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_group int;
    v_floor bigint;
    v_seq text;
    v_last bigint;
BEGIN
    EXECUTE 'SELECT groupid FROM pg_dist_local_group' INTO v_group;
    IF v_group IS DISTINCT FROM p_group THEN
        RETURN false;
    END IF;
    FOR v_seq, v_floor IN VALUES ('job_id_seq', p_job), ('lease_id_seq', p_lease),
                                 ('op_log_seq_seq', p_op) LOOP
        EXECUTE format('SELECT last_value FROM pgqueue.%I', v_seq) INTO v_last;
        IF v_last < v_floor THEN
            -- the first k * 1024 + group above the floor, handed out next
            PERFORM setval(format('pgqueue.%I', v_seq),
                           (v_floor / 1024 + 1) * 1024 + v_group - 1024, true);
        END IF;
    END LOOP;
    RETURN true;
END
$$;
-- @@ function pgqueue.in_stream
-- @@ after function pgqueue.each_stream

-- " in stream S" when a caller named the stream S a job was looked for in (else ''): what a
-- not-found error adds, since on Citus a call given the wrong stream finds nothing.
CREATE OR REPLACE FUNCTION pgqueue.in_stream(p_stream text) RETURNS text
LANGUAGE sql IMMUTABLE
AS $$ SELECT CASE WHEN p_stream <> '' THEN ' in stream ' || p_stream ELSE '' END $$;
-- @@ function pgqueue.operator_job
-- @@ after function pgqueue.leased_job

-- Load a job for an operator, under lock; PQ404 when it is not a live job, PQ422 when leased
-- or not in one of p_states. p_stream: the job's stream, as the client found it (on Citus the
-- verb then runs on the stream's node, and every statement there names it); NULL: looked up.
CREATE OR REPLACE FUNCTION pgqueue.operator_job(p_job_id bigint, p_action text, p_states text[],
                                                p_stream text DEFAULT NULL) RETURNS pgqueue.job
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    j pgqueue.job;
    v_stream text := coalesce(p_stream, pgqueue.stream_of(p_job_id));
BEGIN
    PERFORM pgqueue.require_leader();
    -- found by id, then locked by stream and id (on Citus a lock is taken on one node only)
    SELECT * INTO j FROM pgqueue.job WHERE stream = v_stream AND id = p_job_id FOR UPDATE;
    IF NOT FOUND THEN
        v_stream := coalesce(p_stream, pgqueue.dead_stream_of(p_job_id));
        IF EXISTS (SELECT 1 FROM pgqueue.dead_letter WHERE stream = v_stream AND id = p_job_id) THEN
            RAISE EXCEPTION 'cannot % job %: it is a dead letter (requeue it first)', p_action, p_job_id
                USING ERRCODE = 'PQ422';
        END IF;
        -- (the stream named when the caller gave one: on Citus a wrong one finds nothing)
        RAISE EXCEPTION 'no live job %', p_job_id || pgqueue.in_stream(p_stream)
            USING ERRCODE = 'PQ404';
    END IF;
    IF NOT j.state = ANY (p_states) THEN
        -- p_action completes "cannot ... job N"; the verb is named as the CLI names it
        RAISE EXCEPTION 'cannot % job %: it is %, and % applies only to % jobs', p_action, p_job_id,
            j.state, CASE p_action WHEN 'skip a step of' THEN 'skip-step'
                                   WHEN 'accept the step set of' THEN 'accept-step-set'
                                   ELSE p_action END,
            array_to_string(p_states, ' or ') USING ERRCODE = 'PQ422';
    END IF;
    RETURN j;
END
$$;
-- @@ function pgqueue.fold_job_counts
-- @@ after enable trigger dead_letter_count_delete

-- Add the deltas of past periods into job_count and truncate their partitions (the last
-- period's, this one's and the next's are still being written), all in one lock request
-- (pgqueue.lock_for_truncate, never queued for) and one TRUNCATE; when another session holds
-- one of them (a fold running elsewhere, a count being read) they are left for the next call.
-- Counts read job_count plus every delta left, so they are exact whenever this runs. Returns
-- how many delta rows it folded. On Citus, p_stream names a shard group: the call runs on its
-- node and folds that group's shards (pgqueue.shard_of, pgqueue.recycle_rings); on one
-- server it is left out (pgqueue.each_stream: the whole tables).
CREATE OR REPLACE FUNCTION pgqueue.fold_job_counts(p_stream text DEFAULT pgqueue.each_stream())
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    v_slots smallint[];
    v_parts regclass[];
    v_n bigint;
BEGIN
    v_slots := ARRAY(SELECT s FROM unnest(pgqueue.ring_past_slots()) s
                     WHERE pg_relation_size(pgqueue.shard_of('job_count_delta_' || s, p_stream)) > 0
                     ORDER BY s);
    v_parts := ARRAY(SELECT pgqueue.shard_of('job_count_delta_' || s, p_stream)
                     FROM unnest(v_slots) s);
    IF cardinality(v_parts) = 0 OR NOT pgqueue.lock_for_truncate(v_parts, 5) THEN
        RETURN 0;
    END IF;
    EXECUTE format(
        'WITH d AS (SELECT c.stream, c.state, c.delta FROM %s c WHERE c.slot = ANY($1)), '
        'folded AS ('
        '    INSERT INTO %s AS c (stream, state, n) '
        '    SELECT d.stream, d.state, sum(d.delta) FROM d GROUP BY d.stream, d.state '
        '    ORDER BY d.stream, d.state '  -- one lock order: concurrent folds never deadlock
        '    ON CONFLICT (stream, state) DO UPDATE SET n = c.n + EXCLUDED.n '
        '    RETURNING 1) '
        'SELECT count(*) FROM d',
        pgqueue.shard_of('job_count_delta', p_stream), pgqueue.shard_of('job_count', p_stream))
    INTO v_n USING v_slots;
    EXECUTE 'TRUNCATE ' || (SELECT string_agg(format('%s', p), ', ') FROM unnest(v_parts) p);
    RETURN v_n;
END
$$;
-- @@ function pgqueue.recycle_lease_expiry
-- @@ after function pgqueue.reclaim_due_jobs

-- Empty the partitions of pgqueue.lease_expiry whose buckets are past (those of the last 128
-- seconds: nothing begun since writes to them) by TRUNCATE, once reclaim is done with them:
-- no job they name is still leased with an expired lease (one a reclaim passed over, locked,
-- keeps its partition for the next pass). A row whose expiry is still ahead (a long
-- visibility) moves on to its bucket first, with only the jobs whose lease it still is. The
-- lock is only tried, never queued for (pgqueue.lock_for_truncate); a partition another
-- session holds is left for the next pass. Returns how many partitions were emptied. A
-- worker's (maintenance passes): SECURITY DEFINER for the TRUNCATE, which needs the owner.
CREATE OR REPLACE FUNCTION pgqueue.recycle_lease_expiry(p_stream text DEFAULT pgqueue.each_stream())
RETURNS int
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    v_now timestamptz := pgqueue.now_ms();
    v_bucket bigint := floor(extract(epoch FROM v_now) / 8)::bigint;
    v_job regclass := pgqueue.shard_of('job', p_stream);
    v_parts regclass[] := '{}';
    v_part regclass;
BEGIN
    FOR k IN 1 .. 16 LOOP
        v_part := pgqueue.shard_of('lease_expiry_' || (v_bucket - k) % 32, p_stream);
        CONTINUE WHEN pg_relation_size(v_part) = 0;  -- empty since its last truncation
        v_parts := v_parts || v_part;
    END LOOP;
    IF cardinality(v_parts) = 0 OR NOT pgqueue.lock_for_truncate(v_parts, 5) THEN
        RETURN 0;
    END IF;
    -- nobody writes these partitions now
    v_parts := ARRAY(
        SELECT p FROM unnest(v_parts) p
        WHERE NOT pgqueue.expiry_unfinished(p, v_now, v_job));
    IF cardinality(v_parts) = 0 THEN
        RETURN 0;
    END IF;
    FOREACH v_part IN ARRAY v_parts LOOP
        EXECUTE format('INSERT INTO %s (slot, expires_at, job_ids, stream) '
                       'SELECT pgqueue.expiry_slot(e.expires_at), e.expires_at, '
                       'array_agg(j.id ORDER BY j.id), j.stream FROM %s e '
                       'JOIN %s j ON j.id = ANY(e.job_ids) AND j.state = ''leased'' '
                       'AND j.lease_expires_at = e.expires_at '
                       'WHERE e.expires_at >= $1 GROUP BY e.expires_at, j.stream',
                       pgqueue.shard_of('lease_expiry', p_stream), v_part, v_job)
        USING v_now;
    END LOOP;
    EXECUTE 'TRUNCATE ' || (SELECT string_agg(format('%s', p), ', ') FROM unnest(v_parts) p);
    RETURN cardinality(v_parts);
END
$$;
-- @@ function pgqueue.expiry_unfinished
-- @@ after function pgqueue.recycle_lease_expiry

-- Whether a partition of pgqueue.lease_expiry names a job whose lease expired and that is
-- still leased: reclaim is not done with it (pgqueue.recycle_lease_expiry). p_job: the job
-- table, or on Citus its shard beside the partition's (pgqueue.shard_of).
CREATE OR REPLACE FUNCTION pgqueue.expiry_unfinished(p_part regclass, p_now timestamptz,
                                                     p_job regclass DEFAULT 'pgqueue.job')
RETURNS boolean
LANGUAGE plpgsql STABLE
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
DECLARE
    v_found boolean;
BEGIN
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s e JOIN %s j ON j.id = ANY(e.job_ids) '
                   'WHERE j.state = ''leased'' AND j.lease_expires_at < $1)', p_part, p_job)
    INTO v_found USING p_now;
    RETURN v_found;
END
$$;
-- @@ function pgqueue.requeue_dead_letter
-- @@ after function pgqueue.reclaim_expired

-- queries -----------------------------------------------------------------------------------

-- deadletter.sql: functions
-- Return a dead letter to pending with attempts reset (checkpoint kept, so steps resume).
-- Raises PQ404 when the id is not a dead letter, PQ409 when a live job holds its dedup key.
-- p_stream: the dead letter's stream (on Citus the call runs on its node); NULL: looked up.
CREATE OR REPLACE FUNCTION pgqueue.requeue_dead_letter(p_job_id bigint, p_stream text DEFAULT pgqueue.each_stream())
RETURNS void
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    v_now  timestamptz := pgqueue.now_ms();
    d      pgqueue.dead_letter;
    v_holder bigint;
    v_index  text;
    v_stream text := coalesce(p_stream, pgqueue.dead_stream_of(p_job_id));
BEGIN
    PERFORM pgqueue.require_leader();
    -- found by id, then locked by stream and id (on Citus a lock is taken on one node only)
    SELECT * INTO d FROM pgqueue.dead_letter WHERE stream = v_stream AND id = p_job_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'job % is not a dead letter%', p_job_id, pgqueue.in_stream(p_stream)
            USING ERRCODE = 'PQ404';
    END IF;
    IF d.dedup_key IS NOT NULL THEN
        v_holder := pgqueue.dedup_holder(d.stream, d.dedup_key, d.id);
        IF v_holder IS NOT NULL THEN
            PERFORM pgqueue.refuse_dedup(format('requeue dead letter %s', p_job_id), v_holder);
        END IF;
    END IF;
    DELETE FROM pgqueue.dead_letter WHERE stream = d.stream AND id = p_job_id;
    BEGIN
        INSERT INTO pgqueue.job (id, stream, kind, payload, priority, state, not_before,
            enqueued_at, dedup_key, attempts, max_attempts, last_error, last_completed_step,
            cursor_step, cursor, checkpoint_updated_at, schema_version, step_set_hash,
            crashes_by_step, max_attempts_given, concurrency_key, error_summary, timeout_ms)
        VALUES (d.id, d.stream, d.kind, d.payload, d.priority, 'pending', v_now, d.enqueued_at,
            d.dedup_key, 0, d.max_attempts, d.last_error, d.last_completed_step, d.cursor_step,
            d.cursor, d.checkpoint_updated_at, d.schema_version, d.step_set_hash,
            d.crashes_by_step, d.max_attempts_given, d.concurrency_key, d.error_summary,
            d.timeout_ms);
    EXCEPTION WHEN unique_violation THEN
        GET STACKED DIAGNOSTICS v_index = CONSTRAINT_NAME;
        IF NOT pgqueue.is_dedup_index(v_index) THEN
            RAISE;
        END IF;
        -- an enqueue still open at the check above took the key and committed (the INSERT
        -- waited for it); a new statement sees it, so the holder is named as above
        PERFORM pgqueue.refuse_dedup(format('requeue dead letter %s', p_job_id),
                                     pgqueue.dedup_holder(d.stream, d.dedup_key, d.id));
    END;
    INSERT INTO pgqueue.op_log (stream, op, job_id, body)
    VALUES (d.stream, 'RequeueDeadLetter', d.id, jsonb_build_object(
        'job_id', d.id, 'attempts', 0, 'not_before_ms', pgqueue.to_ms(v_now), 'state', 'pending'));
END
$$;
-- @@ function pgqueue.cancel
-- @@ after function pgqueue.notify_cancel

-- Operator: cancel a job. One that is not leased (live or dead) is removed for good at once
-- ('cancelled'). One a worker holds is asked to stop ('requested'): the request is recorded
-- once (op RequestCancel) and the worker told at once (NOTIFY pgqueue_cancel, the lease id),
-- or by its next renewal; the job then ends as cancelled when its handler stops, and also when
-- its lease ends any other way but an ack (pgqueue.finish_cancel): it never runs again. A
-- handler that finishes first is acked: the cancel came too late, as its history shows.
CREATE OR REPLACE FUNCTION pgqueue.cancel(p_job_id bigint, p_stream text DEFAULT pgqueue.each_stream()) RETURNS text
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    v_now timestamptz := pgqueue.now_ms();
    j pgqueue.job;
    v_stream text := coalesce(p_stream, pgqueue.stream_of(p_job_id));
BEGIN
    PERFORM pgqueue.require_leader();
    -- found by id, then locked by stream and id (on Citus a lock is taken on one node only)
    SELECT * INTO j FROM pgqueue.job WHERE stream = v_stream AND id = p_job_id FOR UPDATE;
    IF FOUND THEN
        IF j.state = 'leased' THEN
            IF j.cancel_requested_at IS NULL THEN
                UPDATE pgqueue.job SET cancel_requested_at = v_now
                WHERE stream = j.stream AND id = p_job_id;
                INSERT INTO pgqueue.op_log (stream, op, job_id, lease_id, body)
                VALUES (j.stream, 'RequestCancel', j.id, j.lease_id,
                        jsonb_build_object('job_id', j.id, 'lease_id', j.lease_id,
                                           'at_ms', pgqueue.to_ms(v_now)));
                PERFORM pgqueue.notify_cancel(j.lease_id);
            END IF;
            RETURN 'requested';
        END IF;
        DELETE FROM pgqueue.job WHERE stream = j.stream AND id = p_job_id;
        INSERT INTO pgqueue.op_log (stream, op, job_id, body)
        VALUES (j.stream, 'Cancel', p_job_id, jsonb_build_object('job_id', p_job_id, 'was', j.state));
        RETURN 'cancelled';
    END IF;
    v_stream := coalesce(p_stream, pgqueue.dead_stream_of(p_job_id));
    DELETE FROM pgqueue.dead_letter WHERE stream = v_stream AND id = p_job_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no job %', p_job_id || pgqueue.in_stream(p_stream) USING ERRCODE = 'PQ404';
    END IF;
    INSERT INTO pgqueue.op_log (stream, op, job_id, body)
    VALUES (v_stream, 'Cancel', p_job_id, jsonb_build_object('job_id', p_job_id, 'was', 'dead'));
    RETURN 'cancelled';
END
$$;
-- @@ function pgqueue.save_kind_config
-- @@ after function pgqueue.configure_kind_settings

-- The one writer of kind_config (configure_kind_settings and the op's apply): the row as given, or
-- none when it sets nothing.
CREATE OR REPLACE FUNCTION pgqueue.save_kind_config(p pgqueue.kind_config) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF num_nonnulls(p.quarantine_after, p.max_concurrency, p.rate_count, p.rate_ms,
                    p.max_per_key) = 0 THEN
        DELETE FROM pgqueue.kind_config WHERE stream = p.stream AND kind = p.kind;
        RETURN;
    END IF;
    -- (the columns named: Citus routes a row by a stream it can see, not by p.*)
    INSERT INTO pgqueue.kind_config AS k (stream, kind, quarantine_after, max_concurrency,
                                          rate_count, rate_ms, max_per_key)
    VALUES (p.stream, p.kind, p.quarantine_after, p.max_concurrency, p.rate_count, p.rate_ms,
            p.max_per_key)
    ON CONFLICT (stream, kind) DO UPDATE
    SET quarantine_after = excluded.quarantine_after, max_concurrency = excluded.max_concurrency,
        rate_count = excluded.rate_count, rate_ms = excluded.rate_ms,
        max_per_key = excluded.max_per_key;
END
$$;
-- @@ function pgqueue.recycle_ready
-- @@ after function pgqueue.release_maintenance

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
-- @@ function pgqueue.recycle_rings
-- @@ after function pgqueue.recycle_ready

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
-- @@ function pgqueue.recycle_op_log
-- @@ after function pgqueue.recycle_rings

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
-- @@ GRANT EXECUTE ON FUNCTION pgqueue.lease, pgqueue.renew, pgqueue.start_rated, pgqueue.ack, pgqueue.na
-- @@ after GRANT EXECUTE ON FUNCTION pgqueue.enqueue, pgqueue.enqueue_one TO pgqueue_producer;

-- worker
GRANT EXECUTE ON FUNCTION pgqueue.lease, pgqueue.renew, pgqueue.start_rated, pgqueue.ack,
    pgqueue.nack, pgqueue.return_leases, pgqueue.mark_undecodable, pgqueue.end_cancelled,
    pgqueue.upcast, pgqueue.reclaim_expired_jobs, pgqueue.reclaim_expired,
    pgqueue.reclaim_due_jobs, pgqueue.recycle_lease_expiry,
    pgqueue.register_step_set, pgqueue.configure_kind_settings, pgqueue.configure_kind,
    pgqueue.register_worker, pgqueue.heartbeat_worker, pgqueue.deregister_worker,
    pgqueue.prune_workers, pgqueue.claim_due_schedules, pgqueue.advance_schedule,
    pgqueue.prune_old_ops, pgqueue.touch_replicas, pgqueue.claim_maintenance,
    pgqueue.release_maintenance, pgqueue.recycle_ready, pgqueue.recycle_op_log,
    pgqueue.recycle_rings
    TO pgqueue_worker;
