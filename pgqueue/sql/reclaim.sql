-- reclaim: Reclaim: expired leases go back to pending, dead_letter or quarantine.

-- schema: functions -------------------------------------------------------------------------

-- Reclaim expired leases of every stream, up to p_limit per call. Each counts one failure and
-- one crash against the step in progress (key '' when none). Quarantine wins over dead when
-- both limits are reached at once. A lease whose handler never started (leased ahead by a
-- worker that died or stalled first; pgqueue.lease) goes back to pending charged nothing, and
-- the job's unstarted_reclaims counts it: from then on each of its leases counts as started,
-- so a job that kills its worker before the start was said is charged from its next lease.
-- The expiry is re-checked under the row lock, so a renewal that commits first wins. A job
-- whose cancel was requested ends as cancelled (its worker died or stalled before it stopped),
-- charged nothing. Returns a row per job reclaimed: its new state, and for a crash the step
-- and its count.
CREATE OR REPLACE FUNCTION pgqueue.reclaim_expired_jobs(p_limit int DEFAULT 1000)
RETURNS TABLE (job_id bigint, stream text, kind text, state text, step text, crashes int)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_now   timestamptz := pgqueue.now_ms();
    j       pgqueue.job;
    v_step  text;
    v_crashes int;
    v_limit int;
    v_state text;
    v_lease bigint;
BEGIN
    PERFORM pgqueue.require_leader();
    FOR j IN
        SELECT * FROM pgqueue.job
        WHERE state = 'leased' AND lease_expires_at < v_now
        ORDER BY id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    LOOP
        v_lease := j.lease_id;
        IF j.cancel_requested_at IS NOT NULL THEN
            PERFORM pgqueue.finish_cancel(j, 'reclaim', format('lease %s expired (worker %s/%s)',
                                                                v_lease, j.worker_node, j.worker_instance),
                                          format('LeaseExpired: lease %s expired (worker %s/%s)',
                                                 v_lease, j.worker_node, j.worker_instance));
            job_id := j.id; stream := j.stream; kind := j.kind; state := 'cancelled';
            step := NULL; crashes := NULL;
            RETURN NEXT;
            CONTINUE;
        END IF;
        IF NOT j.lease_started THEN
            j.unstarted_reclaims := j.unstarted_reclaims + 1;
            UPDATE pgqueue.job
            SET state = 'pending', unstarted_reclaims = j.unstarted_reclaims, lease_id = NULL,
                worker_node = NULL, worker_instance = NULL, lease_expires_at = NULL
            WHERE id = j.id;
            INSERT INTO pgqueue.op_log (stream, op, job_id, lease_id, body)
            VALUES (j.stream, 'Reclaim', j.id, v_lease, pgqueue.outcome_json(j, 'pending', v_now));
            job_id := j.id; stream := j.stream; kind := j.kind; state := 'pending';
            step := NULL; crashes := NULL;
            RETURN NEXT;
            CONTINUE;
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
        job_id := j.id; stream := j.stream; kind := j.kind; state := v_state;
        step := v_step; crashes := v_crashes;
        RETURN NEXT;
    END LOOP;
END
$$;

-- The count only (what the previous releases' maintenance calls).
CREATE OR REPLACE FUNCTION pgqueue.reclaim_expired(p_limit int DEFAULT 1000) RETURNS int
LANGUAGE sql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$ SELECT count(*)::int FROM pgqueue.reclaim_expired_jobs(p_limit) $$;

-- queries -----------------------------------------------------------------------------------

-- name: reclaim_expired
-- Return up to %(limit)s expired leases (of every stream) to pending, dead or quarantined (or
-- cancelled, when a cancel was requested): one row per job (its stream, kind and new state;
-- for a crash, the step and its crash count).
SELECT job_id, stream, kind, state, step, crashes FROM pgqueue.reclaim_expired_jobs(%(limit)s::int)
