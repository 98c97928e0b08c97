-- GENERATED FILE: do not edit. What pgqueue schema revision 0017 changed in the functions and
-- views, object by object, against the code of revision 0016 (frozen by
-- `python -m pgqueue_migrations.new` when revision 0018 was started). Each entry is headed
-- by the object it defines and the one it follows, then its whole text (or `removed`); the
-- code of 0017 is every frozen file up to it applied in order (migrations/frozen.py). Loaded
-- when a database is upgraded to 0017 or downgraded to it; the current definitions live in
-- pgqueue/sql/.

-- @@ function pgqueue.checkpoint_json_of
-- @@ after function pgqueue.require_leader

-- The checkpoint as it travels in ops (cursor in base64), from its columns: what a statement
-- passes that has the columns but not a job row (on Citus a CTE's row reaches a function as
-- an anonymous record).
CREATE OR REPLACE FUNCTION pgqueue.checkpoint_json_of(p_last_completed_step text,
    p_cursor_step text, p_cursor bytea, p_updated_at timestamptz, p_schema_version int,
    p_step_set_hash text, p_crashes_by_step jsonb) RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT jsonb_build_object(
        'last_completed_step', p_last_completed_step,
        'cursor_step', p_cursor_step,
        'cursor', pgqueue.b64(p_cursor),
        'updated_at_ms', pgqueue.to_ms(p_updated_at),
        'schema_version', p_schema_version,
        'step_set_hash', p_step_set_hash,
        'crashes_by_step', p_crashes_by_step)
$$;
-- @@ function pgqueue.checkpoint_json
-- @@ after function pgqueue.checkpoint_json_of

-- The checkpoint of a job row as it travels in ops.
CREATE OR REPLACE FUNCTION pgqueue.checkpoint_json(j pgqueue.job) RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT pgqueue.checkpoint_json_of(j.last_completed_step, j.cursor_step, j.cursor,
                                      j.checkpoint_updated_at, j.schema_version,
                                      j.step_set_hash, j.crashes_by_step)
$$;
-- @@ function pgqueue.bury
-- @@ after function pgqueue.backoff_ms

-- Move a job row to dead_letter (leader and apply share this).
CREATE OR REPLACE FUNCTION pgqueue.bury(p_stream text, p_job_id bigint, p_attempts int, p_error text,
                             p_died_at timestamptz, p_crashes jsonb, p_summary text) RETURNS void
LANGUAGE sql VOLATILE
AS $$
    WITH gone AS (DELETE FROM pgqueue.job WHERE stream = p_stream AND id = p_job_id RETURNING *)
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
    WHERE stream = j.stream AND id = j.id;
    INSERT INTO pgqueue.op_log (stream, op, job_id, lease_id, body)
    VALUES (j.stream, p_op, j.id, p_lease_id, pgqueue.job_state_json(j) || p_extra);
END
$$;
-- @@ function pgqueue.apply_job_state
-- @@ after function pgqueue.save_job

-- The apply side of save_job: set every field the body carries.
CREATE OR REPLACE FUNCTION pgqueue.apply_job_state(p_stream text, p_job_id bigint, b jsonb) RETURNS void
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
    WHERE stream = p_stream AND id = p_job_id;
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
    DELETE FROM pgqueue.job WHERE stream = j.stream AND id = j.id;
    INSERT INTO pgqueue.op_log (stream, op, job_id, lease_id, body)
    VALUES (j.stream, 'Cancel', j.id, j.lease_id, jsonb_strip_nulls(jsonb_build_object(
        'job_id', j.id, 'was', 'leased', 'by', p_by,
        'requested_at_ms', pgqueue.to_ms(j.cancel_requested_at), 'error', p_error,
        'error_summary', p_summary)));
$$;
-- @@ function pgqueue.stream_of
-- @@ after function pgqueue.finish_cancel

-- The stream of a live job, or of a dead letter (NULL: none): for a caller that named only
-- the job, which then locks it by stream and id (on Citus, on one node). On Citus this asks
-- every node; a worker names the stream its lease came from instead.
CREATE OR REPLACE FUNCTION pgqueue.stream_of(p_job_id bigint) RETURNS text
LANGUAGE sql STABLE
AS $$ SELECT stream FROM pgqueue.job WHERE id = p_job_id $$;
-- @@ function pgqueue.dead_stream_of
-- @@ after function pgqueue.stream_of

CREATE OR REPLACE FUNCTION pgqueue.dead_stream_of(p_job_id bigint) RETURNS text
LANGUAGE sql STABLE
AS $$ SELECT stream FROM pgqueue.dead_letter WHERE id = p_job_id $$;
-- @@ function pgqueue.leased_job
-- @@ after function pgqueue.dead_stream_of

-- Load a leased job under lock, fenced by its lease id (NULL when the lease is not current).
-- p_stream NULL: the job's own (pgqueue.stream_of).
CREATE OR REPLACE FUNCTION pgqueue.leased_job(p_job_id bigint, p_lease_id bigint,
                                              p_stream text DEFAULT NULL) RETURNS pgqueue.job
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    j pgqueue.job;
    v_stream text := coalesce(p_stream, pgqueue.stream_of(p_job_id));
BEGIN
    PERFORM pgqueue.require_leader();
    SELECT * INTO j FROM pgqueue.job
    WHERE stream = v_stream AND id = p_job_id AND lease_id = p_lease_id
      AND state = 'leased' COLLATE "POSIX"
    FOR UPDATE;
    RETURN j;
END
$$;
-- @@ function pgqueue.operator_job
-- @@ after function pgqueue.leased_job

-- Load a job for an operator, under lock; PQ404 when it is not a live job, PQ422 when leased
-- or not in one of p_states.
CREATE OR REPLACE FUNCTION pgqueue.operator_job(p_job_id bigint, p_action text, p_states text[]) RETURNS pgqueue.job
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    j pgqueue.job;
    v_stream text := pgqueue.stream_of(p_job_id);
BEGIN
    PERFORM pgqueue.require_leader();
    -- found by id, then locked by stream and id (on Citus a lock is taken on one node only)
    SELECT * INTO j FROM pgqueue.job WHERE stream = v_stream AND id = p_job_id FOR UPDATE;
    IF NOT FOUND THEN
        IF EXISTS (SELECT 1 FROM pgqueue.dead_letter WHERE id = p_job_id) THEN
            RAISE EXCEPTION 'cannot % job %: it is a dead letter (requeue it first)', p_action, p_job_id
                USING ERRCODE = 'PQ422';
        END IF;
        RAISE EXCEPTION 'no live job %', p_job_id USING ERRCODE = 'PQ404';
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
-- @@ function pgqueue.count_jobs
-- @@ after function pgqueue.save_as_pending

-- observe.sql: functions
-- The statement triggers behind job_count_delta and pgqueue.ready: the rows a statement
-- removed count -1 in their (stream, state), the rows it wrote +1, nothing is written for no
-- net change (a renewal); a job that became pending (or changed its priority or kind while
-- pending) gets an entry in pgqueue.ready, and one that stopped being pending loses its entry
-- (but not once a plain lease in the transaction removed the entries it took: pgqueue.lease
-- sets pgqueue.ready_taken for the rest of it; an entry a later statement leaves behind is
-- harmless, dropped by the lease that takes it). They run on every path that writes jobs,
-- replicas' apply included (ENABLE ALWAYS), so every pending job has its entry wherever it is.
CREATE OR REPLACE FUNCTION pgqueue.count_jobs() RETURNS trigger
LANGUAGE plpgsql
AS $$
-- The transition tables are read into arrays first, and the rows written from those: on
-- Citus this trigger fires on a shard, where an INSERT into a distributed table cannot read
-- a transition table ("could not find named tuplestore").
DECLARE
    c_stream text[];  -- job_count_delta: per (stream, state), the net change
    c_state text[];
    c_delta bigint[];
    e_stream text[];  -- ready entries to add
    e_priority smallint[];
    e_id bigint[];
    e_kind text[];
    d_stream text[];  -- ready entries to drop
    d_priority smallint[];
    d_id bigint[];
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT array_agg(c.stream), array_agg(c.state), array_agg(c.n)
        INTO c_stream, c_state, c_delta
        FROM (SELECT stream, state, count(*) AS n FROM new_rows GROUP BY stream, state) c;
        SELECT array_agg(n.stream), array_agg(n.priority), array_agg(n.id), array_agg(n.kind)
        INTO e_stream, e_priority, e_id, e_kind
        FROM new_rows n WHERE n.state = 'pending';
    ELSIF TG_OP = 'DELETE' THEN
        SELECT array_agg(c.stream), array_agg(c.state), array_agg(c.n)
        INTO c_stream, c_state, c_delta
        FROM (SELECT stream, state, -count(*) AS n FROM old_rows GROUP BY stream, state) c;
        SELECT array_agg(o.stream), array_agg(o.priority), array_agg(o.id)
        INTO d_stream, d_priority, d_id
        FROM old_rows o WHERE o.state = 'pending';
    ELSE
        SELECT array_agg(c.stream), array_agg(c.state), array_agg(c.n)
        INTO c_stream, c_state, c_delta
        FROM (SELECT stream, state, sum(d) AS n FROM (
                  SELECT stream, state, 1 AS d FROM new_rows
                  UNION ALL SELECT stream, state, -1 FROM old_rows) u
              GROUP BY stream, state HAVING sum(d) <> 0) c;
        IF EXISTS (SELECT 1 FROM old_rows o WHERE o.state = 'pending')
           AND current_setting('pgqueue.ready_taken', true) IS DISTINCT FROM 'on' THEN
            SELECT array_agg(o.stream), array_agg(o.priority), array_agg(o.id)
            INTO d_stream, d_priority, d_id
            FROM old_rows o JOIN new_rows n ON n.id = o.id
            WHERE o.state = 'pending' AND (n.state <> 'pending' OR n.priority <> o.priority
                                           OR n.kind IS DISTINCT FROM o.kind);
        END IF;
        IF EXISTS (SELECT 1 FROM new_rows n WHERE n.state = 'pending') THEN
            SELECT array_agg(n.stream), array_agg(n.priority), array_agg(n.id), array_agg(n.kind)
            INTO e_stream, e_priority, e_id, e_kind
            FROM new_rows n JOIN old_rows o ON o.id = n.id
            WHERE n.state = 'pending' AND (o.state <> 'pending' OR n.priority <> o.priority
                                           OR n.kind IS DISTINCT FROM o.kind);
        END IF;
    END IF;
    IF c_stream IS NOT NULL THEN
        INSERT INTO pgqueue.job_count_delta (slot, stream, state, delta)
        SELECT pgqueue.ring_slot(), c.stream, c.state, c.delta
        FROM unnest(c_stream, c_state, c_delta) AS c(stream, state, delta);
    END IF;
    IF d_id IS NOT NULL THEN
        PERFORM pgqueue.ready_drop(d_stream, d_priority, d_id);
    END IF;
    IF e_id IS NOT NULL THEN
        INSERT INTO pgqueue.ready (slot, stream, priority, job_id, kind)
        SELECT pgqueue.ring_slot(), e.stream, e.priority, e.id, e.kind
        FROM unnest(e_stream, e_priority, e_id, e_kind) AS e(stream, priority, id, kind);
    END IF;
    RETURN NULL;
END
$$;
-- @@ function pgqueue.count_dead_letters
-- @@ after function pgqueue.count_jobs

CREATE OR REPLACE FUNCTION pgqueue.count_dead_letters() RETURNS trigger
LANGUAGE plpgsql
AS $$
-- As count_jobs: the transition table read into arrays first.
DECLARE
    c_stream text[];
    c_delta bigint[];
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT array_agg(c.stream), array_agg(c.n) INTO c_stream, c_delta
        FROM (SELECT stream, count(*) AS n FROM new_rows GROUP BY stream) c;
    ELSIF TG_OP = 'DELETE' THEN
        SELECT array_agg(c.stream), array_agg(c.n) INTO c_stream, c_delta
        FROM (SELECT stream, -count(*) AS n FROM old_rows GROUP BY stream) c;
    END IF;
    IF c_stream IS NOT NULL THEN
        INSERT INTO pgqueue.job_count_delta (slot, stream, state, delta)
        SELECT pgqueue.ring_slot(), c.stream, 'dead', c.delta
        FROM unnest(c_stream, c_delta) AS c(stream, delta);
    END IF;
    RETURN NULL;
END
$$;
-- @@ function pgqueue.apply_op
-- @@ after function pgqueue.op_body

-- Apply one op's effect to the state tables. Ops carry resulting values, never increments.
CREATE OR REPLACE FUNCTION pgqueue.apply_op(p_op text, p_stream text, p_job_id bigint, p_lease_id bigint,
                                            b jsonb)
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
        WHERE stream = p_stream AND id = p_job_id;
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
        WHERE stream = p_stream AND id = p_job_id AND lease_id = p_lease_id;
    WHEN 'Ack' THEN
        DELETE FROM pgqueue.job WHERE stream = p_stream AND id = p_job_id;
    WHEN 'Promote' THEN
        UPDATE pgqueue.job SET state = 'pending'
        WHERE stream = p_stream AND id = p_job_id AND state = 'scheduled' COLLATE "POSIX";
    WHEN 'Nack', 'Reclaim' THEN
        IF b ->> 'state' = 'dead' THEN
            UPDATE pgqueue.job SET max_attempts = (b ->> 'max_attempts')::int WHERE stream = p_stream AND id = p_job_id;
            PERFORM pgqueue.bury(p_stream, p_job_id, (b ->> 'attempts')::int, b ->> 'last_error',
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
            WHERE stream = p_stream AND id = p_job_id;
        END IF;
    WHEN 'RequeueDeadLetter' THEN
        WITH d AS (DELETE FROM pgqueue.dead_letter WHERE stream = p_stream AND id = p_job_id RETURNING *)
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
        PERFORM pgqueue.apply_job_state(p_stream, p_job_id, b);
    WHEN 'RequestCancel' THEN
        UPDATE pgqueue.job SET cancel_requested_at = pgqueue.from_ms((b ->> 'at_ms')::bigint)
        WHERE stream = p_stream AND id = p_job_id;
    WHEN 'Cancel' THEN
        DELETE FROM pgqueue.job WHERE stream = p_stream AND id = p_job_id;
        DELETE FROM pgqueue.dead_letter WHERE stream = p_stream AND id = p_job_id;
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
-- @@ function pgqueue.ingest_op
-- @@ after function pgqueue.apply_op

-- Ingest one op from another database's log (a whole op_log row): record it and apply it,
-- unless this database already holds that seq (delivering an op twice changes nothing) or its
-- transaction is already in a seeded state. Ops must arrive in the source's commit order; per
-- job that is seq order, because a transition holds the job's row lock when it appends its op.
CREATE OR REPLACE FUNCTION pgqueue.ingest_op(o pgqueue.op_log) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
BEGIN
    -- no conflict target: the primary keys are the partitions' (seq decides the partition)
    INSERT INTO pgqueue.op_log SELECT o.*
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF NOT pgqueue.reflected(o.xid) THEN
        PERFORM pgqueue.apply_op(o.op, o.stream, o.job_id, o.lease_id, pgqueue.op_body(o));
    END IF;
    RETURN true;
END
$$;
-- @@ function pgqueue.request_begin
-- @@ after function pgqueue.ingest_ops

-- The start of a call that carries a request token (enqueue, enqueue_one, lease). Every such
-- call first takes the token's transaction lock, so a call re-sent after its reply was lost
-- waits here until its first attempt has ended; a re-sent one then gets the seq and
-- transaction of the op its first attempt committed (NULLs when none did: it runs as a first
-- attempt). The unique index on op_log.request stays the backstop: a first attempt that
-- reaches the server only after its re-send committed fails there instead of applying twice.
CREATE OR REPLACE FUNCTION pgqueue.request_begin(p_stream text, p_request uuid, p_resent boolean,
                                                 OUT seq bigint, OUT xid xid8)
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('pgqueue.request'), hashtext(p_request::text));
    IF p_resent THEN
        SELECT o.seq, o.xid INTO seq, xid FROM pgqueue.op_log o
        WHERE o.stream = p_stream AND o.request = p_request;
    END IF;
END
$$;
-- @@ function pgqueue.op_log_apply_trigger
-- @@ after function pgqueue.seed_rows

-- On a replica fed by logical replication: apply each op the subscription inserts into op_log,
-- unless its seq is already applied (ops arrive in commit order, not seq order, so never skip
-- by "seq <= last"). Only the apply worker runs with session_replication_role = replica, so
-- inserts by the follow reader or by hand are left to ingest_op. search_path is pinned: the
-- apply worker runs with an empty one.
CREATE OR REPLACE FUNCTION pgqueue.op_log_apply_trigger() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
BEGIN
    IF current_setting('session_replication_role') <> 'replica' THEN
        RETURN NEW;
    END IF;
    IF EXISTS (SELECT 1 FROM pgqueue.op_log WHERE seq = NEW.seq) THEN
        RETURN NULL;
    END IF;
    IF NOT pgqueue.reflected(NEW.xid) THEN
        PERFORM pgqueue.apply_op(NEW.op, NEW.stream, NEW.job_id, NEW.lease_id, pgqueue.op_body(NEW));
    END IF;
    RETURN NEW;
END
$$;
-- @@ function pgqueue.request_enqueued
-- @@ after function pgqueue.prune_workers

-- queries -----------------------------------------------------------------------------------

-- enqueue.sql: functions
-- The ids an enqueue call returned, found again from its ops when the call is re-sent with
-- its request token (its first op at p_seq, written by transaction p_xid). Inputs without a
-- dedup key got the call's key-less jobs in input order; an input with a key got the job the
-- call inserted with it, or else the live job that held the key then (NULL when that holder
-- has finished since: the library then says the call may have committed).
CREATE OR REPLACE FUNCTION pgqueue.request_enqueued(p_seq bigint, p_xid xid8, p_stream text,
                                                    p_dedup_keys bytea[], p_n int)
RETURNS bigint[]
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_plain  bigint[];
    v_result bigint[] := array_fill(NULL::bigint, ARRAY[p_n]);
    v_next   int := 1;
    v_key    bytea;
    v_id     bigint;
BEGIN
    -- the call's ops sit at or after its first op; its transaction is the one that wrote it
    v_plain := ARRAY(SELECT o.job_id FROM pgqueue.op_log o
                     WHERE o.stream = p_stream AND o.seq >= p_seq AND o.xid = p_xid AND o.op = 'Enqueue'
                       AND o.dedup_key IS NULL ORDER BY o.seq);
    FOR i IN 1 .. p_n LOOP
        v_key := p_dedup_keys[i];
        IF v_key IS NULL THEN
            v_result[i] := v_plain[v_next];
            v_next := v_next + 1;
        ELSE
            v_id := NULL;
            SELECT o.job_id INTO v_id FROM pgqueue.op_log o
            WHERE o.stream = p_stream AND o.seq >= p_seq AND o.xid = p_xid AND o.op = 'Enqueue' AND o.dedup_key = v_key
            ORDER BY o.seq LIMIT 1;
            IF v_id IS NULL THEN
                SELECT j.id INTO v_id FROM pgqueue.job j
                WHERE j.stream = p_stream AND j.dedup_key = v_key
                  AND j.state IN ('pending', 'scheduled', 'leased');
            END IF;
            v_result[i] := v_id;
        END IF;
    END LOOP;
    RETURN v_result;
END
$$;
-- @@ function pgqueue.notify_ready
-- @@ after function pgqueue.request_enqueued

-- Wake idle workers of this stream: identical notifications coalesce per commit. Not on a
-- Citus cluster, where an enqueue runs on the node holding its stream: a notification there
-- reaches only that node's listeners, and a transaction that notified on a worker node cannot
-- take part in a two-phase commit (an enqueue into streams on two nodes).
CREATE OR REPLACE FUNCTION pgqueue.notify_ready(p_stream text) RETURNS void
LANGUAGE sql VOLATILE
AS $$ SELECT pg_notify('pgqueue_jobs', p_stream) FROM pgqueue.layout WHERE name = 'single' $$;
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
        v_seen := pgqueue.request_begin(p_stream, p_request, p_resent);
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
            PERFORM pgqueue.notify_ready(p_stream);
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
            PERFORM pgqueue.notify_ready(p_stream);
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
        v_seen := pgqueue.request_begin(p_stream, p_request, p_resent);
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
                PERFORM pgqueue.notify_ready(p_stream);
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
-- @@ function pgqueue.ready_drop
-- @@ after function pgqueue.enqueue_one

-- queries -----------------------------------------------------------------------------------

-- lease.sql: functions
-- Remove the ready entries of these jobs (by stream, priority and id, in every partition):
-- jobs that stopped being pending by a path other than a lease (count_jobs). An entry a lease
-- holds is passed over, never waited for: that lease is taking it out (and waits for this
-- transaction's job row, which it will find no longer pending); waiting here would deadlock.
-- A statement per stream (one in practice), each naming its stream: on Citus each is then
-- planned for the one node that holds the stream.
CREATE OR REPLACE FUNCTION pgqueue.ready_drop(p_streams text[], p_priorities smallint[],
                                              p_ids bigint[])
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_stream text;
BEGIN
    FOR v_stream IN SELECT DISTINCT s FROM unnest(p_streams) AS s LOOP
        WITH gone AS (
            SELECT r.slot, r.ctid AS at FROM pgqueue.ready r
            JOIN unnest(p_streams, p_priorities, p_ids) AS d(stream, priority, id)
              ON r.priority = d.priority AND r.job_id = d.id
            WHERE r.stream = v_stream AND d.stream = v_stream
            FOR UPDATE OF r SKIP LOCKED)
        DELETE FROM pgqueue.ready r USING gone g  -- (on "POSIX": take_ready_range)
        WHERE r.stream = v_stream COLLATE "POSIX" AND r.slot = g.slot AND r.ctid = g.at;
    END LOOP;
END
$$;
-- @@ function pgqueue.promote_due
-- @@ after function pgqueue.ready_drop

-- Scheduled jobs of a stream whose time has come become pending (op Promote), oldest first,
-- at most p_limit per call: leasing does this itself, so a due job never waits for a
-- maintenance pass, and then leases in exact priority order.
CREATE OR REPLACE FUNCTION pgqueue.promote_due(p_stream text, p_limit int DEFAULT 1000) RETURNS int
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_now timestamptz := pgqueue.now_ms();
    v_ids bigint[];
    v_n int;
BEGIN
    -- The due jobs locked first, then promoted by id: a statement joining the two gave the
    -- planner the stream's equality on job to start from, and it read every row of job (under
    -- a held horizon, every version) at each lease.
    SELECT array_agg(d.id) INTO v_ids FROM (
        SELECT id FROM pgqueue.job
        WHERE stream = p_stream AND state = 'scheduled' AND not_before <= v_now
        ORDER BY not_before, id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED) d;
    IF v_ids IS NULL THEN
        RETURN 0;
    END IF;
    WITH promoted AS (
        UPDATE pgqueue.job j SET state = 'pending'
        WHERE j.stream = p_stream AND j.id = ANY(v_ids)
          AND j.state = 'scheduled' COLLATE "POSIX"  -- (by id: job's indexes)
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
-- @@ function pgqueue.take_ready_range
-- @@ after function pgqueue.promote_due

-- Take out the first p_limit ready entries of a stream in lease order with a priority from
-- p_low to p_high and, within it, a job id above p_after_id, that no other lease holds (SKIP
-- LOCKED); their job ids (once each) in lease order. One range of ready_order_idx: with
-- p_low = p_high the scan starts at (stream, priority, p_after_id).
-- Only entries no lease has touched (xmax 0) are tried: an entry another lease holds (its
-- transaction not committed yet, its commit's flush included) is passed over on its xmax,
-- without trying its tuple lock and its holder's transaction lock in the shared lock table,
-- which SKIP LOCKED does for each. Every lease after a position steps over what the other
-- leasers took since its last one: with 64 leasers, hundreds of entries per lease, and the
-- lock manager's LWLock was a lease's third wait (bench/pressure.py, README). An entry whose
-- lease rolled back keeps that lease's xmax: the next lease from the start (LeasePosition's
-- look every second, or any lease without a position) takes it, as any entry behind the
-- position.
CREATE OR REPLACE FUNCTION pgqueue.take_ready_range(p_stream text, p_limit int, p_low smallint,
                                                    p_high smallint, p_after_id bigint)
RETURNS bigint[]
LANGUAGE sql VOLATILE
AS $$
    WITH taken AS (
        SELECT r.slot, r.ctid AS at FROM pgqueue.ready r
        WHERE r.stream = p_stream AND r.priority >= p_low AND r.priority <= p_high
          AND r.job_id > p_after_id AND r.xmax = '0'::xid
        ORDER BY r.priority DESC, r.job_id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ), gone AS (
        -- Each entry by where it is. The stream is named for Citus, which plans the statement
        -- for the node holding it only when it says which; in the "POSIX" collation (equality
        -- as in any other: bytewise), which no index of pgqueue.ready has, so that the planner
        -- never reads the stream's index for it instead of going to each entry by its ctid.
        DELETE FROM pgqueue.ready r USING taken t
        WHERE r.stream = p_stream COLLATE "POSIX" AND r.slot = t.slot AND r.ctid = t.at
        RETURNING r.job_id, r.priority
    )
    SELECT coalesce(array_agg(g.job_id ORDER BY g.priority DESC, g.job_id), '{}')
    FROM (SELECT DISTINCT gone.job_id, gone.priority FROM gone) g
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
    v_lease_ids bigint[];
    v_started bigint[];
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
        v_seen := pgqueue.request_begin(p_stream, p_request, p_resent);
        IF v_seen.seq IS NOT NULL THEN
            -- the stream's rate-limited kinds read first: on Citus a subquery on a settings
            -- table (a reference table) inside the statement about the stream's rows is not
            -- planned for one node
            v_kinds := ARRAY(SELECT k.kind FROM pgqueue.kind_config k
                             WHERE k.stream = p_stream AND k.rate_count IS NOT NULL);
            RETURN QUERY
            SELECT j.id, j.lease_id, j.stream, j.kind, j.payload, j.priority, j.attempts,
                   j.max_attempts, j.enqueued_at, j.lease_expires_at, j.lease_started,
                   j.last_completed_step,
                   j.cursor_step, j.cursor, j.checkpoint_updated_at, j.schema_version,
                   j.step_set_hash, j.crashes_by_step, j.not_before, j.trace_context,
                   NOT j.lease_started AND j.kind = ANY(v_kinds),
                   j.timeout_ms
            FROM pgqueue.job j
            JOIN pgqueue.op_log o ON o.job_id = j.id AND o.lease_id = j.lease_id
            WHERE o.seq >= v_seen.seq AND o.xid = v_seen.xid AND o.op = 'Lease'
              AND j.state = 'leased' COLLATE "POSIX" AND j.stream = p_stream
              AND o.stream = p_stream
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
            DELETE FROM pgqueue.ready r USING taken t  -- (on "POSIX": take_ready_range)
            WHERE r.stream = p_stream COLLATE "POSIX" AND r.slot = t.slot AND r.ctid = t.at
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
    -- The lease ids are drawn before the UPDATE, one per candidate in lease order (Citus
    -- refuses a volatile function in an UPDATE of a distributed table; a candidate no longer
    -- pending leaves a gap), and each job finds its own by its place among the candidates. Not
    -- by joining the candidates unnested: with the stream's equality in the statement the
    -- planner expected one row of job and read the candidates again for each (a lease of
    -- 2,000 out of 4,000 took 962 ms); looked up by id, the UPDATE reads each candidate's row
    -- by its primary key (94 ms).
    v_lease_ids := ARRAY(SELECT nextval('pgqueue.lease_id_seq')
                         FROM generate_series(1, cardinality(v_ids)));
    v_started := CASE WHEN p_start IS NULL THEN v_ids ELSE v_ids[1:p_start] END;
    RETURN QUERY
    WITH leased AS (
        UPDATE pgqueue.job j
        SET state = 'leased', lease_id = v_lease_ids[array_position(v_ids, j.id)],
            worker_node = p_worker_node, worker_instance = p_worker_instance,
            lease_expires_at = v_exp,
            lease_started = (j.id = ANY(v_started) OR j.unstarted_reclaims > 0)
        WHERE j.stream = p_stream AND j.id = ANY(v_ids)
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
        INSERT INTO pgqueue.lease_expiry (slot, expires_at, job_ids, stream)
        SELECT pgqueue.expiry_slot(v_exp), v_exp, array_agg(l.id ORDER BY l.id), p_stream
        FROM leased l
        HAVING count(*) > 0
    )
    SELECT l.* FROM leased l ORDER BY l.priority DESC, l.id;
END
$$;
-- @@ function pgqueue.start_rated
-- @@ after function pgqueue.pick_within_limits

-- Worker: the handler is about to start a job of a rate-limited kind that was leased ahead
-- (pgqueue.lease said rate_at_start): count it in the kind's window now, under the kind's
-- lock, and say it started (op Renew, started true), so the kind's handler starts keep to its
-- rate. When the window is full the job goes back, costing nothing, until the window has room
-- (op ReturnLease; scheduled at that time), and a job whose cancel was requested ends as
-- cancelled. Returns 'started', 'deferred' or 'cancelled'; NULL when the lease is not current.
CREATE OR REPLACE FUNCTION pgqueue.start_rated(p_job_id bigint, p_lease_id bigint,
                                               p_stream text DEFAULT NULL) RETURNS text
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    j pgqueue.job := pgqueue.leased_job(p_job_id, p_lease_id, p_stream);
    c pgqueue.kind_config;
    v_at bigint;
    v_free bigint;
BEGIN
    IF j.id IS NULL THEN
        RETURN NULL;
    END IF;
    IF j.cancel_requested_at IS NOT NULL THEN
        PERFORM pgqueue.finish_cancel(j, 'return');
        RETURN 'cancelled';
    END IF;
    SELECT * INTO c FROM pgqueue.kind_config k WHERE k.stream = j.stream AND k.kind = j.kind;
    IF c.rate_count IS NOT NULL THEN
        PERFORM pgqueue.lock_kind(j.stream, j.kind, true);
        v_at := pgqueue.rate_clock_ms();
        IF pgqueue.rate_window_used(j.stream, j.kind, c.rate_ms, v_at) >= c.rate_count THEN
            -- full: back until the oldest bucket leaves the window
            SELECT min(k.until) + c.rate_ms INTO v_free FROM pgqueue.kind_lease k
            WHERE k.stream = j.stream AND k.kind = j.kind;
            j.state := 'scheduled';
            j.not_before := pgqueue.from_ms(v_free);
            PERFORM pgqueue.save_job(j, 'ReturnLease', p_lease_id,
                                     jsonb_build_object('deferred', 'rate_limit'));
            RETURN 'deferred';
        END IF;
        PERFORM pgqueue.rate_window_add(j.stream, j.kind, c.rate_ms, v_at, 1);
    END IF;
    UPDATE pgqueue.job SET lease_started = true WHERE stream = j.stream AND id = j.id;
    INSERT INTO pgqueue.op_log (stream, op, job_id, lease_id, body)
    VALUES (j.stream, 'Renew', j.id, p_lease_id, jsonb_build_object(
        'job_id', j.id, 'lease_id', p_lease_id, 'expires_at_ms', pgqueue.to_ms(j.lease_expires_at),
        'checkpoint', pgqueue.checkpoint_json(j), 'started', true));
    RETURN 'started';
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
-- p_stream: the stream the leases came from (see pgqueue.ack); NULL: each of these jobs' in turn.
CREATE OR REPLACE FUNCTION pgqueue.renew(
    p_job_ids bigint[], p_lease_ids bigint[], p_visibility_ms bigint[], p_checkpoints jsonb[],
    p_started boolean[] DEFAULT NULL, p_stream text DEFAULT NULL
) RETURNS TABLE (job_id bigint, lease_id bigint, expires_at timestamptz,
              cancel_requested boolean)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    v_now timestamptz := pgqueue.now_ms();
    v_stream text;
    v_expires timestamptz[];
BEGIN
    PERFORM pgqueue.require_leader();
    IF EXISTS (SELECT 1 FROM unnest(p_visibility_ms) v WHERE v IS NULL OR v < 0)
       OR cardinality(p_visibility_ms) IS DISTINCT FROM cardinality(p_job_ids) THEN
        -- NULL would leave a lease that never expires, never reclaimed
        RAISE EXCEPTION 'renew: every visibility must be >= 0 ms, one per job'
            USING ERRCODE = '22023';
    END IF;
    -- each new expiry worked out here (timestamptz arithmetic is STABLE, which Citus refuses
    -- in an UPDATE's SET over a column)
    v_expires := ARRAY(SELECT v_now + v * interval '1 millisecond' FROM unnest(p_visibility_ms) v);
    IF p_stream IS NULL THEN
        FOR v_stream IN SELECT DISTINCT j.stream FROM pgqueue.job j WHERE j.id = ANY(p_job_ids) LOOP
            RETURN QUERY SELECT * FROM pgqueue.renew(p_job_ids, p_lease_ids, p_visibility_ms,
                                                     p_checkpoints, p_started, v_stream);
        END LOOP;
        RETURN;
    END IF;
    RETURN QUERY
    -- Rows are locked in id order first (see ack): no deadlock with a concurrent batched ack.
    -- The lock takes the leased jobs of these ids, the UPDATE those still under the lease
    -- given, with their inputs: the shapes Citus (14.0) plans for one node (see pgqueue.ack;
    -- an array subscript by a column in the UPDATE crashed its worker).
    WITH input AS (
        SELECT * FROM unnest(p_job_ids, p_lease_ids, v_expires, p_checkpoints,
                             coalesce(p_started, '{}'::boolean[]))
            AS t(job_id, lease_id, expires_at, cp, started)
    ), locked AS MATERIALIZED (
        SELECT j.id FROM pgqueue.job j
        WHERE j.stream = p_stream AND j.id = ANY(p_job_ids)
          AND j.state = 'leased' COLLATE "POSIX"  -- (by id, not a stream's index: job's indexes)
        ORDER BY j.id
        FOR UPDATE OF j
    ), renewed AS (
        UPDATE pgqueue.job j
        SET lease_expires_at = i.expires_at,
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
        WHERE j.stream = p_stream AND j.id = l.id AND j.id = i.job_id AND j.lease_id = i.lease_id
          AND j.state = 'leased' COLLATE "POSIX"
        RETURNING j.id, j.stream, j.lease_id, j.lease_expires_at, j.lease_started,
                  j.cancel_requested_at, j.last_completed_step, j.cursor_step, j.cursor,
                  j.checkpoint_updated_at, j.schema_version, j.step_set_hash, j.crashes_by_step
    ), logged AS (
        INSERT INTO pgqueue.op_log (stream, op, job_id, lease_id, body)
        SELECT r.stream, 'Renew', r.id, r.lease_id, jsonb_build_object(
            'job_id', r.id, 'lease_id', r.lease_id,
            'expires_at_ms', pgqueue.to_ms(r.lease_expires_at),
            'checkpoint', pgqueue.checkpoint_json_of(r.last_completed_step, r.cursor_step,
                r.cursor, r.checkpoint_updated_at, r.schema_version, r.step_set_hash,
                r.crashes_by_step),
            'started', r.lease_started)
        FROM renewed r ORDER BY r.id
    ), expiring AS (
        -- where reclaim finds them once they expire: one row per new expiry of the call
        INSERT INTO pgqueue.lease_expiry (slot, expires_at, job_ids, stream)
        SELECT pgqueue.expiry_slot(r.lease_expires_at), r.lease_expires_at,
               array_agg(r.id ORDER BY r.id), p_stream
        FROM renewed r GROUP BY r.lease_expires_at
    )
    SELECT r.id, r.lease_id, r.lease_expires_at, r.cancel_requested_at IS NOT NULL FROM renewed r;
END
$$;
-- @@ function pgqueue.ack
-- @@ after function pgqueue.renew

-- queries -----------------------------------------------------------------------------------

-- settle.sql: functions
-- Ack: the job is done and deleted; its history stays in op_log. Returns the ids acked.
-- p_stream: the stream the leases came from (a worker's call names it; on Citus the call then
-- runs on the node holding the stream); NULL (psql, a client of 0016): each stream of these
-- jobs in turn.
CREATE OR REPLACE FUNCTION pgqueue.ack(p_job_ids bigint[], p_lease_ids bigint[],
                                       p_stream text DEFAULT NULL) RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    v_stream text;
BEGIN
    PERFORM pgqueue.require_leader();
    IF p_stream IS NULL THEN
        FOR v_stream IN SELECT DISTINCT j.stream FROM pgqueue.job j WHERE j.id = ANY(p_job_ids) LOOP
            RETURN QUERY SELECT pgqueue.ack(p_job_ids, p_lease_ids, v_stream);
        END LOOP;
        RETURN;
    END IF;
    RETURN QUERY
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
        RETURNING j.id, j.lease_id, j.stream
    ), logged AS (
        INSERT INTO pgqueue.op_log (stream, op, job_id, lease_id, body)
        SELECT g.stream, 'Ack', g.id, g.lease_id, '{}'::jsonb  -- job and lease: the row's columns
        FROM gone g ORDER BY g.id
    )
    SELECT g.id FROM gone g;
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
                             p_max_attempts int DEFAULT NULL, p_summary text DEFAULT NULL,
                             p_stream text DEFAULT NULL)
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
-- @@ function pgqueue.return_leases
-- @@ after function pgqueue.nack

-- Worker: give leases back without costing an attempt (graceful shutdown). Checkpoint kept.
-- A job whose cancel was requested ends as cancelled instead. Returns each job let go of, and
-- the state it went to (pending, or cancelled).
CREATE OR REPLACE FUNCTION pgqueue.return_leases(p_job_ids bigint[], p_lease_ids bigint[],
                                                 p_stream text DEFAULT NULL)
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
-- @@ function pgqueue.mark_undecodable
-- @@ after function pgqueue.return_leases

-- Worker: this code cannot run the job (unknown_kind, payload_version, step_set_changed).
-- Costs no attempt; a job whose cancel was requested ends as cancelled instead of parked.
-- Returns the state it went to (undecodable, or cancelled); NULL when the lease is not current.
CREATE OR REPLACE FUNCTION pgqueue.mark_undecodable(p_job_id bigint, p_lease_id bigint, p_reason text,
                                         p_detail jsonb, p_stream text DEFAULT NULL) RETURNS text
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
-- @@ function pgqueue.end_cancelled
-- @@ after function pgqueue.mark_undecodable

-- Worker: the handler stopped on its job's cancel request (it raised pgqueue.Cancelled, or its
-- task was cancelled), or raised Cancelled itself: the job ends as cancelled, never retried.
-- Returns false when the lease is not current.
CREATE OR REPLACE FUNCTION pgqueue.end_cancelled(p_job_id bigint, p_lease_id bigint,
                                                 p_stream text DEFAULT NULL) RETURNS boolean
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
-- @@ function pgqueue.upcast
-- @@ after function pgqueue.end_cancelled

-- Worker: store an upcast payload and its new schema version as the job resumes.
CREATE OR REPLACE FUNCTION pgqueue.upcast(p_job_id bigint, p_lease_id bigint, p_payload bytea,
                               p_schema_version int, p_stream text DEFAULT NULL) RETURNS boolean
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
        EXECUTE format('INSERT INTO pgqueue.lease_expiry (slot, expires_at, job_ids, stream) '
                       'SELECT pgqueue.expiry_slot(e.expires_at), e.expires_at, '
                       'array_agg(j.id ORDER BY j.id), j.stream FROM %s e '
                       'JOIN pgqueue.job j ON j.id = ANY(e.job_ids) AND j.state = ''leased'' '
                       'AND j.lease_expires_at = e.expires_at '
                       'WHERE e.expires_at >= $1 GROUP BY e.expires_at, j.stream', v_part)
        USING v_now;
    END LOOP;
    EXECUTE 'TRUNCATE ' || (SELECT string_agg(format('%s', p), ', ') FROM unnest(v_parts) p);
    RETURN cardinality(v_parts);
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
    v_stream text := pgqueue.dead_stream_of(p_job_id);
BEGIN
    PERFORM pgqueue.require_leader();
    -- found by id, then locked by stream and id (on Citus a lock is taken on one node only)
    SELECT * INTO d FROM pgqueue.dead_letter WHERE stream = v_stream AND id = p_job_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'job % is not a dead letter', p_job_id USING ERRCODE = 'PQ404';
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
-- @@ function pgqueue.cancel
-- @@ after function pgqueue.accept_step_set

-- Operator: cancel a job. One that is not leased (live or dead) is removed for good at once
-- ('cancelled'). One a worker holds is asked to stop ('requested'): the request is recorded
-- once (op RequestCancel) and the worker told at once (NOTIFY pgqueue_cancel, the lease id),
-- or by its next renewal; the job then ends as cancelled when its handler stops, and also when
-- its lease ends any other way but an ack (pgqueue.finish_cancel): it never runs again. A
-- handler that finishes first is acked: the cancel came too late, as its history shows.
CREATE OR REPLACE FUNCTION pgqueue.cancel(p_job_id bigint) RETURNS text
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    v_now timestamptz := pgqueue.now_ms();
    j pgqueue.job;
    v_stream text := pgqueue.stream_of(p_job_id);
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
                PERFORM pg_notify('pgqueue_cancel', j.lease_id::text);
            END IF;
            RETURN 'requested';
        END IF;
        DELETE FROM pgqueue.job WHERE stream = j.stream AND id = p_job_id;
        INSERT INTO pgqueue.op_log (stream, op, job_id, body)
        VALUES (j.stream, 'Cancel', p_job_id, jsonb_build_object('job_id', p_job_id, 'was', j.state));
        RETURN 'cancelled';
    END IF;
    v_stream := pgqueue.dead_stream_of(p_job_id);
    DELETE FROM pgqueue.dead_letter WHERE stream = v_stream AND id = p_job_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no job %', p_job_id USING ERRCODE = 'PQ404';
    END IF;
    INSERT INTO pgqueue.op_log (stream, op, job_id, body)
    VALUES (v_stream, 'Cancel', p_job_id, jsonb_build_object('job_id', p_job_id, 'was', 'dead'));
    RETURN 'cancelled';
END
$$;
-- @@ function pgqueue.apply_verb_to_jobs
-- @@ after function pgqueue.configure_kind

-- Operator: one verb on many jobs of a filter (the bulk actions). Each job is locked and
-- checked against the filter (stream, state, kind; NULL: any) it was chosen by, then goes
-- through the same function as the verb on one job, in its own subtransaction, so each logs
-- its op and a job the verb does not fit (gone, changed meanwhile, a dedup key taken) is
-- returned with why instead of failing the rest (outcome 'refused'); a leased job a cancel
-- could only ask to stop is returned as 'requested'; every other job was done. Callers send
-- at most 50 ids at a time: past 64 subtransactions in one transaction every other session's
-- snapshots overflow and slow down. The verb is one of a fixed list: no SQL is built from it.
CREATE OR REPLACE FUNCTION pgqueue.apply_verb_to_jobs(p_verb text, p_job_ids bigint[],
                                                      p_to_step text DEFAULT NULL,
                                                      p_stream text DEFAULT NULL,
                                                      p_state text DEFAULT NULL,
                                                      p_kind text DEFAULT NULL)
RETURNS TABLE (job_id bigint, outcome text, refused text)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    v_id bigint;
    v_cancel text;
    v_stream text;
BEGIN
    PERFORM pgqueue.require_leader();
    IF p_verb IS NULL OR p_verb NOT IN ('requeue', 'release', 'rewind', 'restart', 'skip-step',
                                        'accept-step-set', 'cancel') THEN
        RAISE EXCEPTION 'unknown verb %: use requeue, release, rewind, restart, skip-step, accept-step-set or cancel',
            quote_nullable(left(p_verb, 40)) USING ERRCODE = '22023';
    END IF;
    IF p_verb = 'rewind' AND (p_to_step IS NULL OR p_to_step = '') THEN
        RAISE EXCEPTION 'rewind needs the step to rewind to' USING ERRCODE = '22023';
    END IF;
    FOREACH v_id IN ARRAY coalesce(p_job_ids, '{}') LOOP
        -- each found by id, then locked by stream and id (on Citus: on one node)
        v_stream := pgqueue.stream_of(v_id);
        PERFORM 1 FROM pgqueue.job j
        WHERE j.stream = v_stream AND j.id = v_id AND (p_stream IS NULL OR j.stream = p_stream)
          AND (p_state IS NULL OR j.state = p_state) AND (p_kind IS NULL OR j.kind = p_kind)
        FOR UPDATE;
        IF NOT FOUND AND (p_state IS NULL OR p_state = 'dead') THEN
            v_stream := pgqueue.dead_stream_of(v_id);
            PERFORM 1 FROM pgqueue.dead_letter d
            WHERE d.stream = v_stream AND d.id = v_id AND (p_stream IS NULL OR d.stream = p_stream)
              AND (p_kind IS NULL OR d.kind = p_kind)
            FOR UPDATE;
        END IF;
        IF NOT FOUND THEN
            job_id := v_id;
            outcome := 'refused';
            refused := format('job %s no longer matches the filter (it changed or is gone)', v_id);
            RETURN NEXT;
            CONTINUE;
        END IF;
        BEGIN
            CASE p_verb
                WHEN 'requeue' THEN PERFORM pgqueue.requeue_dead_letter(v_id);
                WHEN 'release' THEN PERFORM pgqueue.release(v_id);
                WHEN 'rewind' THEN PERFORM pgqueue.rewind(v_id, p_to_step);
                WHEN 'restart' THEN PERFORM pgqueue.restart(v_id);
                WHEN 'skip-step' THEN PERFORM pgqueue.skip_step(v_id);
                WHEN 'accept-step-set' THEN PERFORM pgqueue.accept_step_set(v_id);
                WHEN 'cancel' THEN v_cancel := pgqueue.cancel(v_id);
            END CASE;
            IF v_cancel = 'requested' THEN
                job_id := v_id;
                outcome := 'requested';
                refused := NULL;
                RETURN NEXT;
                v_cancel := NULL;
            END IF;
        EXCEPTION WHEN SQLSTATE 'PQ404' OR SQLSTATE 'PQ409' OR SQLSTATE 'PQ422' THEN
            job_id := v_id;
            outcome := 'refused';
            refused := SQLERRM;
            RETURN NEXT;
        END;
    END LOOP;
END
$$;
