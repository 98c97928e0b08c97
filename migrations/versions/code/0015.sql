-- GENERATED FILE: do not edit. What pgqueue schema revision 0015 changed in the functions and
-- views, object by object, against the code of revision 0014 (frozen by
-- `python -m pgqueue_migrations.new` when revision 0016 was started). Each entry is headed
-- by the object it defines and the one it follows, then its whole text (or `removed`); the
-- code of 0015 is every frozen file up to it applied in order (migrations/frozen.py). Loaded
-- when a database is upgraded to 0015 or downgraded to it; the current definitions live in
-- pgqueue/sql/.

-- @@ function pgqueue.lock_for_truncate
-- @@ after function pgqueue.ring_past_slots

-- Lock a ring's past partitions for truncation (pgqueue.recycle_ready, pgqueue.fold_job_counts,
-- pgqueue.recycle_op_log) in one request: NOWAIT, tried p_tries times 2 ms apart, then (when
-- p_wait_ms > 0) once more queued for at most p_wait_ms. A queued ACCESS EXCLUSIVE request
-- makes every lease (which reads all the ready ring's partitions) wait behind it, so the wait
-- is short; but without it a busy queue's leases, which overlap back to back, left no moment
-- free of them, no partition was emptied, and the entries piled up in front of every lease
-- (measured: 8 truncations in 10 minutes of a held horizon at 1,000 jobs/s). False: another
-- session held one of them throughout (they are left for the next pass). Held to the end of
-- the transaction.
CREATE OR REPLACE FUNCTION pgqueue.lock_for_truncate(p_parts regclass[], p_tries int,
                                                     p_wait_ms int DEFAULT 0)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_list text := (SELECT string_agg(format('%s', p), ', ') FROM unnest(p_parts) p);
    v_timeout text := current_setting('lock_timeout');
BEGIN
    FOR i IN 1 .. p_tries LOOP
        BEGIN
            EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE NOWAIT', v_list);
            RETURN true;
        EXCEPTION WHEN lock_not_available THEN
            PERFORM pg_sleep(0.002);
        END;
    END LOOP;
    IF coalesce(p_wait_ms, 0) <= 0 THEN
        RETURN false;
    END IF;
    BEGIN
        PERFORM set_config('lock_timeout', p_wait_ms || 'ms', true);
        EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', v_list);
        PERFORM set_config('lock_timeout', v_timeout, true);
        RETURN true;
    EXCEPTION WHEN lock_not_available THEN
        PERFORM set_config('lock_timeout', v_timeout, true);
        RETURN false;
    END;
END
$$;
-- @@ function pgqueue.take_ready_range
-- @@ after function pgqueue.promote_due

-- Take out the first p_limit ready entries of a stream in lease order with a priority from
-- p_low to p_high and, within it, a job id above p_after_id, that no other lease holds (SKIP
-- LOCKED); their job ids (once each) in lease order. One range of ready_order_idx: with
-- p_low = p_high the scan starts at (stream, priority, p_after_id).
CREATE OR REPLACE FUNCTION pgqueue.take_ready_range(p_stream text, p_limit int, p_low smallint,
                                                    p_high smallint, p_after_id bigint)
RETURNS bigint[]
LANGUAGE sql VOLATILE
AS $$
    WITH taken AS (
        SELECT r.slot, r.ctid AS at FROM pgqueue.ready r
        WHERE r.stream = p_stream AND r.priority >= p_low AND r.priority <= p_high
          AND r.job_id > p_after_id
        ORDER BY r.priority DESC, r.job_id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ), gone AS (
        DELETE FROM pgqueue.ready r USING taken t WHERE r.slot = t.slot AND r.ctid = t.at
        RETURNING r.job_id, r.priority
    )
    SELECT coalesce(array_agg(g.job_id ORDER BY g.priority DESC, g.job_id), '{}')
    FROM (SELECT DISTINCT gone.job_id, gone.priority FROM gone) g
$$;
-- @@ function pgqueue.take_ready_after
-- @@ after function pgqueue.take_ready_range

-- The ready entries of a stream a lease takes when its caller says where its last lease ended,
-- (p_after_priority, p_after_id): the first p_limit in lease order, leaving out those of that
-- priority up to that id, taken out now; their job ids in lease order. Three ranges
-- (pgqueue.take_ready_range), each read only while fewer than p_limit were found: the higher
-- priorities, that priority after that id, the lower priorities. The second starts at that id,
-- never reading the entries of the jobs leased before it, which under a held vacuum horizon
-- stay in the index (every lease from the start of the stream stepped over all of them:
-- 1,500-3,500 buffers per lease at 1,000 jobs/s). The caller looks from the start again every
-- so often (pgqueue.client.position.LeasePosition): an entry behind the position (a job that
-- became pending again, or committed after later ones) waits for that.
CREATE OR REPLACE FUNCTION pgqueue.take_ready_after(p_stream text, p_limit int,
                                                    p_after_priority smallint,
                                                    p_after_id bigint)
RETURNS bigint[]
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_ids bigint[];
BEGIN
    v_ids := '{}';
    IF p_after_priority < 32767 THEN
        v_ids := pgqueue.take_ready_range(p_stream, p_limit, (p_after_priority + 1)::smallint,
                                          32767::smallint, -9223372036854775808);
    END IF;
    IF cardinality(v_ids) < p_limit THEN
        v_ids := v_ids || pgqueue.take_ready_range(p_stream, p_limit - cardinality(v_ids),
                                                   p_after_priority, p_after_priority,
                                                   p_after_id);
    END IF;
    IF cardinality(v_ids) < p_limit AND p_after_priority > -32768 THEN
        v_ids := v_ids || pgqueue.take_ready_range(p_stream, p_limit - cardinality(v_ids),
                                                   (-32768)::smallint,
                                                   (p_after_priority - 1)::smallint,
                                                   -9223372036854775808);
    END IF;
    RETURN v_ids;
END
$$;
-- @@ function pgqueue.lease
-- @@ after function pgqueue.take_ready_after

-- Lease up to p_limit jobs of a stream, by priority DESC then id. Candidates are locked with
-- SKIP LOCKED, so concurrent workers never wait on each other, and chosen before the UPDATE,
-- so it cannot lease more rows than asked.
-- Limits (kind_config: max_concurrency, rate_count per rate_ms, max_per_key) hold across
-- every worker:
-- for each limited kind of the stream the lease takes the kind's lock (pgqueue.lock_kind)
-- without waiting (a kind another lease is counting is skipped by this one, never waited for),
-- counts the kind's leased jobs and its leases in the window, and takes at most the room
-- left; jobs of kinds at their limit are passed over, so they hold back no other kind. A
-- stream without limited kinds pays one probe of kind_config.
-- p_start: how many of the jobs (in the order returned) the caller starts at once; the rest
-- are leased ahead (prefetch), not started: their Lease ops say started false, the caller's
-- renewals say when each starts, and reclaim charges nothing to a lease that never started. A
-- job once reclaimed unstarted counts as started at every later lease (unstarted_reclaims).
-- NULL (Queue.lease, an older worker): every job counts as started. A job of a rate-limited
-- kind leased ahead comes back with rate_at_start: its handler must first pass
-- pgqueue.start_rated, which counts it in the kind's window then (or defers it).
-- p_after_priority, p_after_id: where the caller's last lease of the stream ended (its last
-- job's priority and id): the jobs of that priority up to that id are left out, and the scan
-- starts there instead of stepping over the entries of every job leased before
-- (pgqueue.take_ready_after). NULL: from the start. A stream with limited kinds always
-- starts from the start.
-- It returns its own column list, not SETOF pgqueue.job: a caller's prepared statement then
-- never depends on the job table's row type, so a revision may add a column to job while the
-- previous release's workers keep leasing (a rolling upgrade; with SETOF job their cached
-- plans failed with "structure of query does not match function result type").
CREATE OR REPLACE FUNCTION pgqueue.lease(
    p_stream text, p_limit int, p_visibility_ms bigint, p_worker_node int, p_worker_instance int,
    p_request uuid DEFAULT NULL, p_resent boolean DEFAULT false, p_start int DEFAULT NULL,
    p_after_priority smallint DEFAULT NULL, p_after_id bigint DEFAULT NULL
) RETURNS TABLE (
    id bigint, lease_id bigint, stream text, kind text, payload bytea, priority smallint,
    attempts int, max_attempts int, enqueued_at timestamptz, lease_expires_at timestamptz,
    lease_started boolean, last_completed_step text, cursor_step text, cursor bytea,
    checkpoint_updated_at timestamptz, schema_version int, step_set_hash text,
    crashes_by_step jsonb, not_before timestamptz, trace_context jsonb, rate_at_start boolean,
    timeout_ms int
)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
-- Its plans must not depend on statistics: pgqueue.ready's partitions are truncated every few
-- seconds (and the parent is never analyzed), and the job table's pages are mostly dead ones
-- while the horizon is held. Taken from statistics that said "a few rows", a bitmap scan and
-- a sort read every ready entry of the stream and a sequential scan every page of job.
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off
SET enable_mergejoin = off
SET enable_hashjoin = off
AS $$
#variable_conflict use_column
DECLARE
    v_seen record;
    v_now timestamptz := pgqueue.now_ms();
    v_exp timestamptz := v_now + p_visibility_ms * interval '1 millisecond';
    -- The same for every job of the call (job and lease ids are the op row's own columns), so
    -- it is built once, not per row: the op-log share of a lease of 500 fell by ~40 %.
    v_body jsonb := jsonb_build_object('worker_node', p_worker_node,
                                       'worker_instance', p_worker_instance,
                                       'expires_at_ms', pgqueue.to_ms(v_exp));
    v_body_ahead jsonb := v_body || '{"started": false}'::jsonb;
    v_ids bigint[];
    v_rated bigint[] := '{}';  -- of rate-limited kinds (pgqueue.pick_within_limits)
    v_kinds text[];
    v_max int[];
    v_rate int[];
    v_rate_ms bigint[];
    v_per_key int[];
BEGIN
    PERFORM pgqueue.require_leader();
    IF p_limit IS NULL OR p_limit < 1 OR p_visibility_ms IS NULL OR p_visibility_ms < 0
       OR p_start < 0 THEN
        RAISE EXCEPTION 'lease: limit must be >= 1, visibility >= 0 and start >= 0'
            USING ERRCODE = '22023';
    END IF;
    IF p_request IS NOT NULL THEN
        -- A lease re-sent after its reply was lost: the leases its first attempt granted that
        -- are still current, not a second set (which would be orphaned until reclaim charged
        -- each job an attempt and a crash). A first attempt still running is waited for.
        v_seen := pgqueue.request_begin(p_request, p_resent);
        IF v_seen.seq IS NOT NULL THEN
            RETURN QUERY
            SELECT j.id, j.lease_id, j.stream, j.kind, j.payload, j.priority, j.attempts,
                   j.max_attempts, j.enqueued_at, j.lease_expires_at, j.lease_started,
                   j.last_completed_step,
                   j.cursor_step, j.cursor, j.checkpoint_updated_at, j.schema_version,
                   j.step_set_hash, j.crashes_by_step, j.not_before, j.trace_context,
                   NOT j.lease_started AND EXISTS (
                       SELECT 1 FROM pgqueue.kind_config k
                       WHERE k.stream = j.stream AND k.kind = j.kind AND k.rate_count IS NOT NULL),
                   j.timeout_ms
            FROM pgqueue.job j
            JOIN pgqueue.op_log o ON o.job_id = j.id AND o.lease_id = j.lease_id
            WHERE o.seq >= v_seen.seq AND o.xid = v_seen.xid AND o.op = 'Lease'
              AND j.state = 'leased'
            ORDER BY j.priority DESC, j.id;
            RETURN;
        END IF;
    END IF;
    PERFORM pgqueue.promote_due(p_stream);
    SELECT array_agg(k.kind ORDER BY k.kind), array_agg(k.max_concurrency ORDER BY k.kind),
           array_agg(k.rate_count ORDER BY k.kind), array_agg(k.rate_ms ORDER BY k.kind),
           array_agg(k.max_per_key ORDER BY k.kind)
    INTO v_kinds, v_max, v_rate, v_rate_ms, v_per_key
    FROM pgqueue.kind_config k
    WHERE k.stream = p_stream AND (k.max_concurrency IS NOT NULL OR k.rate_count IS NOT NULL
                                   OR k.max_per_key IS NOT NULL);
    IF v_kinds IS NULL AND p_after_id IS NOT NULL AND p_after_priority IS NOT NULL THEN
        v_ids := pgqueue.take_ready_after(p_stream, p_limit, p_after_priority, p_after_id);
        PERFORM set_config('pgqueue.ready_taken', 'on', true);
    ELSIF v_kinds IS NULL THEN
        -- the first ready entries in lease order that no other lease holds (SKIP LOCKED),
        -- taken out now (by where they are: the trigger of the UPDATE below would look each
        -- one up by key in every partition); their jobs are leased below where still pending
        -- (an entry whose job is not is just gone)
        WITH taken AS (
            SELECT r.slot, r.ctid AS at FROM pgqueue.ready r
            WHERE r.stream = p_stream
            ORDER BY r.priority DESC, r.job_id
            LIMIT p_limit
            FOR UPDATE SKIP LOCKED
        ), gone AS (
            DELETE FROM pgqueue.ready r USING taken t
            WHERE r.slot = t.slot AND r.ctid = t.at
            RETURNING r.job_id, r.priority
        )
        -- in lease order (p_start counts in it), a job with two entries once
        SELECT coalesce(array_agg(g.job_id ORDER BY g.priority DESC, g.job_id), '{}') INTO v_ids
        FROM (SELECT DISTINCT gone.job_id, gone.priority FROM gone) g;
        PERFORM set_config('pgqueue.ready_taken', 'on', true);
    ELSE
        -- The limits count other leases under a kind's lock; only READ COMMITTED gives each
        -- statement a snapshot taken after that lock (a transaction snapshot from before it
        -- would miss leases committed meanwhile, and exceed the limit).
        IF current_setting('transaction_isolation') <> 'read committed' THEN
            RAISE EXCEPTION 'lease: stream % has kinds with limits, which a lease enforces only at READ COMMITTED, not %',
                quote_literal(p_stream), upper(current_setting('transaction_isolation'))
                USING ERRCODE = '0A000',
                      HINT = 'lease outside the transaction, or SET TRANSACTION ISOLATION LEVEL READ COMMITTED';
        END IF;
        -- this lease's UPDATE removes the entries of the jobs it takes (its trigger does)
        PERFORM set_config('pgqueue.ready_taken', 'off', true);
        SELECT p.ids, p.rated INTO v_ids, v_rated
        FROM pgqueue.pick_within_limits(p_stream, p_limit, v_kinds, v_max, v_rate, v_rate_ms,
                                        v_per_key, p_start) p;
    END IF;
    RETURN QUERY
    WITH ranked AS (
        SELECT t.id, t.n FROM unnest(v_ids) WITH ORDINALITY AS t(id, n)
    ), leased AS (
        UPDATE pgqueue.job j
        SET state = 'leased', lease_id = nextval('pgqueue.lease_id_seq'),
            worker_node = p_worker_node, worker_instance = p_worker_instance,
            lease_expires_at = v_exp,
            lease_started = (p_start IS NULL OR r.n <= p_start OR j.unstarted_reclaims > 0)
        FROM ranked r WHERE j.id = ANY(v_ids) AND j.id = r.id
          -- (an entry's job no longer pending is not leased; one another transaction holds,
          -- an operator's, is waited for and leased if still pending then: that transaction
          -- never waits for the entry this lease holds, pgqueue.ready_drop)
          AND j.state = 'pending'
        RETURNING j.id, j.lease_id, j.stream, j.kind, j.payload, j.priority, j.attempts,
                  j.max_attempts, j.enqueued_at, j.lease_expires_at, j.lease_started,
                  j.last_completed_step,
                  j.cursor_step, j.cursor, j.checkpoint_updated_at, j.schema_version,
                  j.step_set_hash, j.crashes_by_step, j.not_before, j.trace_context,
                  NOT j.lease_started AND j.id = ANY(v_rated) AS rate_at_start, j.timeout_ms
    ), logged AS (
        INSERT INTO pgqueue.op_log (stream, op, job_id, lease_id, body, request)
        SELECT l.stream, 'Lease', l.id, l.lease_id,
               CASE WHEN l.lease_started THEN v_body ELSE v_body_ahead END,
               CASE WHEN l.id = (SELECT min(id) FROM leased) THEN p_request END
        FROM leased l ORDER BY l.id
    ), expiring AS (
        -- where reclaim finds them once they expire: one row for the call
        INSERT INTO pgqueue.lease_expiry (slot, expires_at, job_ids)
        SELECT pgqueue.expiry_slot(v_exp), v_exp, array_agg(l.id ORDER BY l.id) FROM leased l
        HAVING count(*) > 0
    )
    SELECT l.* FROM leased l ORDER BY l.priority DESC, l.id;
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
CREATE OR REPLACE FUNCTION pgqueue.recycle_ready() RETURNS int
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    v_now smallint := pgqueue.ring_slot();
    v_part regclass;
    v_parts regclass[] := '{}';
    v_slot smallint;
    v_live int;
BEGIN
    FOREACH v_slot IN ARRAY pgqueue.ring_past_slots() LOOP
        v_part := format('pgqueue.ready_%s', v_slot)::regclass;
        CONTINUE WHEN pg_relation_size(v_part) = 0;  -- empty since its last truncation
        EXECUTE format('SELECT count(*) FROM (SELECT 1 FROM %s r JOIN pgqueue.job j '
                       'ON j.id = r.job_id AND j.state = ''pending'' LIMIT 1001) c', v_part)
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
        EXECUTE format('INSERT INTO pgqueue.ready (slot, stream, priority, job_id, kind) '
                       'SELECT DISTINCT ON (r.job_id) $1, r.stream, r.priority, r.job_id, r.kind '
                       'FROM %s r JOIN pgqueue.job j ON j.id = r.job_id '
                       'AND j.state = ''pending'' AND j.priority = r.priority', v_part)
        USING v_now;
    END LOOP;
    EXECUTE 'TRUNCATE ' || (SELECT string_agg(format('%s', p), ', ') FROM unnest(v_parts) p);
    RETURN cardinality(v_parts);
END
$$;
