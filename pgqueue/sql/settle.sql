-- settle: A worker settles what it leased: Ack, Nack, Return, MarkUndecodable, Upcast.

-- schema: functions -------------------------------------------------------------------------

-- Ack: the job is done and deleted; its history stays in op_log. Returns the ids acked.
-- p_stream: the stream the leases came from (a worker's call names it; on Citus the call then
-- runs on the node holding the stream); NULL (psql, a client of 0016): each stream of these
-- jobs in turn.
CREATE OR REPLACE FUNCTION pgqueue.ack(p_job_ids bigint[], p_lease_ids bigint[],
                                       p_stream text DEFAULT pgqueue.each_stream()) RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    v_stream text;
    v_ids bigint[];
    v_leases bigint[];
BEGIN
    PERFORM pgqueue.require_leader();
    IF p_stream IS NULL THEN
        FOR v_stream IN SELECT DISTINCT j.stream FROM pgqueue.job j WHERE j.id = ANY(p_job_ids) LOOP
            RETURN QUERY SELECT pgqueue.ack(p_job_ids, p_lease_ids, v_stream);
        END LOOP;
        RETURN;
    END IF;
    -- Rows are locked in id order first, so two statements over overlapping jobs (a batched
    -- ack and a renewal round of the same worker) wait for each other instead of deadlocking.
    -- The lock takes the leased jobs of these ids, the DELETE those still under the lease
    -- given (joined to the pairs): Citus (14.0) planned the pairs joined inside the locking
    -- CTE through an intermediate result it then misread.
    WITH input AS (
        SELECT * FROM unnest(p_job_ids, p_lease_ids) AS t(job_id, lease_id)
    ), locked AS MATERIALIZED (
        SELECT j.id FROM pgqueue.job j
        WHERE j.stream = p_stream AND j.id = ANY(p_job_ids)
          AND j.state = 'leased' COLLATE "POSIX"  -- (by id, not a stream's index: job's indexes)
        ORDER BY j.id
        FOR UPDATE OF j
    ), gone AS (
        DELETE FROM pgqueue.job j USING locked l, input i
        WHERE j.stream = p_stream AND j.id = l.id AND j.id = i.job_id AND j.lease_id = i.lease_id
        RETURNING j.id, j.lease_id
    )
    SELECT coalesce(array_agg(g.id ORDER BY g.id), '{}'),
           coalesce(array_agg(g.lease_id ORDER BY g.id), '{}')
    INTO v_ids, v_leases
    FROM gone g;
    -- The ops in a statement of their own (on Citus an INSERT fed by the DELETE's rows would
    -- send them to every node and commit there in two phases).
    INSERT INTO pgqueue.op_log (stream, op, job_id, lease_id, body)
    SELECT p_stream, 'Ack', t.id, t.lease_id, '{}'::jsonb  -- job and lease: the row's columns
    FROM unnest(v_ids, v_leases) AS t(id, lease_id);  -- in id order (unnest's)
    RETURN QUERY SELECT unnest(v_ids);
END
$$;

-- Nack: one failure. attempts + 1; dead when attempts >= max_attempts > 0, otherwise back to
-- pending (or scheduled) after p_retry_in_ms, or the stream's backoff when NULL. A job whose
-- cancel was requested ends as cancelled instead (never retried). Returns one row (dead?, and
-- the state it went to: pending, scheduled, dead or cancelled) or none when the lease is no
-- longer current. The failure is recorded as p_error (its whole text: a traceback) and a
-- one-line summary, p_summary (pgqueue.error_summary of p_error when not given).
CREATE OR REPLACE FUNCTION pgqueue.nack(p_job_id bigint, p_lease_id bigint, p_error text, p_retry_in_ms bigint,
                             p_max_attempts int DEFAULT NULL, p_summary text DEFAULT NULL,
                             p_stream text DEFAULT pgqueue.each_stream())
RETURNS TABLE (dead boolean, state text)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := pgqueue.now_ms();
    j     pgqueue.job;
    v_state text;
    v_summary text;
BEGIN
    j := pgqueue.leased_job(p_job_id, p_lease_id, p_stream);
    IF j.id IS NULL THEN
        RETURN;
    END IF;
    v_summary := pgqueue.error_summary(coalesce(p_summary, p_error));
    IF j.cancel_requested_at IS NOT NULL THEN
        PERFORM pgqueue.finish_cancel(j, 'nack', p_error, v_summary);
        RETURN QUERY SELECT false, 'cancelled'::text;
        RETURN;
    END IF;
    j.attempts := j.attempts + 1;
    IF p_error IS NOT NULL OR p_summary IS NOT NULL THEN
        j.last_error := p_error;
        j.error_summary := v_summary;
    END IF;
    -- A handler's own limit (app.job(max_attempts=...)) applies when the producer set none;
    -- a limit set at enqueue always wins.
    IF NOT j.max_attempts_given THEN
        j.max_attempts := coalesce(p_max_attempts, j.max_attempts);
    END IF;
    IF j.max_attempts > 0 AND j.attempts >= j.max_attempts THEN
        v_state := 'dead';
        UPDATE pgqueue.job SET max_attempts = j.max_attempts WHERE stream = j.stream AND id = j.id;
        PERFORM pgqueue.bury(j.stream, j.id, j.attempts, j.last_error, v_now, j.crashes_by_step,
                             j.error_summary);
    ELSE
        j.not_before := v_now + coalesce(p_retry_in_ms, pgqueue.backoff_ms(j.stream, j.attempts))
                               * interval '1 millisecond';
        j.not_before := date_trunc('milliseconds', j.not_before);
        v_state := CASE WHEN j.not_before > v_now THEN 'scheduled' ELSE 'pending' END;
        UPDATE pgqueue.job
        SET state = v_state, attempts = j.attempts, max_attempts = j.max_attempts,
            last_error = j.last_error, error_summary = j.error_summary, not_before = j.not_before,
            lease_id = NULL, worker_node = NULL,
            worker_instance = NULL, lease_expires_at = NULL
        WHERE stream = j.stream AND id = j.id;
    END IF;
    INSERT INTO pgqueue.op_log (stream, op, job_id, lease_id, body)
    VALUES (j.stream, 'Nack', j.id, p_lease_id, pgqueue.outcome_json(j, v_state, v_now));
    RETURN QUERY SELECT v_state = 'dead', v_state;
END
$$;

-- Worker: give leases back without costing an attempt (graceful shutdown). Checkpoint kept.
-- A job whose cancel was requested ends as cancelled instead. Returns each job let go of, and
-- the state it went to (pending, or cancelled).
CREATE OR REPLACE FUNCTION pgqueue.return_leases(p_job_ids bigint[], p_lease_ids bigint[],
                                                 p_stream text DEFAULT pgqueue.each_stream())
RETURNS TABLE (id bigint, state text)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := pgqueue.now_ms();
    j pgqueue.job;
    i int;
BEGIN
    PERFORM pgqueue.require_leader();
    FOR i IN 1 .. coalesce(cardinality(p_job_ids), 0) LOOP
        j := pgqueue.leased_job(p_job_ids[i], p_lease_ids[i], p_stream);
        CONTINUE WHEN j.id IS NULL;
        IF j.cancel_requested_at IS NOT NULL THEN
            PERFORM pgqueue.finish_cancel(j, 'return');
            id := j.id; state := 'cancelled';
            RETURN NEXT;
            CONTINUE;
        END IF;
        j.state := 'pending';
        j.not_before := least(j.not_before, v_now);
        PERFORM pgqueue.save_job(j, 'ReturnLease', p_lease_ids[i]);
        id := j.id; state := 'pending';
        RETURN NEXT;
    END LOOP;
END
$$;

-- Worker: this code cannot run the job (unknown_kind, payload_version, step_set_changed).
-- Costs no attempt; a job whose cancel was requested ends as cancelled instead of parked.
-- Returns the state it went to (undecodable, or cancelled); NULL when the lease is not current.
CREATE OR REPLACE FUNCTION pgqueue.mark_undecodable(p_job_id bigint, p_lease_id bigint, p_reason text,
                                         p_detail jsonb, p_stream text DEFAULT pgqueue.each_stream()) RETURNS text
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    j pgqueue.job := pgqueue.leased_job(p_job_id, p_lease_id, p_stream);
BEGIN
    PERFORM pgqueue.require_leader();
    IF j.id IS NULL THEN
        RETURN NULL;
    END IF;
    IF j.cancel_requested_at IS NOT NULL THEN
        PERFORM pgqueue.finish_cancel(j, 'undecodable', p_reason);
        RETURN 'cancelled';
    END IF;
    j.state := 'undecodable';
    j.state_reason := p_reason;
    j.state_detail := p_detail;
    PERFORM pgqueue.save_job(j, 'MarkUndecodable', p_lease_id);
    RETURN 'undecodable';
END
$$;

-- Worker: the handler stopped on its job's cancel request (it raised pgqueue.Cancelled, or its
-- task was cancelled), or raised Cancelled itself: the job ends as cancelled, never retried.
-- Returns false when the lease is not current.
CREATE OR REPLACE FUNCTION pgqueue.end_cancelled(p_job_id bigint, p_lease_id bigint,
                                                 p_stream text DEFAULT pgqueue.each_stream()) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    j pgqueue.job := pgqueue.leased_job(p_job_id, p_lease_id, p_stream);
BEGIN
    IF j.id IS NULL THEN
        RETURN false;
    END IF;
    PERFORM pgqueue.finish_cancel(j, 'handler');
    RETURN true;
END
$$;

-- Worker: store an upcast payload and its new schema version as the job resumes.
CREATE OR REPLACE FUNCTION pgqueue.upcast(p_job_id bigint, p_lease_id bigint, p_payload bytea,
                               p_schema_version int, p_stream text DEFAULT pgqueue.each_stream()) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    j pgqueue.job := pgqueue.leased_job(p_job_id, p_lease_id, p_stream);
    v_limit bigint;
BEGIN
    PERFORM pgqueue.require_leader();
    IF j.id IS NULL THEN
        RETURN false;
    END IF;
    v_limit := pgqueue.payload_limit(j.stream);
    IF octet_length(p_payload) > v_limit THEN  -- the limit every way in keeps (see enqueue)
        RAISE EXCEPTION 'upcast payload is % bytes, over the limit of % bytes of stream %',
            octet_length(p_payload), v_limit, j.stream USING ERRCODE = 'PQ413',
            HINT = 'pgqueue.configure_stream(stream, p_max_payload_bytes => N) sets the limit, up to 67108864 (64 MiB)';
    END IF;
    j.payload := p_payload;
    j.schema_version := p_schema_version;
    PERFORM pgqueue.save_job(j, 'Upcast', p_lease_id,
                             jsonb_build_object('payload', pgqueue.b64(p_payload)));
    RETURN true;
END
$$;

-- queries -----------------------------------------------------------------------------------

-- name: ack_jobs
-- Ack many leases of %(stream)s at once; returns the job ids whose lease was still current.
SELECT id FROM pgqueue.ack(%(job_ids)b::bigint[], %(lease_ids)b::bigint[], %(stream)s::text) AS t(id)

-- name: nack_job
-- One failure: back to pending after a backoff, or to the dead letters, or cancelled when a
-- cancel was requested (state says which). No row: lease lost.
SELECT dead, state FROM pgqueue.nack(%(job_id)s::bigint, %(lease_id)s::bigint, %(error)s::text,
                          %(retry_in_ms)s::bigint, %(max_attempts)s::int, %(summary)s::text,
                          %(stream)s::text)

-- name: acked_before
-- Of these (job, lease) pairs, the jobs already acked under that lease: a re-sent ack whose
-- first attempt committed before its reply was lost (looked up by job id, then lease id).
SELECT o.job_id FROM pgqueue.op_log o
JOIN unnest(%(job_ids)b::bigint[], %(lease_ids)b::bigint[]) AS t(job_id, lease_id)
  ON o.job_id = t.job_id AND o.lease_id = t.lease_id
WHERE o.stream = %(stream)s::text AND o.op = 'Ack'

-- name: nacked_before
-- The outcome of a nack of this lease that already committed (no row: there was none): a
-- Nack op, or the Cancel op a nack wrote for a job whose cancel was requested.
SELECT (o.body ->> 'state') = 'dead' AS dead,
       CASE o.op WHEN 'Nack' THEN o.body ->> 'state' ELSE 'cancelled' END AS state
FROM pgqueue.op_log o
WHERE o.stream = %(stream)s::text AND o.job_id = %(job_id)s AND o.lease_id = %(lease_id)s
  AND (o.op = 'Nack' OR (o.op = 'Cancel' AND o.body ->> 'by' = 'nack'))

-- name: end_cancelled
-- The handler stopped on a cancel: the job ends as cancelled. False: the lease was lost.
SELECT pgqueue.end_cancelled(%(job_id)s::bigint, %(lease_id)s::bigint, %(stream)s::text)

-- name: cancelled_before
-- Whether this lease's job already ended as cancelled (a re-sent end_cancelled whose first
-- attempt committed before its reply was lost).
SELECT EXISTS (SELECT 1 FROM pgqueue.op_log o
               WHERE o.stream = %(stream)s::text AND o.job_id = %(job_id)s
                 AND o.lease_id = %(lease_id)s AND o.op = 'Cancel')
