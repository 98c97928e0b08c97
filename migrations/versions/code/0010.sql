-- GENERATED FILE: do not edit. What pgqueue schema revision 0010 changed in the functions and
-- views, object by object, against the code of revision 0009 (frozen by
-- `python -m pgqueue_migrations.new` when revision 0011 was started). Each entry is headed
-- by the object it defines and the one it follows, then its whole text (or `removed`); the
-- code of 0010 is every frozen file up to it applied in order (migrations/frozen.py). Loaded
-- when a database is upgraded to 0010 or downgraded to it; the current definitions live in
-- pgqueue/sql/.

-- @@ function pgqueue.error_summary
-- @@ after (start)
-- core.sql: functions
-- A failure's one-line summary from what was said about it: a traceback's last line (Python's
-- `ExceptionType: message`), else its first non-blank line; whitespace runs made one space, at
-- most 200 characters. Normalises every summary a transition stores (a worker's, or one a
-- caller gave), and gives one to rows and calls that carry only the error text (written
-- before 0010, or by a client that sends none).
CREATE OR REPLACE FUNCTION pgqueue.error_summary(p_error text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN length(l.line) > 200 THEN left(l.line, 199) || '…' ELSE l.line END
    FROM (SELECT nullif(btrim(regexp_replace(
              CASE WHEN p_error LIKE 'Traceback (most recent call last):%'
                   THEN (SELECT x FROM regexp_split_to_table(p_error, E'\n') WITH ORDINALITY
                                       AS t(x, n)
                         WHERE x ~ '\S' ORDER BY n DESC LIMIT 1)
                   ELSE (SELECT x FROM regexp_split_to_table(p_error, E'\n') WITH ORDINALITY
                                       AS t(x, n)
                         WHERE x ~ '\S' ORDER BY n LIMIT 1) END,
              '\s+', ' ', 'g')), '') AS line) l
$$;
-- @@ view pgqueue.jobs
-- @@ after function pgqueue.error_summary

-- Every job pgqueue knows, live or dead, in one shape: what q.job() and operators read.
CREATE OR REPLACE VIEW pgqueue.jobs AS
SELECT id, stream, kind, state, payload, priority, attempts, max_attempts, not_before,
       enqueued_at, dedup_key, last_error, state_reason, state_detail, lease_id, worker_node,
       worker_instance, lease_expires_at, NULL::timestamptz AS died_at, last_completed_step, cursor_step, cursor,
       checkpoint_updated_at, schema_version, step_set_hash, crashes_by_step, concurrency_key,
       cancel_requested_at, coalesce(error_summary, pgqueue.error_summary(last_error)) AS error_summary,
       timeout_ms
FROM pgqueue.job
UNION ALL
SELECT id, stream, kind, 'dead', payload, priority, attempts, max_attempts, NULL, enqueued_at,
       dedup_key, last_error, NULL, NULL, NULL, NULL, NULL, NULL, died_at, last_completed_step,
       cursor_step, cursor, checkpoint_updated_at, schema_version, step_set_hash, crashes_by_step,
       concurrency_key, NULL, coalesce(error_summary, pgqueue.error_summary(last_error)), timeout_ms
FROM pgqueue.dead_letter;
-- @@ function pgqueue.outcome_json
-- @@ after function pgqueue.checkpoint_json

-- The body every failure-like op (Nack, Reclaim) carries: the job's resulting values.
CREATE OR REPLACE FUNCTION pgqueue.outcome_json(j pgqueue.job, p_state text, p_at timestamptz) RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT jsonb_build_object(
        'job_id', j.id,
        'state', p_state,
        'attempts', j.attempts,
        'max_attempts', j.max_attempts,
        'not_before_ms', pgqueue.to_ms(j.not_before),
        'last_error', j.last_error,
        'error_summary', j.error_summary,
        'state_reason', j.state_reason,
        'state_detail', j.state_detail,
        'crashes_by_step', j.crashes_by_step,
        'unstarted_reclaims', j.unstarted_reclaims,
        'at_ms', pgqueue.to_ms(p_at))
$$;
-- @@ function pgqueue.job_state_json
-- @@ after function pgqueue.outcome_json

-- The job's resulting state as generic ops carry it.
CREATE OR REPLACE FUNCTION pgqueue.job_state_json(j pgqueue.job) RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT jsonb_build_object(
        'job_id', j.id, 'state', j.state, 'attempts', j.attempts, 'max_attempts', j.max_attempts,
        'not_before_ms', pgqueue.to_ms(j.not_before), 'last_error', j.last_error,
        'error_summary', j.error_summary, 'state_reason', j.state_reason, 'state_detail', j.state_detail,
        'checkpoint', pgqueue.checkpoint_json(j))
$$;
-- @@ function pgqueue.bury
-- @@ after function pgqueue.backoff_ms

-- Move a job row to dead_letter (leader and apply share this).
CREATE OR REPLACE FUNCTION pgqueue.bury(p_job_id bigint, p_attempts int, p_error text, p_died_at timestamptz,
                             p_crashes jsonb, p_summary text) RETURNS void
LANGUAGE sql VOLATILE
AS $$
    WITH gone AS (DELETE FROM pgqueue.job WHERE id = p_job_id RETURNING *)
    INSERT INTO pgqueue.dead_letter (id, stream, kind, payload, priority, enqueued_at, dedup_key,
        attempts, max_attempts, last_error, died_at, last_completed_step, cursor_step, cursor,
        checkpoint_updated_at, schema_version, step_set_hash, crashes_by_step, max_attempts_given,
        concurrency_key, error_summary, timeout_ms)
    SELECT id, stream, kind, payload, priority, enqueued_at, dedup_key,
        p_attempts, max_attempts, p_error, p_died_at, last_completed_step, cursor_step, cursor,
        checkpoint_updated_at, schema_version, step_set_hash, p_crashes, max_attempts_given,
        concurrency_key, p_summary, timeout_ms
    FROM gone
$$;
-- @@ function pgqueue.save_job
-- @@ after function pgqueue.bury

CREATE OR REPLACE FUNCTION pgqueue.save_job(j pgqueue.job, p_op text, p_lease_id bigint, p_extra jsonb DEFAULT '{}')
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF j.state <> 'leased' THEN
        j.lease_id := NULL; j.worker_node := NULL; j.worker_instance := NULL;
        j.lease_expires_at := NULL;
    END IF;
    UPDATE pgqueue.job
    SET payload = j.payload, state = j.state, attempts = j.attempts,
        max_attempts = j.max_attempts, not_before = j.not_before, last_error = j.last_error,
        error_summary = j.error_summary, state_reason = j.state_reason, state_detail = j.state_detail, lease_id = j.lease_id,
        worker_node = j.worker_node, worker_instance = j.worker_instance,
        lease_expires_at = j.lease_expires_at, last_completed_step = j.last_completed_step,
        cursor_step = j.cursor_step, cursor = j.cursor,
        checkpoint_updated_at = j.checkpoint_updated_at, schema_version = j.schema_version,
        step_set_hash = j.step_set_hash, crashes_by_step = j.crashes_by_step
    WHERE id = j.id;
    INSERT INTO pgqueue.op_log (stream, op, job_id, lease_id, body)
    VALUES (j.stream, p_op, j.id, p_lease_id, pgqueue.job_state_json(j) || p_extra);
END
$$;
-- @@ function pgqueue.apply_job_state
-- @@ after function pgqueue.save_job

-- The apply side of save_job: set every field the body carries.
CREATE OR REPLACE FUNCTION pgqueue.apply_job_state(p_job_id bigint, b jsonb) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
BEGIN
    UPDATE pgqueue.job
    SET payload = CASE WHEN b ? 'payload' THEN pgqueue.unb64(b ->> 'payload') ELSE payload END,
        state = b ->> 'state', attempts = (b ->> 'attempts')::int,
        max_attempts = (b ->> 'max_attempts')::int,
        not_before = pgqueue.from_ms((b ->> 'not_before_ms')::bigint),
        last_error = b ->> 'last_error',
        error_summary = CASE WHEN b ? 'error_summary' THEN b ->> 'error_summary' ELSE error_summary END,
        state_reason = b ->> 'state_reason',
        state_detail = nullif(b -> 'state_detail', 'null'::jsonb),
        lease_id = CASE WHEN b ->> 'state' = 'leased' THEN lease_id END,
        worker_node = CASE WHEN b ->> 'state' = 'leased' THEN worker_node END,
        worker_instance = CASE WHEN b ->> 'state' = 'leased' THEN worker_instance END,
        lease_expires_at = CASE WHEN b ->> 'state' = 'leased' THEN lease_expires_at END,
        last_completed_step = b #>> '{checkpoint,last_completed_step}',
        cursor_step = b #>> '{checkpoint,cursor_step}',
        cursor = pgqueue.unb64(b #>> '{checkpoint,cursor}'),
        checkpoint_updated_at = pgqueue.from_ms((b #>> '{checkpoint,updated_at_ms}')::bigint),
        schema_version = (b #>> '{checkpoint,schema_version}')::int,
        step_set_hash = b #>> '{checkpoint,step_set_hash}',
        crashes_by_step = b #> '{checkpoint,crashes_by_step}'
    WHERE id = p_job_id;
END
$$;
-- @@ function pgqueue.finish_cancel
-- @@ after function pgqueue.apply_job_state

-- A leased job whose cancel was requested (pgqueue.cancel) ends as cancelled: deleted, its op
-- Cancel (was leased, by whom, and the error when a failure ended it). Every end of such a
-- lease but an ack comes here (the handler stopping, a nack, a reclaim, a give-back,
-- parking), so a cancelled job never runs again.
CREATE OR REPLACE FUNCTION pgqueue.finish_cancel(j pgqueue.job, p_by text, p_error text DEFAULT NULL,
                                                 p_summary text DEFAULT NULL)
RETURNS void
LANGUAGE sql VOLATILE
AS $$
    DELETE FROM pgqueue.job WHERE id = j.id;
    INSERT INTO pgqueue.op_log (stream, op, job_id, lease_id, body)
    VALUES (j.stream, 'Cancel', j.id, j.lease_id, jsonb_strip_nulls(jsonb_build_object(
        'job_id', j.id, 'was', 'leased', 'by', p_by,
        'requested_at_ms', pgqueue.to_ms(j.cancel_requested_at), 'error', p_error,
        'error_summary', p_summary)));
$$;
-- @@ function pgqueue.apply_op
-- @@ after function pgqueue.op_body

-- Apply one op's effect to the state tables. Ops carry resulting values, never increments.
CREATE OR REPLACE FUNCTION pgqueue.apply_op(p_op text, p_job_id bigint, p_lease_id bigint, b jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
BEGIN
    CASE p_op
    WHEN 'Enqueue' THEN
        -- max_attempts is null in an op of a job whose producer did not set it (0005 on)
        INSERT INTO pgqueue.job (id, stream, kind, payload, priority, state, not_before,
                                 enqueued_at, dedup_key, attempts, max_attempts, schema_version,
                                 max_attempts_given, trace_context, concurrency_key,
                                 timeout_ms)
        VALUES (p_job_id, b ->> 'stream', b ->> 'kind', pgqueue.unb64(b ->> 'payload'),
                (b ->> 'priority')::smallint, b ->> 'state',
                pgqueue.from_ms((b ->> 'not_before_ms')::bigint),
                pgqueue.from_ms((b ->> 'enqueued_at_ms')::bigint),
                pgqueue.unb64(b ->> 'dedup_key'), (b ->> 'attempts')::int,
                coalesce((b ->> 'max_attempts')::int, 25), (b ->> 'schema_version')::int,
                (b ->> 'max_attempts') IS NOT NULL, b -> 'trace', b ->> 'concurrency_key',
                (b ->> 'timeout_ms')::int)
        ON CONFLICT (id) DO NOTHING;
    WHEN 'Lease' THEN
        UPDATE pgqueue.job
        SET state = 'leased', lease_id = p_lease_id, worker_node = (b ->> 'worker_node')::int,
            worker_instance = (b ->> 'worker_instance')::int,
            lease_expires_at = pgqueue.from_ms((b ->> 'expires_at_ms')::bigint),
            lease_started = coalesce((b ->> 'started')::boolean, true)
        WHERE id = p_job_id;
    WHEN 'Renew' THEN
        UPDATE pgqueue.job
        SET lease_expires_at = pgqueue.from_ms((b ->> 'expires_at_ms')::bigint),
            last_completed_step = b #>> '{checkpoint,last_completed_step}',
            cursor_step = b #>> '{checkpoint,cursor_step}',
            cursor = pgqueue.unb64(b #>> '{checkpoint,cursor}'),
            checkpoint_updated_at = pgqueue.from_ms((b #>> '{checkpoint,updated_at_ms}')::bigint),
            schema_version = (b #>> '{checkpoint,schema_version}')::int,
            step_set_hash = b #>> '{checkpoint,step_set_hash}',
            lease_started = coalesce((b ->> 'started')::boolean, lease_started)
        WHERE id = p_job_id AND lease_id = p_lease_id;
    WHEN 'Ack' THEN
        DELETE FROM pgqueue.job WHERE id = p_job_id;
    WHEN 'Promote' THEN
        UPDATE pgqueue.job SET state = 'pending' WHERE id = p_job_id AND state = 'scheduled';
    WHEN 'Nack', 'Reclaim' THEN
        IF b ->> 'state' = 'dead' THEN
            UPDATE pgqueue.job SET max_attempts = (b ->> 'max_attempts')::int WHERE id = p_job_id;
            PERFORM pgqueue.bury(p_job_id, (b ->> 'attempts')::int, b ->> 'last_error',
                                 pgqueue.from_ms((b ->> 'at_ms')::bigint), b -> 'crashes_by_step',
                                 b ->> 'error_summary');
        ELSE
            UPDATE pgqueue.job
            SET state = b ->> 'state', attempts = (b ->> 'attempts')::int,
                max_attempts = (b ->> 'max_attempts')::int,
                last_error = b ->> 'last_error', error_summary = b ->> 'error_summary',
                state_reason = b ->> 'state_reason',
                state_detail = nullif(b -> 'state_detail', 'null'::jsonb),
                not_before = pgqueue.from_ms((b ->> 'not_before_ms')::bigint),
                crashes_by_step = b -> 'crashes_by_step',
                unstarted_reclaims = coalesce((b ->> 'unstarted_reclaims')::int, unstarted_reclaims),
                lease_id = NULL, worker_node = NULL, worker_instance = NULL, lease_expires_at = NULL
            WHERE id = p_job_id;
        END IF;
    WHEN 'RequeueDeadLetter' THEN
        WITH d AS (DELETE FROM pgqueue.dead_letter WHERE id = p_job_id RETURNING *)
        INSERT INTO pgqueue.job (id, stream, kind, payload, priority, state, not_before, enqueued_at,
            dedup_key, attempts, max_attempts, last_error, last_completed_step, cursor_step, cursor,
            checkpoint_updated_at, schema_version, step_set_hash, crashes_by_step,
            max_attempts_given, concurrency_key, error_summary, timeout_ms)
        SELECT d.id, d.stream, d.kind, d.payload, d.priority, b ->> 'state',
            pgqueue.from_ms((b ->> 'not_before_ms')::bigint), d.enqueued_at, d.dedup_key,
            (b ->> 'attempts')::int, d.max_attempts, d.last_error, d.last_completed_step,
            d.cursor_step, d.cursor, d.checkpoint_updated_at, d.schema_version, d.step_set_hash,
            d.crashes_by_step, d.max_attempts_given, d.concurrency_key, d.error_summary,
            d.timeout_ms
        FROM d;
    WHEN 'ReturnLease', 'MarkUndecodable', 'Upcast', 'Release', 'Rewind', 'Restart', 'SkipStep',
         'AcceptStepSet' THEN
        PERFORM pgqueue.apply_job_state(p_job_id, b);
    WHEN 'RequestCancel' THEN
        UPDATE pgqueue.job SET cancel_requested_at = pgqueue.from_ms((b ->> 'at_ms')::bigint)
        WHERE id = p_job_id;
    WHEN 'Cancel' THEN
        DELETE FROM pgqueue.job WHERE id = p_job_id;
        DELETE FROM pgqueue.dead_letter WHERE id = p_job_id;
    WHEN 'RegisterStepSet' THEN
        INSERT INTO pgqueue.step_set (hash, kind, steps, created_at)
        VALUES (b ->> 'hash', b ->> 'kind', b -> 'steps', pgqueue.from_ms((b ->> 'created_at_ms')::bigint))
        ON CONFLICT (hash) DO NOTHING;
    WHEN 'ConfigureKind' THEN  -- the kind's whole settings (older ops: quarantine_after alone)
        PERFORM pgqueue.save_kind_config(jsonb_populate_record(NULL::pgqueue.kind_config, b));
    WHEN 'UpsertSchedule' THEN
        INSERT INTO pgqueue.schedule AS s (stream, name, cron, timezone, payload, kind, priority,
            max_attempts, catch_up, misfire_grace_ms, paused, next_run_at, last_fired_at, updated_at)
        VALUES (b ->> 'stream', b ->> 'name', b ->> 'cron', b ->> 'timezone',
            pgqueue.unb64(b ->> 'payload'), b ->> 'kind', (b ->> 'priority')::smallint,
            (b ->> 'max_attempts')::int, b ->> 'catch_up', (b ->> 'misfire_grace_ms')::bigint,
            (b ->> 'paused')::boolean, pgqueue.from_ms((b ->> 'next_run_at_ms')::bigint),
            pgqueue.from_ms((b ->> 'last_fired_at_ms')::bigint),
            pgqueue.from_ms((b ->> 'updated_at_ms')::bigint))
        ON CONFLICT (stream, name) DO UPDATE SET
            cron = excluded.cron, timezone = excluded.timezone, payload = excluded.payload,
            kind = excluded.kind, priority = excluded.priority,
            max_attempts = excluded.max_attempts, catch_up = excluded.catch_up,
            misfire_grace_ms = excluded.misfire_grace_ms, paused = excluded.paused,
            next_run_at = excluded.next_run_at, last_fired_at = excluded.last_fired_at,
            updated_at = excluded.updated_at;
    WHEN 'UpdateScheduleNextRun' THEN
        UPDATE pgqueue.schedule
        SET next_run_at = pgqueue.from_ms((b ->> 'next_run_at_ms')::bigint),
            last_fired_at = pgqueue.from_ms((b ->> 'last_fired_at_ms')::bigint)
        WHERE stream = b ->> 'stream' AND name = b ->> 'name';
    WHEN 'RemoveSchedule' THEN
        DELETE FROM pgqueue.schedule WHERE stream = b ->> 'stream' AND name = b ->> 'name';
    WHEN 'ConfigureStream' THEN
        -- ops written before revision 0005 carry no max_payload_bytes: the default then
        INSERT INTO pgqueue.stream_config AS s (stream, retry_base_ms, retry_cap_ms,
                                                quarantine_after, max_payload_bytes)
        SELECT r.stream, r.retry_base_ms, r.retry_cap_ms, r.quarantine_after,
               coalesce(r.max_payload_bytes, 16777216)
        FROM jsonb_populate_record(NULL::pgqueue.stream_config, b) r
        ON CONFLICT (stream) DO UPDATE SET
            retry_base_ms = excluded.retry_base_ms, retry_cap_ms = excluded.retry_cap_ms,
            quarantine_after = excluded.quarantine_after,
            max_payload_bytes = excluded.max_payload_bytes;
    ELSE
        RAISE EXCEPTION 'apply_op: unknown op %', p_op USING ERRCODE = '22023';
    END CASE;
END
$$;
-- @@ function pgqueue.enqueue_body
-- @@ after function pgqueue.check_job_fields

-- Enqueue: returns one id per input, in input order. A job whose dedup_key is held by a live
-- job of the stream is not inserted; its slot returns the holder's id. Each statement of this
-- function takes a fresh snapshot (READ COMMITTED), so a holder committed by a concurrent
-- enqueuer is found by the lookup that follows the conflict, in the same round trip.
-- An Enqueue op's own body (its job's fields are the op row's columns): what every op of the
-- call shares, and the job's trace context, concurrency key and time limit when it has them
-- (a replica's job gets them too).
-- pgqueue.enqueue writes the same CASE inline: called per row, the function cost 9 % of a
-- batch of 1,000.
CREATE OR REPLACE FUNCTION pgqueue.enqueue_body(p_shared jsonb, p_trace jsonb,
                                                p_concurrency_key text, p_timeout_ms int)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$ SELECT CASE WHEN p_trace IS NULL AND p_concurrency_key IS NULL AND p_timeout_ms IS NULL
                  THEN p_shared
                  ELSE p_shared || jsonb_strip_nulls(jsonb_build_object(
                      'trace', p_trace, 'concurrency_key', p_concurrency_key,
                      'timeout_ms', p_timeout_ms)) END $$;
-- @@ function pgqueue.check_timeouts
-- @@ after function pgqueue.enqueue_body

-- A job's own time limit (timeout_ms) must be positive: refused naming the job otherwise.
CREATE OR REPLACE FUNCTION pgqueue.check_timeouts(p_timeouts_ms int[]) RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_at bigint;
    v_ms int;
BEGIN
    SELECT t.ord, t.ms INTO v_at, v_ms FROM unnest(p_timeouts_ms) WITH ORDINALITY AS t(ms, ord)
    WHERE t.ms <= 0 LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION '%timeout must be positive, got % ms',
            CASE WHEN cardinality(p_timeouts_ms) > 1 THEN format('jobs[%s].', v_at - 1) ELSE '' END,
            v_ms USING ERRCODE = '22023';
    END IF;
END
$$;
-- @@ function pgqueue.enqueue
-- @@ after function pgqueue.check_timeouts

CREATE OR REPLACE FUNCTION pgqueue.enqueue(
    p_stream text,
    p_payloads bytea[],
    p_kinds text[],
    p_priorities int[],
    p_delays_ms bigint[],
    p_not_befores timestamptz[],
    p_dedup_keys bytea[],
    p_max_attempts int[],
    p_schema_versions int[],
    p_request uuid DEFAULT NULL,
    p_resent boolean DEFAULT false,
    p_traces jsonb[] DEFAULT NULL,
    p_concurrency_keys text[] DEFAULT NULL,
    p_timeouts_ms int[] DEFAULT NULL
) RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    v_seen     record;
    v_stamped  boolean := p_request IS NULL;
    v_limit    bigint;
    v_big      bigint;
    v_size     bigint;
    v_now      timestamptz := pgqueue.now_ms();
    v_n        int := coalesce(cardinality(p_payloads), 0);
    v_ids      bigint[];
    v_result   bigint[];
    v_todo     int[];
    v_inserted bigint[];
    v_holder   bigint;
    v_ready    boolean;
    v_round    int := 0;
    -- What every Enqueue op of this call shares; the job's own fields are the op row's columns.
    v_body     jsonb := jsonb_build_object('enqueued_at_ms', pgqueue.to_ms(v_now), 'attempts', 0);
    i          int;
BEGIN
    PERFORM pgqueue.require_leader();
    PERFORM pgqueue.check_stream(p_stream);
    IF EXISTS (SELECT 1 FROM unnest(p_not_befores) AS t(nb) WHERE NOT isfinite(nb)) THEN
        -- 'infinity' would be stored as a job that never comes due, and its op (not_before in
        -- milliseconds) could not be written out for a replica or a replay
        RAISE EXCEPTION 'enqueue: not_before must be a finite timestamp' USING ERRCODE = '22023';
    END IF;
    -- An optional column (kinds, delays, not_befores, dedup keys, schema versions) may come as
    -- a NULL array, meaning NULL for every job: a batch without them sends nothing for them
    -- (four arrays of 1,000 NULLs cost the client ~0.4 ms to encode).
    IF v_n > 0 AND (p_priorities IS NULL OR p_max_attempts IS NULL) THEN
        RAISE EXCEPTION 'enqueue: priorities and max_attempts must be arrays, not NULL'
            USING ERRCODE = '22023';
    END IF;
    IF coalesce(cardinality(p_kinds), v_n) <> v_n OR cardinality(p_priorities) <> v_n
       OR coalesce(cardinality(p_delays_ms), v_n) <> v_n
       OR coalesce(cardinality(p_not_befores), v_n) <> v_n
       OR coalesce(cardinality(p_dedup_keys), v_n) <> v_n OR cardinality(p_max_attempts) <> v_n
       OR coalesce(cardinality(p_schema_versions), v_n) <> v_n
       OR coalesce(cardinality(p_traces), v_n) <> v_n
       OR coalesce(cardinality(p_concurrency_keys), v_n) <> v_n
       OR coalesce(cardinality(p_timeouts_ms), v_n) <> v_n THEN
        RAISE EXCEPTION 'enqueue: all arrays must have % elements', v_n USING ERRCODE = '22023';
    END IF;
    IF v_n = 0 THEN
        RETURN;
    END IF;
    IF p_kinds IS NOT NULL OR p_dedup_keys IS NOT NULL OR p_concurrency_keys IS NOT NULL
       OR p_traces IS NOT NULL THEN
        -- refused whole, before anything is written, naming the first job that does not fit
        PERFORM pgqueue.check_job_fields(t.ord - 1, t.kind, t.dedup_key, t.concurrency_key,
                                         t.trace)
        FROM unnest(p_kinds, p_dedup_keys, p_concurrency_keys, p_traces) WITH ORDINALITY
            AS t(kind, dedup_key, concurrency_key, trace, ord)
        WHERE NOT pgqueue.job_fields_fit(t.kind, t.dedup_key, t.concurrency_key, t.trace);
    END IF;
    IF p_timeouts_ms IS NOT NULL THEN
        PERFORM pgqueue.check_timeouts(p_timeouts_ms);
    END IF;
    v_limit := pgqueue.payload_limit(p_stream);
    SELECT t.ord, octet_length(t.payload) INTO v_big, v_size
    FROM unnest(p_payloads) WITH ORDINALITY AS t(payload, ord)
    WHERE octet_length(t.payload) > v_limit LIMIT 1;
    IF FOUND THEN
        -- refused whole, before anything is written (see stream_config.max_payload_bytes)
        RAISE EXCEPTION 'jobs[%].payload is % bytes, over the limit of % bytes of stream %',
            v_big - 1, v_size, v_limit, p_stream USING ERRCODE = 'PQ413',
            HINT = 'pgqueue.configure_stream(stream, p_max_payload_bytes => N) sets the limit, up to 67108864 (64 MiB)';
    END IF;
    IF p_request IS NOT NULL THEN
        -- re-sent after a lost reply: what its first attempt returned, when that committed
        v_seen := pgqueue.request_begin(p_request, p_resent);
        IF v_seen.seq IS NOT NULL THEN
            RETURN QUERY SELECT unnest(pgqueue.request_enqueued(v_seen.seq, v_seen.xid,
                                                                p_stream, p_dedup_keys, v_n));
            RETURN;
        END IF;
    END IF;
    IF coalesce(cardinality(array_remove(p_dedup_keys, NULL)), 0) = 0 THEN
        -- No dedup keys (the common batch): no conflicts to arbitrate, so a plain INSERT in
        -- input order and the ids as drawn.
        v_ids := ARRAY(SELECT nextval('pgqueue.job_id_seq') FROM generate_series(1, v_n));
        WITH ins AS (
            INSERT INTO pgqueue.job (id, stream, kind, payload, priority, state, not_before,
                                     enqueued_at, attempts, max_attempts, schema_version,
                                     max_attempts_given, trace_context, concurrency_key,
                                     timeout_ms)
            SELECT v_ids[t.ord], p_stream, t.kind, t.payload, t.priority::smallint,
                   CASE WHEN t.at > v_now THEN 'scheduled' ELSE 'pending' END,
                   t.at, v_now, 0, coalesce(t.max_attempts, 25), t.schema_version,
                   t.max_attempts IS NOT NULL, t.trace, t.ckey, t.timeout_ms
            FROM (SELECT u.*, greatest(v_now, date_trunc('milliseconds', coalesce(
                             u.not_before, v_now + coalesce(u.delay_ms, 0) * interval '1 millisecond'))) AS at
                  FROM unnest(p_payloads, p_kinds, p_priorities, p_delays_ms, p_not_befores,
                              p_max_attempts, p_schema_versions, p_traces, p_concurrency_keys,
                              p_timeouts_ms)
                       WITH ORDINALITY
                       AS u(payload, kind, priority, delay_ms, not_before, max_attempts,
                            schema_version, trace, ckey, timeout_ms, ord)) t
            ORDER BY t.ord
            RETURNING id, stream, kind, payload, priority, state, not_before, dedup_key,
                      max_attempts, schema_version, max_attempts_given,
                      trace_context, concurrency_key, timeout_ms  -- what the op needs
        ), logged AS (
            INSERT INTO pgqueue.op_log (stream, op, job_id, body, kind, payload, priority,
                                        not_before, dedup_key, max_attempts, schema_version,
                                        request)
            SELECT ins.stream, 'Enqueue', ins.id,
                   CASE WHEN ins.trace_context IS NULL AND ins.concurrency_key IS NULL
                             AND ins.timeout_ms IS NULL THEN v_body
                        ELSE v_body || jsonb_strip_nulls(jsonb_build_object(
                            'trace', ins.trace_context, 'concurrency_key', ins.concurrency_key,
                            'timeout_ms', ins.timeout_ms))
                   END,
                   ins.kind, ins.payload, ins.priority,
                   ins.not_before, ins.dedup_key,
                   CASE WHEN ins.max_attempts_given THEN ins.max_attempts END,  -- null: not set
                   ins.schema_version,
                   CASE WHEN ins.id = v_ids[1] THEN p_request END  -- the call's first op
            FROM ins  -- already in id order (inserted in input order, ids drawn ascending);
        )             -- sorting the returned rows again cost 0.5 ms per 1,000 jobs
        SELECT bool_or(ins.state = 'pending') INTO v_ready FROM ins;
        IF v_ready THEN
            PERFORM pg_notify('pgqueue_jobs', p_stream);
        END IF;
        RETURN QUERY SELECT unnest(v_ids);
        RETURN;
    END IF;
    v_result := array_fill(NULL::bigint, ARRAY[v_n]);
    v_todo := ARRAY(SELECT generate_series(1, v_n));
    LOOP
        v_round := v_round + 1;
        v_ids := ARRAY(SELECT nextval('pgqueue.job_id_seq') FROM generate_series(1, cardinality(v_todo)));
        WITH input AS (
            SELECT v_ids[k] AS id, t.ord,
                   p_payloads[t.ord] AS payload, p_kinds[t.ord] AS kind,
                   p_priorities[t.ord]::smallint AS priority,
                   greatest(v_now, date_trunc('milliseconds', coalesce(
                       p_not_befores[t.ord],
                       v_now + coalesce(p_delays_ms[t.ord], 0) * interval '1 millisecond'))) AS not_before,
                   p_dedup_keys[t.ord] AS dedup_key, p_max_attempts[t.ord] AS max_attempts,
                   p_schema_versions[t.ord] AS schema_version, p_traces[t.ord] AS trace,
                   p_concurrency_keys[t.ord] AS ckey, p_timeouts_ms[t.ord] AS timeout_ms
            FROM unnest(v_todo) WITH ORDINALITY AS t(ord, k)
        ), ins AS (
            INSERT INTO pgqueue.job (id, stream, kind, payload, priority, state, not_before,
                                     enqueued_at, dedup_key, attempts, max_attempts, schema_version,
                                     max_attempts_given, trace_context, concurrency_key,
                                     timeout_ms)
            SELECT id, p_stream, kind, payload, priority,
                   CASE WHEN not_before > v_now THEN 'scheduled' ELSE 'pending' END,
                   not_before, v_now, dedup_key, 0, coalesce(max_attempts, 25), schema_version,
                   max_attempts IS NOT NULL, trace, ckey, timeout_ms
            -- Insert in dedup-key order so concurrent batches take key locks in one order
            -- (no deadlock); within a key the earlier input wins.
            FROM input ORDER BY dedup_key NULLS LAST, ord
            ON CONFLICT (stream, dedup_key)
                WHERE dedup_key IS NOT NULL AND state IN ('pending', 'scheduled', 'leased')
                DO NOTHING
            RETURNING *
        ), logged AS (
            INSERT INTO pgqueue.op_log (stream, op, job_id, body, kind, payload, priority,
                                        not_before, dedup_key, max_attempts, schema_version,
                                        request)
            SELECT ins.stream, 'Enqueue', ins.id,
                   CASE WHEN ins.trace_context IS NULL AND ins.concurrency_key IS NULL
                             AND ins.timeout_ms IS NULL THEN v_body
                        ELSE v_body || jsonb_strip_nulls(jsonb_build_object(
                            'trace', ins.trace_context, 'concurrency_key', ins.concurrency_key,
                            'timeout_ms', ins.timeout_ms))
                   END,
                   ins.kind, ins.payload, ins.priority,
                   ins.not_before, ins.dedup_key,
                   CASE WHEN ins.max_attempts_given THEN ins.max_attempts END,
                   ins.schema_version,
                   -- the first op this call writes carries its token
                   CASE WHEN NOT v_stamped AND ins.id = (SELECT min(id) FROM ins)
                        THEN p_request END
            FROM ins ORDER BY ins.id
            RETURNING job_id, not_before <= v_now AS ready
        )
        SELECT array_agg(job_id), bool_or(ready) INTO v_inserted, v_ready FROM logged;
        v_stamped := v_stamped OR v_inserted IS NOT NULL;
        IF v_ready THEN
            -- Wake idle workers of this stream; identical notifications coalesce per commit.
            PERFORM pg_notify('pgqueue_jobs', p_stream);
        END IF;

        IF coalesce(cardinality(v_inserted), 0) = cardinality(v_todo) THEN
            FOR i IN 1 .. cardinality(v_todo) LOOP
                v_result[v_todo[i]] := v_ids[i];
            END LOOP;
            EXIT;
        END IF;

        -- Some inputs met a live holder of their dedup key: find it with a fresh snapshot.
        DECLARE
            v_next int[] := '{}';
        BEGIN
            FOR i IN 1 .. cardinality(v_todo) LOOP
                IF v_ids[i] = ANY (v_inserted) THEN
                    v_result[v_todo[i]] := v_ids[i];
                ELSE
                    SELECT id INTO v_holder FROM pgqueue.job
                    WHERE stream = p_stream AND dedup_key = p_dedup_keys[v_todo[i]]
                      AND state IN ('pending', 'scheduled', 'leased');
                    IF FOUND THEN
                        v_result[v_todo[i]] := v_holder;
                    ELSE
                        v_next := v_next || v_todo[i];  -- the holder finished meanwhile: retry
                    END IF;
                END IF;
            END LOOP;
            v_todo := v_next;
        END;
        EXIT WHEN cardinality(v_todo) = 0;
        IF v_round >= 20 THEN
            RAISE EXCEPTION 'enqueue: dedup key contention did not settle after % rounds', v_round
                USING ERRCODE = '40001';
        END IF;
    END LOOP;
    RETURN QUERY SELECT unnest(v_result);
END
$$;
-- @@ function pgqueue.enqueue_one
-- @@ after function pgqueue.enqueue

-- Enqueue one job: the same semantics as pgqueue.enqueue for a batch of one, without the
-- arrays (one job per call is bounded by its round trip and commit; this keeps the function's
-- own share small).
CREATE OR REPLACE FUNCTION pgqueue.enqueue_one(
    p_stream text, p_payload bytea, p_kind text DEFAULT NULL, p_priority int DEFAULT 0,
    p_delay_ms bigint DEFAULT NULL, p_not_before timestamptz DEFAULT NULL,
    p_dedup_key bytea DEFAULT NULL, p_max_attempts int DEFAULT NULL,
    p_schema_version int DEFAULT NULL,
    p_request uuid DEFAULT NULL, p_resent boolean DEFAULT false, p_trace jsonb DEFAULT NULL,
    p_concurrency_key text DEFAULT NULL, p_timeout_ms int DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    v_seen record;
    v_limit bigint;
    v_now timestamptz := pgqueue.now_ms();
    v_at  timestamptz;
    j     pgqueue.job;
    v_holder bigint;
BEGIN
    PERFORM pgqueue.require_leader();
    PERFORM pgqueue.check_stream(p_stream);
    IF NOT isfinite(p_not_before) THEN  -- see pgqueue.enqueue
        RAISE EXCEPTION 'enqueue: not_before must be a finite timestamp' USING ERRCODE = '22023';
    END IF;
    IF NOT pgqueue.job_fields_fit(p_kind, p_dedup_key, p_concurrency_key, p_trace) THEN
        PERFORM pgqueue.check_job_fields(NULL, p_kind, p_dedup_key, p_concurrency_key, p_trace);
    END IF;
    IF p_timeout_ms <= 0 THEN
        PERFORM pgqueue.check_timeouts(ARRAY[p_timeout_ms]);
    END IF;
    v_at := greatest(v_now, date_trunc('milliseconds', coalesce(
        p_not_before, v_now + coalesce(p_delay_ms, 0) * interval '1 millisecond')));
    v_limit := pgqueue.payload_limit(p_stream);
    IF octet_length(p_payload) > v_limit THEN
        RAISE EXCEPTION 'payload is % bytes, over the limit of % bytes of stream %',
            octet_length(p_payload), v_limit, p_stream USING ERRCODE = 'PQ413',
            HINT = 'pgqueue.configure_stream(stream, p_max_payload_bytes => N) sets the limit, up to 67108864 (64 MiB)';
    END IF;
    IF p_request IS NOT NULL THEN  -- see pgqueue.enqueue
        v_seen := pgqueue.request_begin(p_request, p_resent);
        IF v_seen.seq IS NOT NULL THEN
            RETURN (pgqueue.request_enqueued(v_seen.seq, v_seen.xid, p_stream,
                                             ARRAY[p_dedup_key], 1))[1];
        END IF;
    END IF;
    FOR round IN 1 .. 20 LOOP
        INSERT INTO pgqueue.job (id, stream, kind, payload, priority, state, not_before,
                                 enqueued_at, dedup_key, attempts, max_attempts, schema_version,
                                 max_attempts_given, trace_context, concurrency_key, timeout_ms)
        VALUES (nextval('pgqueue.job_id_seq'), p_stream, p_kind, p_payload, p_priority::smallint,
                CASE WHEN v_at > v_now THEN 'scheduled' ELSE 'pending' END, v_at, v_now,
                p_dedup_key, 0, coalesce(p_max_attempts, 25), p_schema_version,
                p_max_attempts IS NOT NULL, p_trace, p_concurrency_key, p_timeout_ms)
        ON CONFLICT (stream, dedup_key)
            WHERE dedup_key IS NOT NULL AND state IN ('pending', 'scheduled', 'leased')
            DO NOTHING
        RETURNING * INTO j;
        IF FOUND THEN
            INSERT INTO pgqueue.op_log (stream, op, job_id, body, kind, payload, priority,
                                        not_before, dedup_key, max_attempts, schema_version,
                                        request)
            VALUES (j.stream, 'Enqueue', j.id, pgqueue.enqueue_body(
                        jsonb_build_object('enqueued_at_ms', pgqueue.to_ms(v_now), 'attempts', 0),
                        p_trace, p_concurrency_key, p_timeout_ms),
                    j.kind, j.payload, j.priority, j.not_before, j.dedup_key, p_max_attempts,
                    j.schema_version, p_request);
            IF j.state = 'pending' THEN
                PERFORM pg_notify('pgqueue_jobs', p_stream);
            END IF;
            RETURN j.id;
        END IF;
        -- a live job holds the key: return it (fresh snapshot), or retry if it just finished
        SELECT id INTO v_holder FROM pgqueue.job
        WHERE stream = p_stream AND dedup_key = p_dedup_key
          AND state IN ('pending', 'scheduled', 'leased');
        IF FOUND THEN
            RETURN v_holder;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'enqueue: dedup key contention did not settle after 20 rounds'
        USING ERRCODE = '40001';
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
        v_ids := ARRAY(SELECT j.id FROM pgqueue.job j
                       WHERE j.stream = p_stream AND j.state = 'pending'
                       ORDER BY j.priority DESC, j.id
                       LIMIT p_limit
                       FOR UPDATE SKIP LOCKED);
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
        FROM ranked r WHERE j.id = r.id
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
    )
    SELECT l.* FROM leased l ORDER BY l.priority DESC, l.id;
END
$$;
-- @@ function pgqueue.nack
-- @@ after function pgqueue.ack

-- Nack: one failure. attempts + 1; dead when attempts >= max_attempts > 0, otherwise back to
-- pending (or scheduled) after p_retry_in_ms, or the stream's backoff when NULL. A job whose
-- cancel was requested ends as cancelled instead (never retried). Returns one row (dead?, and
-- the state it went to: pending, scheduled, dead or cancelled) or none when the lease is no
-- longer current. The failure is recorded as p_error (its whole text: a traceback) and a
-- one-line summary, p_summary (pgqueue.error_summary of p_error when not given).
CREATE OR REPLACE FUNCTION pgqueue.nack(p_job_id bigint, p_lease_id bigint, p_error text, p_retry_in_ms bigint,
                             p_max_attempts int DEFAULT NULL, p_summary text DEFAULT NULL)
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
    PERFORM pgqueue.require_leader();
    SELECT * INTO j FROM pgqueue.job
    WHERE id = p_job_id AND lease_id = p_lease_id AND state = 'leased'
    FOR UPDATE;
    IF NOT FOUND THEN
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
        UPDATE pgqueue.job SET max_attempts = j.max_attempts WHERE id = j.id;
        PERFORM pgqueue.bury(j.id, j.attempts, j.last_error, v_now, j.crashes_by_step,
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
        WHERE id = j.id;
    END IF;
    INSERT INTO pgqueue.op_log (stream, op, job_id, lease_id, body)
    VALUES (j.stream, 'Nack', j.id, p_lease_id, pgqueue.outcome_json(j, v_state, v_now));
    RETURN QUERY SELECT v_state = 'dead', v_state;
END
$$;
-- @@ function pgqueue.reclaim_expired_jobs
-- @@ after function pgqueue.upcast

-- queries -----------------------------------------------------------------------------------

-- reclaim.sql: functions
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
-- @@ function pgqueue.requeue_dead_letter
-- @@ after function pgqueue.reclaim_expired

-- queries -----------------------------------------------------------------------------------

-- deadletter.sql: functions
-- Return a dead letter to pending with attempts reset (checkpoint kept, so steps resume).
-- Raises PQ404 when the id is not a dead letter, PQ409 when a live job holds its dedup key.
CREATE OR REPLACE FUNCTION pgqueue.requeue_dead_letter(p_job_id bigint) RETURNS void
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    v_now  timestamptz := pgqueue.now_ms();
    d      pgqueue.dead_letter;
    v_holder bigint;
    v_index  text;
BEGIN
    PERFORM pgqueue.require_leader();
    SELECT * INTO d FROM pgqueue.dead_letter WHERE id = p_job_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'job % is not a dead letter', p_job_id USING ERRCODE = 'PQ404';
    END IF;
    IF d.dedup_key IS NOT NULL THEN
        v_holder := pgqueue.dedup_holder(d.stream, d.dedup_key, d.id);
        IF v_holder IS NOT NULL THEN
            PERFORM pgqueue.refuse_dedup(format('requeue dead letter %s', p_job_id), v_holder);
        END IF;
    END IF;
    DELETE FROM pgqueue.dead_letter WHERE id = p_job_id;
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
        IF v_index IS DISTINCT FROM 'job_dedup_idx' THEN
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
-- @@ function pgqueue.job_change
-- @@ after function pgqueue.requeue_dead_letter

-- queries -----------------------------------------------------------------------------------

-- operate.sql: functions
-- What an operator's verb on one job returns: the job and where it stands now, in few enough
-- columns to read in psql (`SELECT * FROM pgqueue.release(42)`), not the whole job row.
CREATE OR REPLACE FUNCTION pgqueue.job_change(j pgqueue.job)
RETURNS TABLE (id bigint, stream text, kind text, state text, attempts int,
               last_completed_step text, cursor_step text)
LANGUAGE sql IMMUTABLE
AS $$ SELECT j.id, j.stream, j.kind, j.state, j.attempts, j.last_completed_step, j.cursor_step $$;
-- @@ function pgqueue.release
-- @@ after function pgqueue.job_change

-- Operator: a quarantined or undecodable job runs again (optionally forgetting its crashes).
CREATE OR REPLACE FUNCTION pgqueue.release(p_job_id bigint, p_reset_crashes boolean DEFAULT false)
RETURNS TABLE (id bigint, stream text, kind text, state text, attempts int,
               last_completed_step text, cursor_step text)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    j pgqueue.job := pgqueue.operator_job(p_job_id, 'release', ARRAY['quarantined', 'undecodable']);
BEGIN
    PERFORM pgqueue.require_leader();
    IF p_reset_crashes THEN
        j.crashes_by_step := '{}';
    END IF;
    RETURN QUERY SELECT * FROM pgqueue.job_change(pgqueue.save_as_pending(j, 'Release', false));
END
$$;
-- @@ function pgqueue.rewind
-- @@ after function pgqueue.release

-- Operator: the job's next run starts at step p_to_step (completed steps after it run again).
CREATE OR REPLACE FUNCTION pgqueue.rewind(p_job_id bigint, p_to_step text)
RETURNS TABLE (id bigint, stream text, kind text, state text, attempts int,
               last_completed_step text, cursor_step text)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    j pgqueue.job := pgqueue.operator_job(p_job_id, 'rewind',
                                          ARRAY['pending', 'scheduled', 'quarantined', 'undecodable']);
    v_names text[] := pgqueue.step_names(j.step_set_hash);
    v_pos int;
BEGIN
    PERFORM pgqueue.require_leader();
    IF v_names IS NULL THEN
        RAISE EXCEPTION 'cannot rewind job %: it has no recorded step list (it never ran as a step job)',
            p_job_id USING ERRCODE = 'PQ422';
    END IF;
    v_pos := array_position(v_names, p_to_step);
    IF v_pos IS NULL THEN
        RAISE EXCEPTION 'cannot rewind job % to step %: its steps are %', p_job_id,
            quote_literal(p_to_step), array_to_string(v_names, ', ') USING ERRCODE = 'PQ422';
    END IF;
    j.last_completed_step := CASE WHEN v_pos > 1 THEN v_names[v_pos - 1] END;
    j.cursor_step := NULL;
    j.cursor := NULL;
    RETURN QUERY SELECT * FROM pgqueue.job_change(pgqueue.save_as_pending(j, 'Rewind', true));
END
$$;
-- @@ function pgqueue.restart
-- @@ after function pgqueue.rewind

-- Operator: drop the checkpoint and run the job from step one (only when asked).
CREATE OR REPLACE FUNCTION pgqueue.restart(p_job_id bigint)
RETURNS TABLE (id bigint, stream text, kind text, state text, attempts int,
               last_completed_step text, cursor_step text)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    j pgqueue.job := pgqueue.operator_job(p_job_id, 'restart',
                                          ARRAY['pending', 'scheduled', 'quarantined', 'undecodable']);
BEGIN
    PERFORM pgqueue.require_leader();
    j.last_completed_step := NULL;
    j.cursor_step := NULL;
    j.cursor := NULL;
    j.step_set_hash := NULL;
    j.crashes_by_step := '{}';
    RETURN QUERY SELECT * FROM pgqueue.job_change(pgqueue.save_as_pending(j, 'Restart', true));
END
$$;
-- @@ function pgqueue.skip_step
-- @@ after function pgqueue.restart

-- Operator: count the step in progress as completed without running it, and go on.
CREATE OR REPLACE FUNCTION pgqueue.skip_step(p_job_id bigint)
RETURNS TABLE (id bigint, stream text, kind text, state text, attempts int,
               last_completed_step text, cursor_step text)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    j pgqueue.job := pgqueue.operator_job(p_job_id, 'skip a step of',
                                          ARRAY['pending', 'scheduled', 'quarantined', 'undecodable']);
    v_names text[] := pgqueue.step_names(j.step_set_hash);
    v_next int;
BEGIN
    PERFORM pgqueue.require_leader();
    IF v_names IS NULL THEN
        RAISE EXCEPTION 'cannot skip a step of job %: it has no recorded step list', p_job_id
            USING ERRCODE = 'PQ422';
    END IF;
    v_next := coalesce(array_position(v_names, j.last_completed_step), 0) + 1;
    IF v_next > cardinality(v_names) THEN
        RAISE EXCEPTION 'cannot skip a step of job %: all its steps are completed', p_job_id
            USING ERRCODE = 'PQ422';
    END IF;
    j.last_completed_step := v_names[v_next];
    j.cursor_step := NULL;
    j.cursor := NULL;
    RETURN QUERY SELECT * FROM pgqueue.job_change(pgqueue.save_as_pending(j, 'SkipStep', true,
                                   jsonb_build_object('skipped', v_names[v_next])));
END
$$;
-- @@ function pgqueue.accept_step_set
-- @@ after function pgqueue.skip_step

-- Operator: accept the new step list of a job parked as step_set_changed; it resumes after
-- its last completed step, matched by name in the new list.
CREATE OR REPLACE FUNCTION pgqueue.accept_step_set(p_job_id bigint)
RETURNS TABLE (id bigint, stream text, kind text, state text, attempts int,
               last_completed_step text, cursor_step text)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    j pgqueue.job := pgqueue.operator_job(p_job_id, 'accept the step set of', ARRAY['undecodable']);
    v_hash text;
    v_names text[];
BEGIN
    PERFORM pgqueue.require_leader();
    IF j.state_reason IS DISTINCT FROM 'step_set_changed' THEN
        RAISE EXCEPTION 'cannot accept the step set of job %: it is undecodable for %, not step_set_changed',
            p_job_id, coalesce(j.state_reason, 'no recorded reason') USING ERRCODE = 'PQ422';
    END IF;
    v_hash := j.state_detail ->> 'new_hash';
    v_names := pgqueue.step_names(v_hash);
    IF v_names IS NULL THEN
        RAISE EXCEPTION 'cannot accept the step set of job %: new step set % is not registered',
            p_job_id, coalesce(v_hash, '?') USING ERRCODE = 'PQ422';
    END IF;
    IF j.last_completed_step IS NOT NULL AND array_position(v_names, j.last_completed_step) IS NULL THEN
        RAISE EXCEPTION 'cannot accept the step set of job %: its last completed step % is not in the new list (%); use rewind or restart',
            p_job_id, quote_literal(j.last_completed_step), array_to_string(v_names, ', ')
            USING ERRCODE = 'PQ422';
    END IF;
    IF j.cursor_step IS NOT NULL AND array_position(v_names, j.cursor_step) IS NULL THEN
        j.cursor_step := NULL;
        j.cursor := NULL;
    END IF;
    j.step_set_hash := v_hash;
    RETURN QUERY SELECT * FROM pgqueue.job_change(pgqueue.save_as_pending(j, 'AcceptStepSet', false));
END
$$;
-- @@ GRANT EXECUTE ON FUNCTION pgqueue.to_ms, pgqueue.from_ms, pgqueue.now_ms, pgqueue.pinned_now, pgqueu
-- @@ after GRANT SELECT ON ALL TABLES IN SCHEMA pgqueue TO pgqueue_reader;
GRANT EXECUTE ON FUNCTION pgqueue.to_ms, pgqueue.from_ms, pgqueue.now_ms, pgqueue.pinned_now, pgqueue.b64,
    pgqueue.unb64, pgqueue.op_body, pgqueue.fold_job_counts, pgqueue.replica_status,
    pgqueue.error_summary
    TO pgqueue_reader;
