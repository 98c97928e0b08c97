-- deadletter: Dead letters: requeue one to pending.

-- schema: functions -------------------------------------------------------------------------

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

-- queries -----------------------------------------------------------------------------------

-- name: dead_letters
-- The dead letters of a stream, most recently died first.
SELECT * FROM pgqueue.jobs WHERE state = 'dead' AND stream = %(stream)s
ORDER BY died_at DESC, id DESC LIMIT %(limit)s

-- name: dead_letter_stream
-- A dead letter's stream, named by the requeue (on Citus it runs on the stream's node).
SELECT (SELECT stream FROM pgqueue.dead_letter WHERE id = %(job_id)s::bigint) AS stream

-- name: requeue_dead_letter
-- Back to pending with attempts reset; PQ404 when not a dead letter, PQ409 on a dedup holder.
SELECT pgqueue.requeue_dead_letter(%(job_id)s::bigint, %(stream)s::text)

-- name: dead_letter_groups
-- The newest %(window)s dead letters (of a stream, or of all) by kind and error summary, the
-- biggest groups first: what an operator triages first (one failure that killed a thousand
-- jobs is one line). Read through dead_letter_stream_idx, newest first.
SELECT d.kind, d.error_summary, count(*)::bigint AS n
FROM (SELECT kind, error_summary FROM pgqueue.dead_letter
      WHERE (%(stream)s::text IS NULL OR stream = %(stream)s::text)
      ORDER BY id DESC LIMIT %(window)s) d
GROUP BY d.kind, d.error_summary
ORDER BY n DESC, d.kind NULLS FIRST, d.error_summary NULLS FIRST
LIMIT %(groups)s
