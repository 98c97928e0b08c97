-- GENERATED FILE: do not edit. What pgqueue schema revision 0014 changed in the functions and
-- views, object by object, against the code of revision 0013 (frozen by
-- `python -m pgqueue_migrations.new` when revision 0015 was started). Each entry is headed
-- by the object it defines and the one it follows, then its whole text (or `removed`); the
-- code of 0014 is every frozen file up to it applied in order (migrations/frozen.py). Loaded
-- when a database is upgraded to 0014 or downgraded to it; the current definitions live in
-- pgqueue/sql/.

-- @@ function pgqueue.set_role
-- @@ after function pgqueue.op_log_batch

-- queries -----------------------------------------------------------------------------------

-- replica.sql: functions
-- Set this database's role. Promotion to leader bumps the epoch.
CREATE OR REPLACE FUNCTION pgqueue.set_role(p_role text, p_name text DEFAULT NULL, p_leader text DEFAULT NULL)
RETURNS pgqueue.node
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    n pgqueue.node;
    v_was text;
BEGIN
    -- Wait for every transition in flight (each read this table in require_leader, and holds
    -- its ACCESS SHARE lock) before the role changes, so none commits as a leader's write
    -- after a demotion; the ones that come later wait, then read the new role.
    LOCK TABLE pgqueue.node IN ACCESS EXCLUSIVE MODE;
    SELECT role INTO v_was FROM pgqueue.node;
    UPDATE pgqueue.node
    SET epoch = CASE WHEN p_role = 'leader' AND role <> 'leader' THEN epoch + 1 ELSE epoch END,
        role = p_role, name = coalesce(p_name, name),
        leader = CASE WHEN p_role = 'leader' THEN NULL ELSE p_leader END,
        seed_snapshot = CASE WHEN p_role = 'leader' THEN NULL ELSE seed_snapshot END,
        promoted_through = CASE WHEN p_role = 'leader' AND role <> 'leader'
                                THEN greatest(promoted_through,
                                              (SELECT coalesce(max(o.seq), 0) FROM pgqueue.op_log o))
                                ELSE promoted_through END,
        changed_at = now()
    RETURNING * INTO n;
    IF p_role = 'leader' AND v_was IS DISTINCT FROM 'leader' THEN
        -- where reclaim finds the leases the apply path copied (it writes no lease_expiry rows)
        INSERT INTO pgqueue.lease_expiry (slot, expires_at, job_ids)
        SELECT pgqueue.expiry_slot(j.lease_expires_at), j.lease_expires_at, array_agg(j.id ORDER BY j.id)
        FROM pgqueue.job j WHERE j.state = 'leased' GROUP BY j.lease_expires_at;
    END IF;
    RETURN n;
END
$$;
-- @@ function pgqueue.lease
-- @@ after function pgqueue.promote_due

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
-- It returns its own column list, not SETOF pgqueue.job: a caller's prepared statement then
-- never depends on the job table's row type, so a revision may add a column to job while the
-- previous release's workers keep leasing (a rolling upgrade; with SETOF job their cached
-- plans failed with "structure of query does not match function result type").
CREATE OR REPLACE FUNCTION pgqueue.lease(
    p_stream text, p_limit int, p_visibility_ms bigint, p_worker_node int, p_worker_instance int,
    p_request uuid DEFAULT NULL, p_resent boolean DEFAULT false, p_start int DEFAULT NULL
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
    IF v_kinds IS NULL THEN
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
-- @@ function pgqueue.renew
-- @@ after function pgqueue.start_rated

-- Renew leases and write their checkpoints in the same UPDATE (a HOT update: nothing it
-- changes is indexed). p_checkpoints[i] NULL keeps the stored checkpoint. crashes_by_step is
-- reclaim's, never written here. Returns the leases still current, with their new expiry
-- and whether an operator asked to cancel the job (pgqueue.cancel); a missing one was lost
-- (fenced by lease_id). p_started[i] true: the lease's handler has
-- started (a job leased ahead of its handler; see pgqueue.lease), said in the op as well.
CREATE OR REPLACE FUNCTION pgqueue.renew(
    p_job_ids bigint[], p_lease_ids bigint[], p_visibility_ms bigint[], p_checkpoints jsonb[],
    p_started boolean[] DEFAULT NULL
) RETURNS TABLE (job_id bigint, lease_id bigint, expires_at timestamptz,
              cancel_requested boolean)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    v_now timestamptz := pgqueue.now_ms();
BEGIN
    PERFORM pgqueue.require_leader();
    IF EXISTS (SELECT 1 FROM unnest(p_visibility_ms) v WHERE v IS NULL OR v < 0)
       OR cardinality(p_visibility_ms) IS DISTINCT FROM cardinality(p_job_ids) THEN
        -- NULL would leave a lease that never expires, never reclaimed
        RAISE EXCEPTION 'renew: every visibility must be >= 0 ms, one per job'
            USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    -- Rows are locked in id order first (see ack): no deadlock with a concurrent batched ack.
    WITH input AS (
        SELECT * FROM unnest(p_job_ids, p_lease_ids, p_visibility_ms, p_checkpoints,
                             coalesce(p_started, '{}'::boolean[]))
            AS t(job_id, lease_id, visibility_ms, cp, started)
    ), locked AS MATERIALIZED (
        SELECT j.id FROM pgqueue.job j JOIN input i ON j.id = i.job_id AND j.lease_id = i.lease_id
        WHERE j.state = 'leased'
        ORDER BY j.id
        FOR UPDATE OF j
    ), renewed AS (
        UPDATE pgqueue.job j
        SET lease_expires_at = v_now + i.visibility_ms * interval '1 millisecond',
            last_completed_step = CASE WHEN i.cp IS NULL THEN j.last_completed_step
                                       ELSE i.cp ->> 'last_completed_step' END,
            cursor_step = CASE WHEN i.cp IS NULL THEN j.cursor_step ELSE i.cp ->> 'cursor_step' END,
            cursor = CASE WHEN i.cp IS NULL THEN j.cursor ELSE pgqueue.unb64(i.cp ->> 'cursor') END,
            schema_version = CASE WHEN i.cp IS NULL THEN j.schema_version
                                  ELSE (i.cp ->> 'schema_version')::int END,
            step_set_hash = CASE WHEN i.cp IS NULL THEN j.step_set_hash
                                 ELSE i.cp ->> 'step_set_hash' END,
            checkpoint_updated_at = CASE WHEN i.cp IS NULL THEN j.checkpoint_updated_at ELSE v_now END,
            lease_started = j.lease_started OR coalesce(i.started, false)
        FROM input i, locked l
        WHERE j.id = l.id AND j.id = i.job_id AND j.lease_id = i.lease_id AND j.state = 'leased'
        RETURNING j.*
    ), logged AS (
        INSERT INTO pgqueue.op_log (stream, op, job_id, lease_id, body)
        SELECT r.stream, 'Renew', r.id, r.lease_id, jsonb_build_object(
            'job_id', r.id, 'lease_id', r.lease_id,
            'expires_at_ms', pgqueue.to_ms(r.lease_expires_at),
            'checkpoint', pgqueue.checkpoint_json(r), 'started', r.lease_started)
        FROM renewed r ORDER BY r.id
    ), expiring AS (
        -- where reclaim finds them once they expire: one row per new expiry of the call
        INSERT INTO pgqueue.lease_expiry (slot, expires_at, job_ids)
        SELECT pgqueue.expiry_slot(r.lease_expires_at), r.lease_expires_at,
               array_agg(r.id ORDER BY r.id)
        FROM renewed r GROUP BY r.lease_expires_at
    )
    SELECT r.id, r.lease_id, r.lease_expires_at, r.cancel_requested_at IS NOT NULL FROM renewed r;
END
$$;
-- @@ function pgqueue.expiry_slot
-- @@ after function pgqueue.upcast

-- queries -----------------------------------------------------------------------------------

-- reclaim.sql: functions
-- The partition of pgqueue.lease_expiry an expiry goes to: its 8-second bucket on a ring of
-- 32 (256 seconds around), or, when it is more than 120 seconds ahead, the bucket 120 seconds
-- ahead (the row keeps the real time; the pass that empties that partition moves it on). So
-- the buckets of the last 128 seconds are never written to by a lease or renewal begun since
-- (pgqueue.recycle_lease_expiry empties them). By the queue's clock (pgqueue.now_ms).
CREATE OR REPLACE FUNCTION pgqueue.expiry_slot(p_at timestamptz) RETURNS smallint
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT (floor(extract(epoch FROM least(p_at, pgqueue.now_ms() + interval '120 seconds')) / 8)::bigint
            % 32)::smallint
$$;
-- @@ function pgqueue.reclaim_job
-- @@ after function pgqueue.expiry_slot

-- Reclaim one expired lease, its job row locked by the caller (pgqueue.reclaim_expired_jobs,
-- pgqueue.reclaim_due_jobs). It counts one failure and one crash against the step in
-- progress (key '' when none). Quarantine wins over dead when both limits are reached at
-- once. A lease whose handler never started (leased ahead by a worker that died or stalled
-- first; pgqueue.lease) goes back to pending charged nothing, and the job's
-- unstarted_reclaims counts it: from then on each of its leases counts as started, so a job
-- that kills its worker before the start was said is charged from its next lease. A job whose
-- cancel was requested ends as cancelled (its worker died or stalled before it stopped),
-- charged nothing. Returns the job's new state, and for a crash the step and its count.
CREATE OR REPLACE FUNCTION pgqueue.reclaim_job(j pgqueue.job, v_now timestamptz)
RETURNS TABLE (job_id bigint, stream text, kind text, state text, step text, crashes int)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_step  text;
    v_crashes int;
    v_limit int;
    v_state text;
    v_lease bigint := j.lease_id;
BEGIN
    job_id := j.id; stream := j.stream; kind := j.kind;
    IF j.cancel_requested_at IS NOT NULL THEN
        PERFORM pgqueue.finish_cancel(j, 'reclaim', format('lease %s expired (worker %s/%s)',
                                                            v_lease, j.worker_node, j.worker_instance),
                                      format('LeaseExpired: lease %s expired (worker %s/%s)',
                                             v_lease, j.worker_node, j.worker_instance));
        state := 'cancelled';
        RETURN NEXT;
        RETURN;
    END IF;
    IF NOT j.lease_started THEN
        j.unstarted_reclaims := j.unstarted_reclaims + 1;
        UPDATE pgqueue.job
        SET state = 'pending', unstarted_reclaims = j.unstarted_reclaims, lease_id = NULL,
            worker_node = NULL, worker_instance = NULL, lease_expires_at = NULL
        WHERE id = j.id;
        INSERT INTO pgqueue.op_log (stream, op, job_id, lease_id, body)
        VALUES (j.stream, 'Reclaim', j.id, v_lease, pgqueue.outcome_json(j, 'pending', v_now));
        state := 'pending';
        RETURN NEXT;
        RETURN;
    END IF;
    v_step := coalesce(j.cursor_step, '');
    v_crashes := coalesce((j.crashes_by_step ->> v_step)::int, 0) + 1;
    j.crashes_by_step := j.crashes_by_step || jsonb_build_object(v_step, v_crashes);
    j.attempts := j.attempts + 1;
    j.last_error := format('lease %s expired (worker %s/%s)', v_lease, j.worker_node, j.worker_instance);
    j.error_summary := 'LeaseExpired: ' || j.last_error;
    SELECT coalesce((SELECT kc.quarantine_after FROM pgqueue.kind_config kc
                     WHERE kc.stream = j.stream AND kc.kind = j.kind),
                    (SELECT sc.quarantine_after FROM pgqueue.stream_config sc
                     WHERE sc.stream = j.stream),
                    3) INTO v_limit;
    IF v_crashes >= v_limit THEN
        v_state := 'quarantined';
        j.state_reason := 'crashed';
        j.state_detail := jsonb_build_object('step', v_step, 'crashes', v_crashes,
                                             'threshold', v_limit);
    ELSIF j.max_attempts > 0 AND j.attempts >= j.max_attempts THEN
        v_state := 'dead';
    ELSE
        v_state := 'pending';
    END IF;
    IF v_state = 'dead' THEN
        PERFORM pgqueue.bury(j.id, j.attempts, j.last_error, v_now, j.crashes_by_step,
                             j.error_summary);
    ELSE
        UPDATE pgqueue.job
        SET state = v_state, attempts = j.attempts, last_error = j.last_error,
            error_summary = j.error_summary, state_reason = j.state_reason, state_detail = j.state_detail,
            crashes_by_step = j.crashes_by_step, lease_id = NULL, worker_node = NULL, worker_instance = NULL, lease_expires_at = NULL
        WHERE id = j.id;
    END IF;
    INSERT INTO pgqueue.op_log (stream, op, job_id, lease_id, body)
    VALUES (j.stream, 'Reclaim', j.id, v_lease, pgqueue.outcome_json(j, v_state, v_now));
    state := v_state; step := v_step; crashes := v_crashes;
    RETURN NEXT;
END
$$;
-- @@ function pgqueue.reclaim_expired_jobs
-- @@ after function pgqueue.reclaim_job

-- Reclaim expired leases of every stream, up to p_limit per call, reading every leased job
-- (job_leased_idx): what a maintenance runner's first pass does, and one every few minutes,
-- so a lease no row of pgqueue.lease_expiry names (written by the previous release during an
-- upgrade, applied on a replica before its promotion) is reclaimed too. Under a held vacuum
-- horizon this reads the entry of every job leased since: the other passes use
-- pgqueue.reclaim_due_jobs. The expiry is re-checked under the row lock, so a renewal that
-- commits first wins (pgqueue.reclaim_job). Returns a row per job reclaimed.
CREATE OR REPLACE FUNCTION pgqueue.reclaim_expired_jobs(p_limit int DEFAULT 1000)
RETURNS TABLE (job_id bigint, stream text, kind text, state text, step text, crashes int)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := pgqueue.now_ms();
    j     pgqueue.job;
BEGIN
    PERFORM pgqueue.require_leader();
    FOR j IN
        SELECT * FROM pgqueue.job
        WHERE state = 'leased' AND lease_expires_at < v_now
        ORDER BY id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    LOOP
        RETURN QUERY SELECT * FROM pgqueue.reclaim_job(j, v_now);
    END LOOP;
END
$$;
-- @@ function pgqueue.reclaim_due_jobs
-- @@ after function pgqueue.reclaim_expired_jobs

-- Reclaim expired leases of every stream, up to p_limit per call, found through the rows of
-- pgqueue.lease_expiry that came due (what every maintenance pass but a runner's first does):
-- however many jobs were leased since the vacuum horizon was pinned, a pass reads the rows of
-- the buckets not yet emptied and one job row per job they name. A job locked by another
-- transaction is passed over (SKIP LOCKED) and found again by the next pass: its row stays
-- until reclaim is done with it (pgqueue.recycle_lease_expiry). Plans that do not depend on
-- statistics (the ring is truncated every few seconds): index scans only.
CREATE OR REPLACE FUNCTION pgqueue.reclaim_due_jobs(p_limit int DEFAULT 1000)
RETURNS TABLE (job_id bigint, stream text, kind text, state text, step text, crashes int)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off
SET enable_mergejoin = off
SET enable_hashjoin = off
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := pgqueue.now_ms();
    j     pgqueue.job;
BEGIN
    PERFORM pgqueue.require_leader();
    FOR j IN
        SELECT * FROM pgqueue.job
        WHERE id = ANY(ARRAY(SELECT unnest(e.job_ids) FROM pgqueue.lease_expiry e
                             WHERE e.expires_at < v_now))
          AND state = 'leased' AND lease_expires_at < v_now
        ORDER BY id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    LOOP
        RETURN QUERY SELECT * FROM pgqueue.reclaim_job(j, v_now);
    END LOOP;
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
CREATE OR REPLACE FUNCTION pgqueue.recycle_lease_expiry() RETURNS int
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    v_now timestamptz := pgqueue.now_ms();
    v_bucket bigint := floor(extract(epoch FROM v_now) / 8)::bigint;
    v_parts regclass[] := '{}';
    v_part regclass;
    v_busy boolean;
BEGIN
    FOR k IN 1 .. 16 LOOP
        v_part := format('pgqueue.lease_expiry_%s', (v_bucket - k) % 32)::regclass;
        CONTINUE WHEN pg_relation_size(v_part) = 0;  -- empty since its last truncation
        v_parts := v_parts || v_part;
    END LOOP;
    IF cardinality(v_parts) = 0 OR NOT pgqueue.lock_for_truncate(v_parts, 5) THEN
        RETURN 0;
    END IF;
    -- nobody writes these partitions now
    v_parts := ARRAY(
        SELECT p FROM unnest(v_parts) p
        WHERE NOT pgqueue.expiry_unfinished(p, v_now));
    IF cardinality(v_parts) = 0 THEN
        RETURN 0;
    END IF;
    FOREACH v_part IN ARRAY v_parts LOOP
        EXECUTE format('INSERT INTO pgqueue.lease_expiry (slot, expires_at, job_ids) '
                       'SELECT pgqueue.expiry_slot(e.expires_at), e.expires_at, '
                       'array_agg(j.id ORDER BY j.id) FROM %s e '
                       'JOIN pgqueue.job j ON j.id = ANY(e.job_ids) AND j.state = ''leased'' '
                       'AND j.lease_expires_at = e.expires_at '
                       'WHERE e.expires_at >= $1 GROUP BY e.expires_at', v_part)
        USING v_now;
    END LOOP;
    EXECUTE 'TRUNCATE ' || (SELECT string_agg(format('%s', p), ', ') FROM unnest(v_parts) p);
    RETURN cardinality(v_parts);
END
$$;
-- @@ function pgqueue.expiry_unfinished
-- @@ after function pgqueue.recycle_lease_expiry

-- Whether a partition of pgqueue.lease_expiry names a job whose lease expired and that is
-- still leased: reclaim is not done with it (pgqueue.recycle_lease_expiry).
CREATE OR REPLACE FUNCTION pgqueue.expiry_unfinished(p_part regclass, p_now timestamptz)
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
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s e JOIN pgqueue.job j ON j.id = ANY(e.job_ids) '
                   'WHERE j.state = ''leased'' AND j.lease_expires_at < $1)', p_part)
    INTO v_found USING p_now;
    RETURN v_found;
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
    pgqueue.release_maintenance, pgqueue.recycle_ready, pgqueue.recycle_op_log
    TO pgqueue_worker;
