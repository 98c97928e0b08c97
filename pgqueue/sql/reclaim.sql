-- reclaim: Reclaim: expired leases go back to pending, dead_letter or quarantine.

-- schema: tables ----------------------------------------------------------------------------

-- Where reclaim finds the leases that expired: one row per lease or renewal call (not per
-- job) with the expiry it gave and the jobs it gave it to, written in the same statement
-- (pgqueue.lease, pgqueue.renew). Rows are only ever appended; a row whose jobs were acked,
-- renewed or reclaimed since is stale, and reclaim checks every job's own row. Each row goes
-- to the partition of its expiry's 8-second bucket, on a ring of 32 (pgqueue.expiry_slot), and
-- a maintenance pass truncates a partition whole once its buckets are past and reclaim is done
-- with it (pgqueue.recycle_lease_expiry): nothing left for vacuum, whatever holds the horizon.
--
-- Why not job_leased_idx: under a pinned vacuum horizon (a session idle in transaction, a long
-- REPEATABLE READ report, a logical slot) that index keeps the entry of every job leased since,
-- and a reclaim pass that read it read all of them, one heap visit each, every second: a pass
-- grew more expensive with every job handled for as long as the horizon was held. A pass now
-- reads the rows that came due since the last truncation, however long the horizon is held.
-- Derived bookkeeping, not queue state: not in the op log; a promotion fills it from the
-- leased jobs (pgqueue.set_role), and a maintenance runner's first pass (and one every few
-- minutes) still reads every leased job (pgqueue.reclaim_expired_jobs).
CREATE TABLE pgqueue.lease_expiry (
    slot       smallint NOT NULL,
    expires_at timestamptz NOT NULL,
    job_ids    bigint[] NOT NULL,
    -- the stream of those jobs (0017 on: a call leases and renews one stream's), by which
    -- Citus places the row with them; NULL in rows written before
    stream     text
) PARTITION BY LIST (slot);
DO $$
BEGIN
    FOR s IN 0..31 LOOP
        EXECUTE format('CREATE TABLE pgqueue.%I PARTITION OF pgqueue.lease_expiry FOR VALUES IN (%s)',
                       'lease_expiry_' || s, s);
    END LOOP;
END
$$;
CREATE INDEX lease_expiry_at_idx ON pgqueue.lease_expiry (expires_at);

-- schema: functions -------------------------------------------------------------------------

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
        WHERE stream = j.stream AND id = j.id;
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
        PERFORM pgqueue.bury(j.stream, j.id, j.attempts, j.last_error, v_now, j.crashes_by_step,
                             j.error_summary);
    ELSE
        UPDATE pgqueue.job
        SET state = v_state, attempts = j.attempts, last_error = j.last_error,
            error_summary = j.error_summary, state_reason = j.state_reason, state_detail = j.state_detail,
            crashes_by_step = j.crashes_by_step, lease_id = NULL, worker_node = NULL, worker_instance = NULL, lease_expires_at = NULL
        WHERE stream = j.stream AND id = j.id;
    END IF;
    INSERT INTO pgqueue.op_log (stream, op, job_id, lease_id, body)
    VALUES (j.stream, 'Reclaim', j.id, v_lease, pgqueue.outcome_json(j, v_state, v_now));
    state := v_state; step := v_step; crashes := v_crashes;
    RETURN NEXT;
END
$$;

-- Reclaim expired leases of every stream, up to p_limit per call, reading every leased job
-- (job_leased_idx): what a maintenance runner's first pass does, and one every few minutes,
-- so a lease no row of pgqueue.lease_expiry names (written by the previous release during an
-- upgrade, applied on a replica before its promotion) is reclaimed too. Under a held vacuum
-- horizon this reads the entry of every job leased since: the other passes use
-- pgqueue.reclaim_due_jobs. The expiry is re-checked under the row lock, so a renewal that
-- commits first wins (pgqueue.reclaim_job). Returns a row per job reclaimed.
-- p_stream: only that stream's (on Citus the call runs on the node holding it: maintenance
-- there calls it for each stream that has expired leases, pgqueue.streams_to_reclaim).
CREATE OR REPLACE FUNCTION pgqueue.reclaim_expired_jobs(p_limit int DEFAULT 1000,
                                                        p_stream text DEFAULT pgqueue.each_stream())
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
    -- one stream's (Citus routes a statement to one node by a plain equality on stream only,
    -- not by "p_stream IS NULL OR ..."), else every stream's
    IF p_stream IS NOT NULL THEN
        FOR j IN
            SELECT * FROM pgqueue.job
            WHERE stream = p_stream AND state = 'leased' AND lease_expires_at < v_now
            ORDER BY id
            LIMIT p_limit
            FOR UPDATE SKIP LOCKED
        LOOP
            RETURN QUERY SELECT * FROM pgqueue.reclaim_job(j, v_now);
        END LOOP;
        RETURN;
    END IF;
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

-- Reclaim expired leases of every stream, up to p_limit per call, found through the rows of
-- pgqueue.lease_expiry that came due (what every maintenance pass but a runner's first does):
-- however many jobs were leased since the vacuum horizon was pinned, a pass reads the rows of
-- the buckets not yet emptied and one job row per job they name. A job locked by another
-- transaction is passed over (SKIP LOCKED) and found again by the next pass: its row stays
-- until reclaim is done with it (pgqueue.recycle_lease_expiry). Plans that do not depend on
-- statistics (the ring is truncated every few seconds): index scans only.
CREATE OR REPLACE FUNCTION pgqueue.reclaim_due_jobs(p_limit int DEFAULT 1000,
                                                    p_stream text DEFAULT pgqueue.each_stream())
RETURNS TABLE (job_id bigint, stream text, kind text, state text, step text, crashes int)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off
SET enable_mergejoin = off
SET enable_hashjoin = off
SET jit = off  -- (see pgqueue.lease)
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := pgqueue.now_ms();
    j     pgqueue.job;
BEGIN
    PERFORM pgqueue.require_leader();
    -- one stream's (Citus routes a statement to one node by a plain equality on stream only,
    -- not by "p_stream IS NULL OR ..."), else every stream's
    IF p_stream IS NOT NULL THEN
        FOR j IN
            SELECT * FROM pgqueue.job
            WHERE stream = p_stream
              AND id = ANY(ARRAY(SELECT unnest(e.job_ids) FROM pgqueue.lease_expiry e
                                 WHERE e.stream = p_stream AND e.expires_at < v_now))
              AND state = 'leased' COLLATE "POSIX" AND lease_expires_at < v_now
            ORDER BY id
            LIMIT p_limit
            FOR UPDATE SKIP LOCKED
        LOOP
            RETURN QUERY SELECT * FROM pgqueue.reclaim_job(j, v_now);
        END LOOP;
        RETURN;
    END IF;
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
SET jit = off  -- (see pgqueue.lease)
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

-- The count only (what the previous releases' maintenance calls).
CREATE OR REPLACE FUNCTION pgqueue.reclaim_expired(p_limit int DEFAULT 1000) RETURNS int
LANGUAGE sql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$ SELECT count(*)::int FROM pgqueue.reclaim_expired_jobs(p_limit) $$;

-- queries -----------------------------------------------------------------------------------

-- name: streams_to_reclaim
-- On Citus: the streams with expired leases, each then reclaimed on its node (a lock is taken
-- on one node only). %(due_only)s: as pgqueue.lease_expiry names them (reclaim_due), else
-- from every leased job (reclaim_expired).
SELECT DISTINCT e.stream FROM pgqueue.lease_expiry e
WHERE %(due_only)s AND e.expires_at < pgqueue.now_ms() AND e.stream IS NOT NULL
UNION
SELECT DISTINCT j.stream FROM pgqueue.job j
WHERE NOT %(due_only)s AND j.state = 'leased' AND j.lease_expires_at < pgqueue.now_ms()

-- name: reclaim_expired_of
-- reclaim_expired for one stream (Citus).
SELECT job_id, stream, kind, state, step, crashes
FROM pgqueue.reclaim_expired_jobs(%(limit)s::int, %(stream)s::text)

-- name: reclaim_due_of
-- reclaim_due for one stream (Citus).
SELECT job_id, stream, kind, state, step, crashes
FROM pgqueue.reclaim_due_jobs(%(limit)s::int, %(stream)s::text)

-- name: reclaim_expired
-- Return up to %(limit)s expired leases (of every stream) to pending, dead or quarantined (or
-- cancelled, when a cancel was requested): one row per job (its stream, kind and new state;
-- for a crash, the step and its crash count). Reads every leased job.
SELECT job_id, stream, kind, state, step, crashes FROM pgqueue.reclaim_expired_jobs(%(limit)s::int)

-- name: reclaim_due
-- The same, for the leases pgqueue.lease_expiry says came due: what a maintenance pass reads
-- however long the vacuum horizon is held.
SELECT job_id, stream, kind, state, step, crashes FROM pgqueue.reclaim_due_jobs(%(limit)s::int)

-- name: recycle_lease_expiry
-- Truncate the partitions of pgqueue.lease_expiry reclaim is done with.
SELECT pgqueue.recycle_lease_expiry() AS emptied
