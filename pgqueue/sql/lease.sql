-- lease: Lease (pending -> leased) and Renew (leased -> leased, with the checkpoint).

-- schema: functions -------------------------------------------------------------------------

-- Scheduled jobs of a stream whose time has come become pending (op Promote), oldest first,
-- at most p_limit per call: leasing does this itself, so a due job never waits for a
-- maintenance pass, and then leases in exact priority order.
CREATE OR REPLACE FUNCTION pgqueue.promote_due(p_stream text, p_limit int DEFAULT 1000) RETURNS int
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_now timestamptz := pgqueue.now_ms();
    v_n int;
BEGIN
    WITH due AS (
        SELECT id FROM pgqueue.job
        WHERE stream = p_stream AND state = 'scheduled' AND not_before <= v_now
        ORDER BY not_before, id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ), promoted AS (
        UPDATE pgqueue.job j SET state = 'pending' FROM due WHERE j.id = due.id
        RETURNING j.id, j.stream
    ), logged AS (
        INSERT INTO pgqueue.op_log (stream, op, job_id, body)
        SELECT p.stream, 'Promote', p.id, jsonb_build_object('job_id', p.id, 'state', 'pending')
        FROM promoted p ORDER BY p.id
    )
    SELECT count(*) INTO v_n FROM promoted;
    RETURN v_n;
END
$$;

-- Lease up to p_limit jobs of a stream, by priority DESC then id. The candidate CTE locks
-- with SKIP LOCKED and is MATERIALIZED, so the planner cannot lease more rows than asked and
-- concurrent workers never wait on each other.
CREATE OR REPLACE FUNCTION pgqueue.lease(
    p_stream text, p_limit int, p_visibility_ms bigint, p_worker_node int, p_worker_instance int
) RETURNS SETOF pgqueue.job
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_now timestamptz := pgqueue.now_ms();
    v_exp timestamptz := v_now + p_visibility_ms * interval '1 millisecond';
    -- The same for every job of the call (job and lease ids are the op row's own columns), so
    -- it is built once, not per row: the op-log share of a lease of 500 fell by ~40 %.
    v_body jsonb := jsonb_build_object('worker_node', p_worker_node,
                                       'worker_instance', p_worker_instance,
                                       'expires_at_ms', pgqueue.to_ms(v_exp));
BEGIN
    PERFORM pgqueue.require_leader();
    IF p_limit < 1 OR p_visibility_ms < 0 THEN
        RAISE EXCEPTION 'lease: limit must be >= 1 and visibility >= 0' USING ERRCODE = '22023';
    END IF;
    PERFORM pgqueue.promote_due(p_stream);
    RETURN QUERY
    WITH pick AS MATERIALIZED (
        SELECT id FROM pgqueue.job
        WHERE stream = p_stream AND state = 'pending'
        ORDER BY priority DESC, id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ), leased AS (
        UPDATE pgqueue.job j
        SET state = 'leased', lease_id = nextval('pgqueue.lease_id_seq'),
            worker_node = p_worker_node, worker_instance = p_worker_instance,
            lease_expires_at = v_exp
        FROM pick WHERE j.id = pick.id
        RETURNING j.*
    ), logged AS (
        INSERT INTO pgqueue.op_log (stream, op, job_id, lease_id, body)
        SELECT l.stream, 'Lease', l.id, l.lease_id, v_body
        FROM leased l ORDER BY l.id
    )
    SELECT * FROM leased ORDER BY priority DESC, id;
END
$$;

-- Renew leases and write their checkpoints in the same UPDATE (a HOT update: nothing it
-- changes is indexed). p_checkpoints[i] NULL keeps the stored checkpoint. crashes_by_step is
-- reclaim's, never written here. Returns the leases still current, with their new expiry;
-- a missing one was lost (fenced by lease_id).
CREATE OR REPLACE FUNCTION pgqueue.renew(
    p_job_ids bigint[], p_lease_ids bigint[], p_visibility_ms bigint[], p_checkpoints jsonb[]
) RETURNS TABLE (job_id bigint, lease_id bigint, expires_at timestamptz)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_now timestamptz := pgqueue.now_ms();
BEGIN
    PERFORM pgqueue.require_leader();
    RETURN QUERY
    -- Rows are locked in id order first (see ack): no deadlock with a concurrent batched ack.
    WITH input AS (
        SELECT * FROM unnest(p_job_ids, p_lease_ids, p_visibility_ms, p_checkpoints)
            AS t(job_id, lease_id, visibility_ms, cp)
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
            checkpoint_updated_at = CASE WHEN i.cp IS NULL THEN j.checkpoint_updated_at ELSE v_now END
        FROM input i, locked l
        WHERE j.id = l.id AND j.id = i.job_id AND j.lease_id = i.lease_id AND j.state = 'leased'
        RETURNING j.*
    ), logged AS (
        INSERT INTO pgqueue.op_log (stream, op, job_id, lease_id, body)
        SELECT r.stream, 'Renew', r.id, r.lease_id, jsonb_build_object(
            'job_id', r.id, 'lease_id', r.lease_id,
            'expires_at_ms', pgqueue.to_ms(r.lease_expires_at),
            'checkpoint', pgqueue.checkpoint_json(r))
        FROM renewed r ORDER BY r.id
    )
    SELECT r.id, r.lease_id, r.lease_expires_at FROM renewed r;
END
$$;

-- queries -----------------------------------------------------------------------------------

-- name: lease_jobs
-- Lease up to %(limit)s jobs of a stream by priority DESC then id (due scheduled jobs are
-- promoted to pending first); one new lease id each. Read by position (Lease.from_lease_row):
-- keep the column order.
SELECT id, lease_id, stream, kind, payload, priority, attempts, max_attempts, enqueued_at,
       lease_expires_at, last_completed_step, cursor_step, cursor, checkpoint_updated_at,
       schema_version, step_set_hash,
       nullif(crashes_by_step, '{}'::jsonb) AS crashes_by_step  -- nothing to decode when none
FROM pgqueue.lease(%(stream)s, %(limit)s::int, %(visibility_ms)s::bigint, %(worker_node)s::int,
                   %(worker_instance)s::int)

-- name: renew_leases
-- Extend many leases and write their checkpoints in one UPDATE; returns those still current.
SELECT job_id, lease_id, expires_at
FROM pgqueue.renew(%(job_ids)b::bigint[], %(lease_ids)b::bigint[], %(visibility_ms)b::bigint[],
                   %(checkpoints)b::jsonb[])
