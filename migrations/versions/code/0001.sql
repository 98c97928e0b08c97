-- GENERATED FILE: do not edit. What pgqueue schema revision 0001 changed in the functions and
-- views, object by object, against the code of nothing (the first revision) (frozen by
-- `python -m pgqueue_migrations.new` when revision 0002 was started). Each entry is headed
-- by the object it defines and the one it follows, then its whole text (or `removed`); the
-- code of 0001 is every frozen file up to it applied in order (migrations/frozen.py). Loaded
-- when a database is upgraded to 0001 or downgraded to it; the current definitions live in
-- pgqueue/sql/.

-- @@ function pgqueue.accept_step_set
-- @@ after (start)
CREATE OR REPLACE FUNCTION pgqueue.accept_step_set(p_job_id bigint)
 RETURNS pgqueue.job
 LANGUAGE plpgsql
AS $function$
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
    RETURN pgqueue.save_as_pending(j, 'AcceptStepSet', false);
END
$function$;
-- @@ function pgqueue.ack
-- @@ after function pgqueue.accept_step_set

CREATE OR REPLACE FUNCTION pgqueue.ack(p_job_ids bigint[], p_lease_ids bigint[])
 RETURNS SETOF bigint
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM pgqueue.require_leader();
    RETURN QUERY
    WITH gone AS (
        DELETE FROM pgqueue.job j
        USING unnest(p_job_ids, p_lease_ids) AS t(job_id, lease_id)
        WHERE j.id = t.job_id AND j.lease_id = t.lease_id AND j.state = 'leased'
        RETURNING j.id, j.lease_id, j.stream
    ), logged AS (
        INSERT INTO pgqueue.op_log (stream, op, job_id, lease_id, body)
        SELECT g.stream, 'Ack', g.id, g.lease_id, jsonb_build_object('job_id', g.id, 'lease_id', g.lease_id)
        FROM gone g ORDER BY g.id
    )
    SELECT g.id FROM gone g;
END
$function$;
-- @@ function pgqueue.advance_schedule
-- @@ after function pgqueue.ack

CREATE OR REPLACE FUNCTION pgqueue.advance_schedule(p_stream text, p_name text, p_next_run_at timestamp with time zone, p_last_fired_at timestamp with time zone, p_fired jsonb)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
    c pgqueue.schedule;
BEGIN
    PERFORM pgqueue.require_leader();
    UPDATE pgqueue.schedule
    SET next_run_at = date_trunc('milliseconds', p_next_run_at),
        last_fired_at = coalesce(date_trunc('milliseconds', p_last_fired_at), last_fired_at)
    WHERE stream = p_stream AND name = p_name
    RETURNING * INTO c;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no schedule % in stream %', p_name, p_stream USING ERRCODE = 'PQ404';
    END IF;
    INSERT INTO pgqueue.op_log (stream, op, body)
    VALUES (p_stream, 'UpdateScheduleNextRun', jsonb_build_object(
        'stream', c.stream, 'name', c.name, 'next_run_at_ms', pgqueue.to_ms(c.next_run_at),
        'last_fired_at_ms', pgqueue.to_ms(c.last_fired_at), 'fired', p_fired));
END
$function$;
-- @@ function pgqueue.apply_job_state
-- @@ after function pgqueue.advance_schedule

CREATE OR REPLACE FUNCTION pgqueue.apply_job_state(p_job_id bigint, b jsonb)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgqueue'
AS $function$
BEGIN
    UPDATE pgqueue.job
    SET payload = CASE WHEN b ? 'payload' THEN pgqueue.unb64(b ->> 'payload') ELSE payload END,
        state = b ->> 'state', attempts = (b ->> 'attempts')::int,
        max_attempts = (b ->> 'max_attempts')::int,
        not_before = pgqueue.from_ms((b ->> 'not_before_ms')::bigint),
        last_error = b ->> 'last_error', state_reason = b ->> 'state_reason',
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
$function$;
-- @@ function pgqueue.apply_op
-- @@ after function pgqueue.apply_job_state

CREATE OR REPLACE FUNCTION pgqueue.apply_op(p_op text, p_job_id bigint, p_lease_id bigint, b jsonb)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgqueue'
AS $function$
BEGIN
    CASE p_op
    WHEN 'Enqueue' THEN
        INSERT INTO pgqueue.job (id, stream, kind, payload, priority, state, not_before,
                                 enqueued_at, dedup_key, attempts, max_attempts, schema_version)
        VALUES (p_job_id, b ->> 'stream', b ->> 'kind', pgqueue.unb64(b ->> 'payload'),
                (b ->> 'priority')::smallint, b ->> 'state',
                pgqueue.from_ms((b ->> 'not_before_ms')::bigint),
                pgqueue.from_ms((b ->> 'enqueued_at_ms')::bigint),
                pgqueue.unb64(b ->> 'dedup_key'), (b ->> 'attempts')::int,
                (b ->> 'max_attempts')::int, (b ->> 'schema_version')::int)
        ON CONFLICT (id) DO NOTHING;
    WHEN 'Lease' THEN
        UPDATE pgqueue.job
        SET state = 'leased', lease_id = p_lease_id, worker_node = (b ->> 'worker_node')::int,
            worker_instance = (b ->> 'worker_instance')::int,
            lease_expires_at = pgqueue.from_ms((b ->> 'expires_at_ms')::bigint)
        WHERE id = p_job_id;
    WHEN 'Renew' THEN
        UPDATE pgqueue.job
        SET lease_expires_at = pgqueue.from_ms((b ->> 'expires_at_ms')::bigint),
            last_completed_step = b #>> '{checkpoint,last_completed_step}',
            cursor_step = b #>> '{checkpoint,cursor_step}',
            cursor = pgqueue.unb64(b #>> '{checkpoint,cursor}'),
            checkpoint_updated_at = pgqueue.from_ms((b #>> '{checkpoint,updated_at_ms}')::bigint),
            schema_version = (b #>> '{checkpoint,schema_version}')::int,
            step_set_hash = b #>> '{checkpoint,step_set_hash}'
        WHERE id = p_job_id AND lease_id = p_lease_id;
    WHEN 'Ack' THEN
        DELETE FROM pgqueue.job WHERE id = p_job_id;
    WHEN 'Promote' THEN
        UPDATE pgqueue.job SET state = 'pending' WHERE id = p_job_id AND state = 'scheduled';
    WHEN 'Nack', 'Reclaim' THEN
        IF b ->> 'state' = 'dead' THEN
            UPDATE pgqueue.job SET max_attempts = (b ->> 'max_attempts')::int WHERE id = p_job_id;
            PERFORM pgqueue.bury(p_job_id, (b ->> 'attempts')::int, b ->> 'last_error',
                                 pgqueue.from_ms((b ->> 'at_ms')::bigint), b -> 'crashes_by_step');
        ELSE
            UPDATE pgqueue.job
            SET state = b ->> 'state', attempts = (b ->> 'attempts')::int,
                max_attempts = (b ->> 'max_attempts')::int,
                last_error = b ->> 'last_error', state_reason = b ->> 'state_reason',
                state_detail = nullif(b -> 'state_detail', 'null'::jsonb),
                not_before = pgqueue.from_ms((b ->> 'not_before_ms')::bigint),
                crashes_by_step = b -> 'crashes_by_step',
                lease_id = NULL, worker_node = NULL, worker_instance = NULL, lease_expires_at = NULL
            WHERE id = p_job_id;
        END IF;
    WHEN 'RequeueDeadLetter' THEN
        WITH d AS (DELETE FROM pgqueue.dead_letter WHERE id = p_job_id RETURNING *)
        INSERT INTO pgqueue.job (id, stream, kind, payload, priority, state, not_before, enqueued_at,
            dedup_key, attempts, max_attempts, last_error, last_completed_step, cursor_step, cursor,
            checkpoint_updated_at, schema_version, step_set_hash, crashes_by_step)
        SELECT d.id, d.stream, d.kind, d.payload, d.priority, b ->> 'state',
            pgqueue.from_ms((b ->> 'not_before_ms')::bigint), d.enqueued_at, d.dedup_key,
            (b ->> 'attempts')::int, d.max_attempts, d.last_error, d.last_completed_step,
            d.cursor_step, d.cursor, d.checkpoint_updated_at, d.schema_version, d.step_set_hash,
            d.crashes_by_step
        FROM d;
    WHEN 'ReturnLease', 'MarkUndecodable', 'Upcast', 'Release', 'Rewind', 'Restart', 'SkipStep',
         'AcceptStepSet' THEN
        PERFORM pgqueue.apply_job_state(p_job_id, b);
    WHEN 'Cancel' THEN
        DELETE FROM pgqueue.job WHERE id = p_job_id;
        DELETE FROM pgqueue.dead_letter WHERE id = p_job_id;
    WHEN 'RegisterStepSet' THEN
        INSERT INTO pgqueue.step_set (hash, kind, steps, created_at)
        VALUES (b ->> 'hash', b ->> 'kind', b -> 'steps', pgqueue.from_ms((b ->> 'created_at_ms')::bigint))
        ON CONFLICT (hash) DO NOTHING;
    WHEN 'ConfigureKind' THEN
        IF b ->> 'quarantine_after' IS NULL THEN
            DELETE FROM pgqueue.kind_config WHERE stream = b ->> 'stream' AND kind = b ->> 'kind';
        ELSE
            INSERT INTO pgqueue.kind_config (stream, kind, quarantine_after)
            VALUES (b ->> 'stream', b ->> 'kind', (b ->> 'quarantine_after')::int)
            ON CONFLICT (stream, kind) DO UPDATE SET quarantine_after = excluded.quarantine_after;
        END IF;
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
        INSERT INTO pgqueue.stream_config AS s
        SELECT * FROM jsonb_populate_record(NULL::pgqueue.stream_config, b)
        ON CONFLICT (stream) DO UPDATE SET
            retry_base_ms = excluded.retry_base_ms, retry_cap_ms = excluded.retry_cap_ms,
            quarantine_after = excluded.quarantine_after;
    ELSE
        RAISE EXCEPTION 'apply_op: unknown op %', p_op USING ERRCODE = '22023';
    END CASE;
END
$function$;
-- @@ function pgqueue.b64
-- @@ after function pgqueue.apply_op

CREATE OR REPLACE FUNCTION pgqueue.b64(b bytea)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$ SELECT translate(encode(b, 'base64'), E'\n', '') $function$;
-- @@ function pgqueue.backoff_ms
-- @@ after function pgqueue.b64

CREATE OR REPLACE FUNCTION pgqueue.backoff_ms(p_stream text, p_attempts integer)
 RETURNS bigint
 LANGUAGE sql
AS $function$
    SELECT least(c.cap, (c.base * power(2, least(p_attempts, 40)) * (0.75 + random() * 0.5)))::bigint
    FROM (SELECT coalesce(sc.retry_base_ms, 1000) AS base, coalesce(sc.retry_cap_ms, 3600000) AS cap
          FROM (SELECT 1) one
          LEFT JOIN pgqueue.stream_config sc ON sc.stream = p_stream) c
$function$;
-- @@ function pgqueue.bury
-- @@ after function pgqueue.backoff_ms

CREATE OR REPLACE FUNCTION pgqueue.bury(p_job_id bigint, p_attempts integer, p_error text, p_died_at timestamp with time zone, p_crashes jsonb)
 RETURNS void
 LANGUAGE sql
AS $function$
    WITH gone AS (DELETE FROM pgqueue.job WHERE id = p_job_id RETURNING *)
    INSERT INTO pgqueue.dead_letter (id, stream, kind, payload, priority, enqueued_at, dedup_key,
        attempts, max_attempts, last_error, died_at, last_completed_step, cursor_step, cursor,
        checkpoint_updated_at, schema_version, step_set_hash, crashes_by_step)
    SELECT id, stream, kind, payload, priority, enqueued_at, dedup_key,
        p_attempts, max_attempts, p_error, p_died_at, last_completed_step, cursor_step, cursor,
        checkpoint_updated_at, schema_version, step_set_hash, p_crashes
    FROM gone
$function$;
-- @@ function pgqueue.cancel
-- @@ after function pgqueue.bury

CREATE OR REPLACE FUNCTION pgqueue.cancel(p_job_id bigint)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_stream text;
    v_state text;
BEGIN
    PERFORM pgqueue.require_leader();
    SELECT stream, state INTO v_stream, v_state FROM pgqueue.job WHERE id = p_job_id FOR UPDATE;
    IF FOUND THEN
        IF v_state = 'leased' THEN
            RAISE EXCEPTION 'cannot cancel job %: it is leased by a worker; wait for it to settle or for its lease to expire',
                p_job_id USING ERRCODE = 'PQ422';
        END IF;
        DELETE FROM pgqueue.job WHERE id = p_job_id;
    ELSE
        DELETE FROM pgqueue.dead_letter WHERE id = p_job_id RETURNING stream, 'dead' INTO v_stream, v_state;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'no job %', p_job_id USING ERRCODE = 'PQ404';
        END IF;
    END IF;
    INSERT INTO pgqueue.op_log (stream, op, job_id, body)
    VALUES (v_stream, 'Cancel', p_job_id, jsonb_build_object('job_id', p_job_id, 'was', v_state));
END
$function$;
-- @@ function pgqueue.check_dedup_free
-- @@ after function pgqueue.cancel

CREATE OR REPLACE FUNCTION pgqueue.check_dedup_free(j pgqueue.job)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_holder bigint;
BEGIN
    IF j.dedup_key IS NULL OR j.state IN ('pending', 'scheduled', 'leased') THEN
        RETURN;
    END IF;
    SELECT id INTO v_holder FROM pgqueue.job
    WHERE stream = j.stream AND dedup_key = j.dedup_key AND id <> j.id
      AND state IN ('pending', 'scheduled', 'leased');
    IF FOUND THEN
        RAISE EXCEPTION 'cannot return job % to pending: live job % holds its dedup key', j.id, v_holder
            USING ERRCODE = 'PQ409', DETAIL = format('holder=%s', v_holder);
    END IF;
END
$function$;
-- @@ function pgqueue.check_stream
-- @@ after function pgqueue.check_dedup_free

CREATE OR REPLACE FUNCTION pgqueue.check_stream(p_stream text)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
AS $function$
BEGIN
    IF p_stream IS NULL OR length(p_stream) = 0 OR length(p_stream) > 200 THEN
        RAISE EXCEPTION 'stream name must be 1 to 200 characters, got %', quote_nullable(left(p_stream, 40))
            USING ERRCODE = '22023';
    END IF;
END
$function$;
-- @@ function pgqueue.checkpoint_json
-- @@ after function pgqueue.check_stream

CREATE OR REPLACE FUNCTION pgqueue.checkpoint_json(j pgqueue.job)
 RETURNS jsonb
 LANGUAGE sql
 IMMUTABLE
AS $function$
    SELECT jsonb_build_object(
        'last_completed_step', j.last_completed_step,
        'cursor_step', j.cursor_step,
        'cursor', pgqueue.b64(j.cursor),
        'updated_at_ms', pgqueue.to_ms(j.checkpoint_updated_at),
        'schema_version', j.schema_version,
        'step_set_hash', j.step_set_hash,
        'crashes_by_step', j.crashes_by_step)
$function$;
-- @@ function pgqueue.configure_kind
-- @@ after function pgqueue.checkpoint_json

CREATE OR REPLACE FUNCTION pgqueue.configure_kind(p_stream text, p_kind text, p_quarantine_after integer)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM pgqueue.require_leader();
    PERFORM pgqueue.check_stream(p_stream);
    IF p_quarantine_after IS NULL THEN
        DELETE FROM pgqueue.kind_config WHERE stream = p_stream AND kind = p_kind;
    ELSE
        INSERT INTO pgqueue.kind_config AS k (stream, kind, quarantine_after)
        VALUES (p_stream, p_kind, p_quarantine_after)
        ON CONFLICT (stream, kind) DO UPDATE SET quarantine_after = excluded.quarantine_after
        WHERE k.quarantine_after IS DISTINCT FROM excluded.quarantine_after;
    END IF;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO pgqueue.op_log (stream, op, body)
    VALUES (p_stream, 'ConfigureKind', jsonb_build_object('stream', p_stream, 'kind', p_kind,
            'quarantine_after', p_quarantine_after));
    RETURN true;
END
$function$;
-- @@ function pgqueue.configure_stream
-- @@ after function pgqueue.configure_kind

CREATE OR REPLACE FUNCTION pgqueue.configure_stream(p_stream text, p_retry_base_ms bigint DEFAULT NULL::bigint, p_retry_cap_ms bigint DEFAULT NULL::bigint, p_quarantine_after integer DEFAULT NULL::integer)
 RETURNS pgqueue.stream_config
 LANGUAGE plpgsql
AS $function$
DECLARE
    c pgqueue.stream_config;
BEGIN
    PERFORM pgqueue.require_leader();
    PERFORM pgqueue.check_stream(p_stream);
    INSERT INTO pgqueue.stream_config AS s (stream, retry_base_ms, retry_cap_ms, quarantine_after)
    VALUES (p_stream, coalesce(p_retry_base_ms, 1000), coalesce(p_retry_cap_ms, 3600000),
            coalesce(p_quarantine_after, 3))
    ON CONFLICT (stream) DO UPDATE SET
        retry_base_ms = coalesce(p_retry_base_ms, s.retry_base_ms),
        retry_cap_ms = coalesce(p_retry_cap_ms, s.retry_cap_ms),
        quarantine_after = coalesce(p_quarantine_after, s.quarantine_after)
    RETURNING * INTO c;
    INSERT INTO pgqueue.op_log (stream, op, body)
    VALUES (p_stream, 'ConfigureStream', to_jsonb(c));
    RETURN c;
END
$function$;
-- @@ function pgqueue.disable_apply_trigger
-- @@ after function pgqueue.configure_stream

CREATE OR REPLACE FUNCTION pgqueue.disable_apply_trigger()
 RETURNS void
 LANGUAGE sql
AS $function$ DROP TRIGGER IF EXISTS op_log_apply ON pgqueue.op_log $function$;
-- @@ function pgqueue.enable_apply_trigger
-- @@ after function pgqueue.disable_apply_trigger

CREATE OR REPLACE FUNCTION pgqueue.enable_apply_trigger()
 RETURNS void
 LANGUAGE plpgsql
AS $function$
BEGIN
    DROP TRIGGER IF EXISTS op_log_apply ON pgqueue.op_log;
    CREATE TRIGGER op_log_apply BEFORE INSERT ON pgqueue.op_log
        FOR EACH ROW EXECUTE FUNCTION pgqueue.op_log_apply_trigger();
    ALTER TABLE pgqueue.op_log ENABLE ALWAYS TRIGGER op_log_apply;
END
$function$;
-- @@ function pgqueue.enqueue
-- @@ after function pgqueue.enable_apply_trigger

CREATE OR REPLACE FUNCTION pgqueue.enqueue(p_stream text, p_payloads bytea[], p_kinds text[], p_priorities integer[], p_delays_ms bigint[], p_not_befores timestamp with time zone[], p_dedup_keys bytea[], p_max_attempts integer[], p_schema_versions integer[])
 RETURNS SETOF bigint
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_now      timestamptz := pgqueue.now_ms();
    v_n        int := coalesce(cardinality(p_payloads), 0);
    v_ids      bigint[];
    v_result   bigint[];
    v_todo     int[];
    v_inserted bigint[];
    v_holder   bigint;
    v_ready    boolean;
    v_round    int := 0;
    i          int;
BEGIN
    PERFORM pgqueue.require_leader();
    PERFORM pgqueue.check_stream(p_stream);
    IF cardinality(p_kinds) <> v_n OR cardinality(p_priorities) <> v_n
       OR cardinality(p_delays_ms) <> v_n OR cardinality(p_not_befores) <> v_n
       OR cardinality(p_dedup_keys) <> v_n OR cardinality(p_max_attempts) <> v_n
       OR cardinality(p_schema_versions) <> v_n THEN
        RAISE EXCEPTION 'enqueue: all arrays must have % elements', v_n USING ERRCODE = '22023';
    END IF;
    IF v_n = 0 THEN
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
                   p_schema_versions[t.ord] AS schema_version
            FROM unnest(v_todo) WITH ORDINALITY AS t(ord, k)
        ), ins AS (
            INSERT INTO pgqueue.job (id, stream, kind, payload, priority, state, not_before,
                                     enqueued_at, dedup_key, attempts, max_attempts, schema_version)
            SELECT id, p_stream, kind, payload, priority,
                   CASE WHEN not_before > v_now THEN 'scheduled' ELSE 'pending' END,
                   not_before, v_now, dedup_key, 0, max_attempts, schema_version
            -- Insert in dedup-key order so concurrent batches take key locks in one order
            -- (no deadlock); within a key the earlier input wins.
            FROM input ORDER BY dedup_key NULLS LAST, ord
            ON CONFLICT (stream, dedup_key)
                WHERE dedup_key IS NOT NULL AND state IN ('pending', 'scheduled', 'leased')
                DO NOTHING
            RETURNING *
        ), logged AS (
            INSERT INTO pgqueue.op_log (stream, op, job_id, body)
            SELECT ins.stream, 'Enqueue', ins.id, pgqueue.enqueue_body(ins::pgqueue.job)
            FROM ins ORDER BY ins.id
            RETURNING job_id, (body ->> 'state') = 'pending' AS ready
        )
        SELECT array_agg(job_id), bool_or(ready) INTO v_inserted, v_ready FROM logged;
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
$function$;
-- @@ function pgqueue.enqueue_body
-- @@ after function pgqueue.enqueue

CREATE OR REPLACE FUNCTION pgqueue.enqueue_body(j pgqueue.job)
 RETURNS jsonb
 LANGUAGE sql
 IMMUTABLE
AS $function$
    SELECT jsonb_build_object(
        'job_id', j.id, 'stream', j.stream, 'kind', j.kind, 'payload', pgqueue.b64(j.payload),
        'priority', j.priority, 'state', j.state, 'enqueued_at_ms', pgqueue.to_ms(j.enqueued_at),
        'not_before_ms', pgqueue.to_ms(j.not_before), 'dedup_key', pgqueue.b64(j.dedup_key),
        'attempts', j.attempts, 'max_attempts', j.max_attempts,
        'schema_version', j.schema_version, 'next_job_id', j.id + 1)
$function$;
-- @@ function pgqueue.enqueue_one
-- @@ after function pgqueue.enqueue_body

CREATE OR REPLACE FUNCTION pgqueue.enqueue_one(p_stream text, p_payload bytea, p_kind text, p_priority integer, p_delay_ms bigint, p_not_before timestamp with time zone, p_dedup_key bytea, p_max_attempts integer, p_schema_version integer)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_now timestamptz := pgqueue.now_ms();
    v_at  timestamptz;
    j     pgqueue.job;
    v_holder bigint;
BEGIN
    PERFORM pgqueue.require_leader();
    PERFORM pgqueue.check_stream(p_stream);
    v_at := greatest(v_now, date_trunc('milliseconds', coalesce(
        p_not_before, v_now + coalesce(p_delay_ms, 0) * interval '1 millisecond')));
    FOR round IN 1 .. 20 LOOP
        INSERT INTO pgqueue.job (id, stream, kind, payload, priority, state, not_before,
                                 enqueued_at, dedup_key, attempts, max_attempts, schema_version)
        VALUES (nextval('pgqueue.job_id_seq'), p_stream, p_kind, p_payload, p_priority::smallint,
                CASE WHEN v_at > v_now THEN 'scheduled' ELSE 'pending' END, v_at, v_now,
                p_dedup_key, 0, p_max_attempts, p_schema_version)
        ON CONFLICT (stream, dedup_key)
            WHERE dedup_key IS NOT NULL AND state IN ('pending', 'scheduled', 'leased')
            DO NOTHING
        RETURNING * INTO j;
        IF FOUND THEN
            INSERT INTO pgqueue.op_log (stream, op, job_id, body)
            VALUES (j.stream, 'Enqueue', j.id, pgqueue.enqueue_body(j));
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
$function$;
-- @@ function pgqueue.from_ms
-- @@ after function pgqueue.enqueue_one

CREATE OR REPLACE FUNCTION pgqueue.from_ms(ms bigint)
 RETURNS timestamp with time zone
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$ SELECT 'epoch'::timestamptz + ms * interval '1 millisecond' $function$;
-- @@ function pgqueue.ingest_op
-- @@ after function pgqueue.from_ms

CREATE OR REPLACE FUNCTION pgqueue.ingest_op(p_seq bigint, p_stream text, p_op text, p_job_id bigint, p_lease_id bigint, p_body jsonb, p_xid xid8, p_at timestamp with time zone, p_lsn pg_lsn)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgqueue'
AS $function$
BEGIN
    INSERT INTO pgqueue.op_log (seq, stream, op, job_id, lease_id, body, xid, at, lsn)
    VALUES (p_seq, p_stream, p_op, p_job_id, p_lease_id, p_body, p_xid, p_at, p_lsn)
    ON CONFLICT (seq) DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pgqueue.apply_op(p_op, p_job_id, p_lease_id, p_body);
    RETURN true;
END
$function$;
-- @@ function pgqueue.ingest_ops
-- @@ after function pgqueue.ingest_op

CREATE OR REPLACE FUNCTION pgqueue.ingest_ops(p_ops jsonb)
 RETURNS integer
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgqueue'
AS $function$
DECLARE
    o pgqueue.op_log;
    v_new int := 0;
BEGIN
    FOR o IN SELECT * FROM jsonb_populate_recordset(NULL::pgqueue.op_log, p_ops) LOOP
        IF pgqueue.ingest_op(o.seq, o.stream, o.op, o.job_id, o.lease_id, o.body, o.xid, o.at,
                             o.lsn) THEN
            v_new := v_new + 1;
        END IF;
    END LOOP;
    RETURN v_new;
END
$function$;
-- @@ function pgqueue.job_state_json
-- @@ after function pgqueue.ingest_ops

CREATE OR REPLACE FUNCTION pgqueue.job_state_json(j pgqueue.job)
 RETURNS jsonb
 LANGUAGE sql
 IMMUTABLE
AS $function$
    SELECT jsonb_build_object(
        'job_id', j.id, 'state', j.state, 'attempts', j.attempts, 'max_attempts', j.max_attempts,
        'not_before_ms', pgqueue.to_ms(j.not_before), 'last_error', j.last_error,
        'state_reason', j.state_reason, 'state_detail', j.state_detail,
        'checkpoint', pgqueue.checkpoint_json(j))
$function$;
-- @@ function pgqueue.lease
-- @@ after function pgqueue.job_state_json

CREATE OR REPLACE FUNCTION pgqueue.lease(p_stream text, p_limit integer, p_visibility_ms bigint, p_worker_node integer, p_worker_instance integer)
 RETURNS SETOF pgqueue.job
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_now timestamptz := pgqueue.now_ms();
    v_exp timestamptz := v_now + p_visibility_ms * interval '1 millisecond';
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
        SELECT l.stream, 'Lease', l.id, l.lease_id, jsonb_build_object(
            'job_id', l.id, 'lease_id', l.lease_id, 'worker_node', l.worker_node,
            'worker_instance', l.worker_instance, 'expires_at_ms', pgqueue.to_ms(l.lease_expires_at))
        FROM leased l ORDER BY l.id
    )
    SELECT * FROM leased ORDER BY priority DESC, id;
END
$function$;
-- @@ function pgqueue.leased_job
-- @@ after function pgqueue.lease

CREATE OR REPLACE FUNCTION pgqueue.leased_job(p_job_id bigint, p_lease_id bigint)
 RETURNS pgqueue.job
 LANGUAGE sql
AS $function$
    SELECT pgqueue.require_leader();
    SELECT * FROM pgqueue.job
    WHERE id = p_job_id AND lease_id = p_lease_id AND state = 'leased'
    FOR UPDATE
$function$;
-- @@ function pgqueue.mark_undecodable
-- @@ after function pgqueue.leased_job

CREATE OR REPLACE FUNCTION pgqueue.mark_undecodable(p_job_id bigint, p_lease_id bigint, p_reason text, p_detail jsonb)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
DECLARE
    j pgqueue.job := pgqueue.leased_job(p_job_id, p_lease_id);
BEGIN
    PERFORM pgqueue.require_leader();
    IF j.id IS NULL THEN
        RETURN false;
    END IF;
    j.state := 'undecodable';
    j.state_reason := p_reason;
    j.state_detail := p_detail;
    PERFORM pgqueue.save_job(j, 'MarkUndecodable', p_lease_id);
    RETURN true;
END
$function$;
-- @@ function pgqueue.nack
-- @@ after function pgqueue.mark_undecodable

CREATE OR REPLACE FUNCTION pgqueue.nack(p_job_id bigint, p_lease_id bigint, p_error text, p_retry_in_ms bigint, p_max_attempts integer DEFAULT NULL::integer)
 RETURNS TABLE(dead boolean)
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_now timestamptz := pgqueue.now_ms();
    j     pgqueue.job;
    v_state text;
BEGIN
    PERFORM pgqueue.require_leader();
    SELECT * INTO j FROM pgqueue.job
    WHERE id = p_job_id AND lease_id = p_lease_id AND state = 'leased'
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    j.attempts := j.attempts + 1;
    j.last_error := coalesce(p_error, j.last_error);
    -- A handler's own limit (app.job(max_attempts=...)) overrides the enqueue-time one.
    j.max_attempts := coalesce(p_max_attempts, j.max_attempts);
    IF j.max_attempts > 0 AND j.attempts >= j.max_attempts THEN
        v_state := 'dead';
        UPDATE pgqueue.job SET max_attempts = j.max_attempts WHERE id = j.id;
        PERFORM pgqueue.bury(j.id, j.attempts, j.last_error, v_now, j.crashes_by_step);
    ELSE
        j.not_before := v_now + coalesce(p_retry_in_ms, pgqueue.backoff_ms(j.stream, j.attempts))
                               * interval '1 millisecond';
        j.not_before := date_trunc('milliseconds', j.not_before);
        v_state := CASE WHEN j.not_before > v_now THEN 'scheduled' ELSE 'pending' END;
        UPDATE pgqueue.job
        SET state = v_state, attempts = j.attempts, max_attempts = j.max_attempts,
            last_error = j.last_error, not_before = j.not_before, lease_id = NULL, worker_node = NULL,
            worker_instance = NULL, lease_expires_at = NULL
        WHERE id = j.id;
    END IF;
    INSERT INTO pgqueue.op_log (stream, op, job_id, lease_id, body)
    VALUES (j.stream, 'Nack', j.id, p_lease_id, pgqueue.outcome_json(j, v_state, v_now));
    RETURN QUERY SELECT v_state = 'dead';
END
$function$;
-- @@ function pgqueue.now_ms
-- @@ after function pgqueue.nack

CREATE OR REPLACE FUNCTION pgqueue.now_ms()
 RETURNS timestamp with time zone
 LANGUAGE sql
 STABLE
AS $function$
    SELECT date_trunc('milliseconds',
                      coalesce(nullif(current_setting('pgqueue.now', true), '')::timestamptz, now()))
$function$;
-- @@ function pgqueue.op_log_apply_trigger
-- @@ after function pgqueue.now_ms

CREATE OR REPLACE FUNCTION pgqueue.op_log_apply_trigger()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgqueue'
AS $function$
BEGIN
    IF current_setting('session_replication_role') <> 'replica' THEN
        RETURN NEW;
    END IF;
    IF EXISTS (SELECT 1 FROM pgqueue.op_log WHERE seq = NEW.seq) THEN
        RETURN NULL;
    END IF;
    PERFORM pgqueue.apply_op(NEW.op, NEW.job_id, NEW.lease_id, NEW.body);
    RETURN NEW;
END
$function$;
-- @@ function pgqueue.operator_job
-- @@ after function pgqueue.op_log_apply_trigger

CREATE OR REPLACE FUNCTION pgqueue.operator_job(p_job_id bigint, p_action text, p_states text[])
 RETURNS pgqueue.job
 LANGUAGE plpgsql
AS $function$
DECLARE
    j pgqueue.job;
BEGIN
    PERFORM pgqueue.require_leader();
    SELECT * INTO j FROM pgqueue.job WHERE id = p_job_id FOR UPDATE;
    IF NOT FOUND THEN
        IF EXISTS (SELECT 1 FROM pgqueue.dead_letter WHERE id = p_job_id) THEN
            RAISE EXCEPTION 'cannot % job %: it is a dead letter (requeue it first)', p_action, p_job_id
                USING ERRCODE = 'PQ422';
        END IF;
        RAISE EXCEPTION 'no live job %', p_job_id USING ERRCODE = 'PQ404';
    END IF;
    IF NOT j.state = ANY (p_states) THEN
        RAISE EXCEPTION 'cannot % job %: it is %, and % applies only to % jobs', p_action, p_job_id,
            j.state, p_action, array_to_string(p_states, ' or ') USING ERRCODE = 'PQ422';
    END IF;
    RETURN j;
END
$function$;
-- @@ function pgqueue.outcome_json
-- @@ after function pgqueue.operator_job

CREATE OR REPLACE FUNCTION pgqueue.outcome_json(j pgqueue.job, p_state text, p_at timestamp with time zone)
 RETURNS jsonb
 LANGUAGE sql
 IMMUTABLE
AS $function$
    SELECT jsonb_build_object(
        'job_id', j.id,
        'state', p_state,
        'attempts', j.attempts,
        'max_attempts', j.max_attempts,
        'not_before_ms', pgqueue.to_ms(j.not_before),
        'last_error', j.last_error,
        'state_reason', j.state_reason,
        'state_detail', j.state_detail,
        'crashes_by_step', j.crashes_by_step,
        'at_ms', pgqueue.to_ms(p_at))
$function$;
-- @@ function pgqueue.promote_due
-- @@ after function pgqueue.outcome_json

CREATE OR REPLACE FUNCTION pgqueue.promote_due(p_stream text, p_limit integer DEFAULT 1000)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
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
$function$;
-- @@ function pgqueue.prune_op_log
-- @@ after function pgqueue.promote_due

CREATE OR REPLACE FUNCTION pgqueue.prune_op_log(p_keep interval, p_stale_after interval DEFAULT '1 day'::interval, p_limit integer DEFAULT 10000)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_seq bigint;
    v_lsn pg_lsn;
    v_n int;
BEGIN
    SELECT min(s.applied_seq) INTO v_seq
    FROM pgqueue.replica_status(p_stale_after) s WHERE NOT s.stale;
    SELECT min(rs.confirmed_flush_lsn) INTO v_lsn
    FROM pgqueue.replica r JOIN pg_replication_slots rs ON rs.slot_name = r.slot_name
    JOIN pgqueue.replica_status(p_stale_after) s ON s.name = r.name AND NOT s.stale
    WHERE r.method = 'logical';
    WITH doomed AS (
        SELECT o.seq FROM pgqueue.op_log o
        WHERE o.at < now() - p_keep
          AND (v_seq IS NULL OR o.seq <= v_seq)
          AND (v_lsn IS NULL OR o.lsn < v_lsn)
          AND o.xid < pg_snapshot_xmin(pg_current_snapshot())
        ORDER BY o.seq
        LIMIT p_limit
    )
    , gone AS (DELETE FROM pgqueue.op_log o USING doomed WHERE o.seq = doomed.seq RETURNING o.seq)
    SELECT count(*), max(seq) INTO v_n, v_seq FROM gone;
    IF v_n > 0 THEN
        UPDATE pgqueue.node SET pruned_through = greatest(pruned_through, v_seq);
    END IF;
    RETURN v_n;
END
$function$;
-- @@ function pgqueue.reclaim_expired
-- @@ after function pgqueue.prune_op_log

CREATE OR REPLACE FUNCTION pgqueue.reclaim_expired(p_limit integer DEFAULT 1000)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_now   timestamptz := pgqueue.now_ms();
    v_count int := 0;
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
        v_step := coalesce(j.cursor_step, '');
        v_crashes := coalesce((j.crashes_by_step ->> v_step)::int, 0) + 1;
        j.crashes_by_step := j.crashes_by_step || jsonb_build_object(v_step, v_crashes);
        j.attempts := j.attempts + 1;
        j.last_error := format('lease %s expired (worker %s/%s)', v_lease, j.worker_node, j.worker_instance);
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
            PERFORM pgqueue.bury(j.id, j.attempts, j.last_error, v_now, j.crashes_by_step);
        ELSE
            UPDATE pgqueue.job
            SET state = v_state, attempts = j.attempts, last_error = j.last_error,
                state_reason = j.state_reason, state_detail = j.state_detail,
                crashes_by_step = j.crashes_by_step, lease_id = NULL, worker_node = NULL, worker_instance = NULL, lease_expires_at = NULL
            WHERE id = j.id;
        END IF;
        INSERT INTO pgqueue.op_log (stream, op, job_id, lease_id, body)
        VALUES (j.stream, 'Reclaim', j.id, v_lease, pgqueue.outcome_json(j, v_state, v_now));
        v_count := v_count + 1;
    END LOOP;
    RETURN v_count;
END
$function$;
-- @@ function pgqueue.register_step_set
-- @@ after function pgqueue.reclaim_expired

CREATE OR REPLACE FUNCTION pgqueue.register_step_set(p_hash text, p_kind text, p_steps jsonb)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_now timestamptz := pgqueue.now_ms();
BEGIN
    PERFORM pgqueue.require_leader();
    INSERT INTO pgqueue.step_set (hash, kind, steps, created_at)
    VALUES (p_hash, p_kind, p_steps, v_now)
    ON CONFLICT (hash) DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO pgqueue.op_log (stream, op, body)
    VALUES ('', 'RegisterStepSet', jsonb_build_object('hash', p_hash, 'kind', p_kind,
            'steps', p_steps, 'created_at_ms', pgqueue.to_ms(v_now)));
    RETURN true;
END
$function$;
-- @@ function pgqueue.release
-- @@ after function pgqueue.register_step_set

CREATE OR REPLACE FUNCTION pgqueue.release(p_job_id bigint, p_reset_crashes boolean DEFAULT false)
 RETURNS pgqueue.job
 LANGUAGE plpgsql
AS $function$
DECLARE
    j pgqueue.job := pgqueue.operator_job(p_job_id, 'release', ARRAY['quarantined', 'undecodable']);
BEGIN
    PERFORM pgqueue.require_leader();
    IF p_reset_crashes THEN
        j.crashes_by_step := '{}';
    END IF;
    RETURN pgqueue.save_as_pending(j, 'Release', false);
END
$function$;
-- @@ function pgqueue.remove_schedule
-- @@ after function pgqueue.release

CREATE OR REPLACE FUNCTION pgqueue.remove_schedule(p_stream text, p_name text)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM pgqueue.require_leader();
    DELETE FROM pgqueue.schedule WHERE stream = p_stream AND name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no schedule % in stream %', p_name, p_stream USING ERRCODE = 'PQ404';
    END IF;
    INSERT INTO pgqueue.op_log (stream, op, body)
    VALUES (p_stream, 'RemoveSchedule', jsonb_build_object('stream', p_stream, 'name', p_name));
END
$function$;
-- @@ function pgqueue.renew
-- @@ after function pgqueue.remove_schedule

CREATE OR REPLACE FUNCTION pgqueue.renew(p_job_ids bigint[], p_lease_ids bigint[], p_visibility_ms bigint[], p_checkpoints jsonb[])
 RETURNS TABLE(job_id bigint, lease_id bigint, expires_at timestamp with time zone)
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_now timestamptz := pgqueue.now_ms();
BEGIN
    PERFORM pgqueue.require_leader();
    RETURN QUERY
    WITH input AS (
        SELECT * FROM unnest(p_job_ids, p_lease_ids, p_visibility_ms, p_checkpoints)
            AS t(job_id, lease_id, visibility_ms, cp)
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
        FROM input i
        WHERE j.id = i.job_id AND j.lease_id = i.lease_id AND j.state = 'leased'
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
$function$;
-- @@ function pgqueue.replica_status
-- @@ after function pgqueue.renew

CREATE OR REPLACE FUNCTION pgqueue.replica_status(p_stale_after interval DEFAULT '1 day'::interval)
 RETURNS TABLE(name text, method text, applied_seq bigint, lag_ops bigint, lag_seconds double precision, active boolean, seen_at timestamp with time zone, stale boolean)
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
    r pgqueue.replica;
    v_confirmed pg_lsn;
    v_active boolean;
BEGIN
    FOR r IN SELECT * FROM pgqueue.replica ORDER BY replica.name LOOP
        name := r.name;
        method := r.method;
        IF r.method = 'logical' THEN
            SELECT s.confirmed_flush_lsn, s.active INTO v_confirmed, v_active
            FROM pg_replication_slots s WHERE s.slot_name = r.slot_name;
            active := coalesce(v_active, false);
            seen_at := CASE WHEN active THEN now() ELSE r.seen_at END;
            -- ops below the slot's confirmed position are applied; when those were pruned, the
            -- replica has at least everything before the oldest op kept
            SELECT coalesce(max(o.seq),
                            (SELECT min(k.seq) - 1 FROM pgqueue.op_log k),
                            (SELECT pruned_through FROM pgqueue.node), 0) INTO applied_seq
            FROM pgqueue.op_log o WHERE v_confirmed IS NOT NULL AND o.lsn < v_confirmed;
            SELECT count(*), extract(epoch FROM now() - min(o.at))::float8 INTO lag_ops, lag_seconds
            FROM pgqueue.op_log o WHERE v_confirmed IS NULL OR o.lsn >= v_confirmed;
        ELSE
            active := r.seen_at > now() - interval '1 minute';
            seen_at := r.seen_at;
            applied_seq := r.confirmed_seq;
            SELECT count(*), extract(epoch FROM now() - min(o.at))::float8 INTO lag_ops, lag_seconds
            FROM pgqueue.op_log o WHERE o.seq > r.confirmed_seq;
        END IF;
        lag_seconds := coalesce(lag_seconds, 0);
        stale := NOT active AND seen_at < now() - p_stale_after;
        RETURN NEXT;
    END LOOP;
END
$function$;
-- @@ function pgqueue.requeue_dead_letter
-- @@ after function pgqueue.replica_status

CREATE OR REPLACE FUNCTION pgqueue.requeue_dead_letter(p_job_id bigint)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_now  timestamptz := pgqueue.now_ms();
    d      pgqueue.dead_letter;
    v_holder bigint;
BEGIN
    PERFORM pgqueue.require_leader();
    SELECT * INTO d FROM pgqueue.dead_letter WHERE id = p_job_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'job % is not a dead letter', p_job_id USING ERRCODE = 'PQ404';
    END IF;
    IF d.dedup_key IS NOT NULL THEN
        SELECT id INTO v_holder FROM pgqueue.job
        WHERE stream = d.stream AND dedup_key = d.dedup_key
          AND state IN ('pending', 'scheduled', 'leased');
        IF FOUND THEN
            RAISE EXCEPTION 'cannot requeue dead letter %: live job % holds its dedup key', p_job_id, v_holder
                USING ERRCODE = 'PQ409', DETAIL = format('holder=%s', v_holder);
        END IF;
    END IF;
    DELETE FROM pgqueue.dead_letter WHERE id = p_job_id;
    BEGIN
        INSERT INTO pgqueue.job (id, stream, kind, payload, priority, state, not_before,
            enqueued_at, dedup_key, attempts, max_attempts, last_error, last_completed_step,
            cursor_step, cursor, checkpoint_updated_at, schema_version, step_set_hash,
            crashes_by_step)
        VALUES (d.id, d.stream, d.kind, d.payload, d.priority, 'pending', v_now, d.enqueued_at,
            d.dedup_key, 0, d.max_attempts, d.last_error, d.last_completed_step, d.cursor_step,
            d.cursor, d.checkpoint_updated_at, d.schema_version, d.step_set_hash,
            d.crashes_by_step);
    EXCEPTION WHEN unique_violation THEN
        -- a concurrent enqueue took the key after the check above
        RAISE EXCEPTION 'cannot requeue dead letter %: a live job now holds its dedup key', p_job_id
            USING ERRCODE = 'PQ409';
    END;
    INSERT INTO pgqueue.op_log (stream, op, job_id, body)
    VALUES (d.stream, 'RequeueDeadLetter', d.id, jsonb_build_object(
        'job_id', d.id, 'attempts', 0, 'not_before_ms', pgqueue.to_ms(v_now), 'state', 'pending'));
END
$function$;
-- @@ function pgqueue.require_leader
-- @@ after function pgqueue.requeue_dead_letter

CREATE OR REPLACE FUNCTION pgqueue.require_leader()
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_role text;
    v_leader text;
BEGIN
    -- Shared with every other transition; a demotion takes it exclusively, so it waits for
    -- transitions that already passed this check, and later ones see the new role.
    PERFORM pg_advisory_xact_lock_shared(hashtext('pgqueue.role'));
    SELECT role, leader INTO v_role, v_leader FROM pgqueue.node;
    IF v_role IS DISTINCT FROM 'leader' THEN
        RAISE EXCEPTION 'this database is a replica (its leader: %); queue writes go to the leader',
            coalesce(v_leader, 'unknown') USING ERRCODE = 'PQ401', DETAIL = coalesce(v_leader, '');
    END IF;
END
$function$;
-- @@ function pgqueue.restart
-- @@ after function pgqueue.require_leader

CREATE OR REPLACE FUNCTION pgqueue.restart(p_job_id bigint)
 RETURNS pgqueue.job
 LANGUAGE plpgsql
AS $function$
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
    RETURN pgqueue.save_as_pending(j, 'Restart', true);
END
$function$;
-- @@ function pgqueue.return_leases
-- @@ after function pgqueue.restart

CREATE OR REPLACE FUNCTION pgqueue.return_leases(p_job_ids bigint[], p_lease_ids bigint[])
 RETURNS SETOF bigint
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_now timestamptz := pgqueue.now_ms();
    j pgqueue.job;
    i int;
BEGIN
    PERFORM pgqueue.require_leader();
    FOR i IN 1 .. coalesce(cardinality(p_job_ids), 0) LOOP
        j := pgqueue.leased_job(p_job_ids[i], p_lease_ids[i]);
        CONTINUE WHEN j.id IS NULL;
        j.state := 'pending';
        j.not_before := least(j.not_before, v_now);
        PERFORM pgqueue.save_job(j, 'ReturnLease', p_lease_ids[i]);
        RETURN NEXT j.id;
    END LOOP;
END
$function$;
-- @@ function pgqueue.rewind
-- @@ after function pgqueue.return_leases

CREATE OR REPLACE FUNCTION pgqueue.rewind(p_job_id bigint, p_to_step text)
 RETURNS pgqueue.job
 LANGUAGE plpgsql
AS $function$
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
    RETURN pgqueue.save_as_pending(j, 'Rewind', true);
END
$function$;
-- @@ function pgqueue.save_as_pending
-- @@ after function pgqueue.rewind

CREATE OR REPLACE FUNCTION pgqueue.save_as_pending(j pgqueue.job, p_op text, p_checkpoint_changed boolean, p_extra jsonb DEFAULT '{}'::jsonb)
 RETURNS pgqueue.job
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM pgqueue.check_dedup_free(j);
    IF p_checkpoint_changed THEN
        j.checkpoint_updated_at := pgqueue.now_ms();
    END IF;
    j.state := 'pending';
    j.not_before := pgqueue.now_ms();
    j.state_reason := NULL;
    j.state_detail := NULL;
    PERFORM pgqueue.save_job(j, p_op, NULL, p_extra);
    RETURN j;
END
$function$;
-- @@ function pgqueue.save_job
-- @@ after function pgqueue.save_as_pending

CREATE OR REPLACE FUNCTION pgqueue.save_job(j pgqueue.job, p_op text, p_lease_id bigint, p_extra jsonb DEFAULT '{}'::jsonb)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
BEGIN
    IF j.state <> 'leased' THEN
        j.lease_id := NULL; j.worker_node := NULL; j.worker_instance := NULL;
        j.lease_expires_at := NULL;
    END IF;
    UPDATE pgqueue.job
    SET payload = j.payload, state = j.state, attempts = j.attempts,
        max_attempts = j.max_attempts, not_before = j.not_before, last_error = j.last_error,
        state_reason = j.state_reason, state_detail = j.state_detail, lease_id = j.lease_id,
        worker_node = j.worker_node, worker_instance = j.worker_instance,
        lease_expires_at = j.lease_expires_at, last_completed_step = j.last_completed_step,
        cursor_step = j.cursor_step, cursor = j.cursor,
        checkpoint_updated_at = j.checkpoint_updated_at, schema_version = j.schema_version,
        step_set_hash = j.step_set_hash, crashes_by_step = j.crashes_by_step
    WHERE id = j.id;
    INSERT INTO pgqueue.op_log (stream, op, job_id, lease_id, body)
    VALUES (j.stream, p_op, j.id, p_lease_id, pgqueue.job_state_json(j) || p_extra);
END
$function$;
-- @@ function pgqueue.schedule_json
-- @@ after function pgqueue.save_job

CREATE OR REPLACE FUNCTION pgqueue.schedule_json(c pgqueue.schedule)
 RETURNS jsonb
 LANGUAGE sql
 IMMUTABLE
AS $function$
    SELECT jsonb_build_object(
        'stream', c.stream, 'name', c.name, 'cron', c.cron, 'timezone', c.timezone,
        'payload', pgqueue.b64(c.payload), 'kind', c.kind, 'priority', c.priority,
        'max_attempts', c.max_attempts, 'catch_up', c.catch_up,
        'misfire_grace_ms', c.misfire_grace_ms, 'paused', c.paused,
        'next_run_at_ms', pgqueue.to_ms(c.next_run_at),
        'last_fired_at_ms', pgqueue.to_ms(c.last_fired_at),
        'updated_at_ms', pgqueue.to_ms(c.updated_at))
$function$;
-- @@ function pgqueue.set_role
-- @@ after function pgqueue.schedule_json

CREATE OR REPLACE FUNCTION pgqueue.set_role(p_role text, p_name text DEFAULT NULL::text, p_leader text DEFAULT NULL::text)
 RETURNS pgqueue.node
 LANGUAGE plpgsql
AS $function$
DECLARE
    n pgqueue.node;
BEGIN
    -- Wait for every transition in flight (they hold the role lock shared) before the role
    -- changes, so none commits as a leader's write after a demotion.
    PERFORM pg_advisory_xact_lock(hashtext('pgqueue.role'));
    UPDATE pgqueue.node
    SET epoch = CASE WHEN p_role = 'leader' AND role <> 'leader' THEN epoch + 1 ELSE epoch END,
        role = p_role, name = coalesce(p_name, name),
        leader = CASE WHEN p_role = 'leader' THEN NULL ELSE p_leader END,
        changed_at = now()
    RETURNING * INTO n;
    RETURN n;
END
$function$;
-- @@ function pgqueue.skip_step
-- @@ after function pgqueue.set_role

CREATE OR REPLACE FUNCTION pgqueue.skip_step(p_job_id bigint)
 RETURNS pgqueue.job
 LANGUAGE plpgsql
AS $function$
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
    RETURN pgqueue.save_as_pending(j, 'SkipStep', true,
                                   jsonb_build_object('skipped', v_names[v_next]));
END
$function$;
-- @@ function pgqueue.step_names
-- @@ after function pgqueue.skip_step

CREATE OR REPLACE FUNCTION pgqueue.step_names(p_hash text)
 RETURNS text[]
 LANGUAGE sql
 STABLE
AS $function$
    SELECT array_agg(e ->> 'name' ORDER BY o)
    FROM pgqueue.step_set s, jsonb_array_elements(s.steps) WITH ORDINALITY AS t(e, o)
    WHERE s.hash = p_hash
$function$;
-- @@ function pgqueue.to_ms
-- @@ after function pgqueue.step_names

CREATE OR REPLACE FUNCTION pgqueue.to_ms(ts timestamp with time zone)
 RETURNS bigint
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$ SELECT (extract(epoch FROM ts) * 1000)::bigint $function$;
-- @@ function pgqueue.unb64
-- @@ after function pgqueue.to_ms

CREATE OR REPLACE FUNCTION pgqueue.unb64(t text)
 RETURNS bytea
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$ SELECT decode(t, 'base64') $function$;
-- @@ function pgqueue.upcast
-- @@ after function pgqueue.unb64

CREATE OR REPLACE FUNCTION pgqueue.upcast(p_job_id bigint, p_lease_id bigint, p_payload bytea, p_schema_version integer)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
DECLARE
    j pgqueue.job := pgqueue.leased_job(p_job_id, p_lease_id);
BEGIN
    PERFORM pgqueue.require_leader();
    IF j.id IS NULL THEN
        RETURN false;
    END IF;
    j.payload := p_payload;
    j.schema_version := p_schema_version;
    PERFORM pgqueue.save_job(j, 'Upcast', p_lease_id,
                             jsonb_build_object('payload', pgqueue.b64(p_payload)));
    RETURN true;
END
$function$;
-- @@ function pgqueue.upsert_schedule
-- @@ after function pgqueue.upcast

CREATE OR REPLACE FUNCTION pgqueue.upsert_schedule(p_stream text, p_name text, p_cron text, p_timezone text, p_payload bytea, p_kind text, p_priority integer, p_max_attempts integer, p_catch_up text, p_misfire_grace_ms bigint, p_paused boolean, p_next_run_at timestamp with time zone)
 RETURNS pgqueue.schedule
 LANGUAGE plpgsql
AS $function$
DECLARE
    c pgqueue.schedule;
    v_now timestamptz := pgqueue.now_ms();
BEGIN
    PERFORM pgqueue.require_leader();
    PERFORM pgqueue.check_stream(p_stream);
    INSERT INTO pgqueue.schedule AS s (stream, name, cron, timezone, payload, kind, priority,
        max_attempts, catch_up, misfire_grace_ms, paused, next_run_at, updated_at)
    VALUES (p_stream, p_name, p_cron, p_timezone, p_payload, p_kind, p_priority, p_max_attempts,
        p_catch_up, p_misfire_grace_ms, p_paused, date_trunc('milliseconds', p_next_run_at), v_now)
    ON CONFLICT (stream, name) DO UPDATE SET
        cron = excluded.cron, timezone = excluded.timezone, payload = excluded.payload,
        kind = excluded.kind, priority = excluded.priority, max_attempts = excluded.max_attempts,
        catch_up = excluded.catch_up, misfire_grace_ms = excluded.misfire_grace_ms,
        paused = excluded.paused, next_run_at = excluded.next_run_at, updated_at = v_now
    RETURNING * INTO c;
    INSERT INTO pgqueue.op_log (stream, op, body)
    VALUES (p_stream, 'UpsertSchedule', pgqueue.schedule_json(c));
    RETURN c;
END
$function$;
-- @@ view pgqueue.jobs
-- @@ after function pgqueue.upsert_schedule

CREATE OR REPLACE VIEW pgqueue.jobs AS
 SELECT job.id,
    job.stream,
    job.kind,
    job.state,
    job.payload,
    job.priority,
    job.attempts,
    job.max_attempts,
    job.not_before,
    job.enqueued_at,
    job.dedup_key,
    job.last_error,
    job.state_reason,
    job.state_detail,
    job.lease_id,
    job.worker_node,
    job.worker_instance,
    job.lease_expires_at,
    NULL::timestamp with time zone AS died_at,
    job.last_completed_step,
    job.cursor_step,
    job.cursor,
    job.checkpoint_updated_at,
    job.schema_version,
    job.step_set_hash,
    job.crashes_by_step
   FROM pgqueue.job
UNION ALL
 SELECT dead_letter.id,
    dead_letter.stream,
    dead_letter.kind,
    'dead'::text AS state,
    dead_letter.payload,
    dead_letter.priority,
    dead_letter.attempts,
    dead_letter.max_attempts,
    NULL::timestamp with time zone AS not_before,
    dead_letter.enqueued_at,
    dead_letter.dedup_key,
    dead_letter.last_error,
    NULL::text AS state_reason,
    NULL::jsonb AS state_detail,
    NULL::bigint AS lease_id,
    NULL::integer AS worker_node,
    NULL::integer AS worker_instance,
    NULL::timestamp with time zone AS lease_expires_at,
    dead_letter.died_at,
    dead_letter.last_completed_step,
    dead_letter.cursor_step,
    dead_letter.cursor,
    dead_letter.checkpoint_updated_at,
    dead_letter.schema_version,
    dead_letter.step_set_hash,
    dead_letter.crashes_by_step
   FROM pgqueue.dead_letter;
