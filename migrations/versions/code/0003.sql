-- GENERATED FILE: do not edit. What pgqueue schema revision 0003 changed in the functions and
-- views, object by object, against the code of revision 0002 (frozen by
-- `python -m pgqueue_migrations.new` when revision 0004 was started). Each entry is headed
-- by the object it defines and the one it follows, then its whole text (or `removed`); the
-- code of 0003 is every frozen file up to it applied in order (migrations/frozen.py). Loaded
-- when a database is upgraded to 0003 or downgraded to it; the current definitions live in
-- pgqueue/sql/.

-- @@ function pgqueue.enqueue_body
-- @@ removed
-- @@ view pgqueue.jobs
-- @@ after (start)
-- core.sql: functions
-- Every job pgqueue knows, live or dead, in one shape: what q.job() and operators read.
CREATE OR REPLACE VIEW pgqueue.jobs AS
SELECT id, stream, kind, state, payload, priority, attempts, max_attempts, not_before,
       enqueued_at, dedup_key, last_error, state_reason, state_detail, lease_id, worker_node,
       worker_instance, lease_expires_at, NULL::timestamptz AS died_at, last_completed_step, cursor_step, cursor,
       checkpoint_updated_at, schema_version, step_set_hash, crashes_by_step
FROM pgqueue.job
UNION ALL
SELECT id, stream, kind, 'dead', payload, priority, attempts, max_attempts, NULL, enqueued_at,
       dedup_key, last_error, NULL, NULL, NULL, NULL, NULL, NULL, died_at, last_completed_step,
       cursor_step, cursor, checkpoint_updated_at, schema_version, step_set_hash, crashes_by_step
FROM pgqueue.dead_letter;
-- @@ function pgqueue.to_ms
-- @@ after view pgqueue.jobs

CREATE OR REPLACE FUNCTION pgqueue.to_ms(ts timestamptz) RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT (extract(epoch FROM ts) * 1000)::bigint $$;
-- @@ function pgqueue.from_ms
-- @@ after function pgqueue.to_ms

CREATE OR REPLACE FUNCTION pgqueue.from_ms(ms bigint) RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT 'epoch'::timestamptz + ms * interval '1 millisecond' $$;
-- @@ function pgqueue.now_ms
-- @@ after function pgqueue.from_ms

-- The transaction's time, truncated to ms. Tests may pin it with SET pgqueue.now = '...';
-- nothing in production sets it.
CREATE OR REPLACE FUNCTION pgqueue.now_ms() RETURNS timestamptz
LANGUAGE sql STABLE
AS $$
    SELECT date_trunc('milliseconds',
                      coalesce(nullif(current_setting('pgqueue.now', true), '')::timestamptz, now()))
$$;
-- @@ function pgqueue.b64
-- @@ after function pgqueue.now_ms

CREATE OR REPLACE FUNCTION pgqueue.b64(b bytea) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT translate(encode(b, 'base64'), E'\n', '') $$;
-- @@ function pgqueue.unb64
-- @@ after function pgqueue.b64

CREATE OR REPLACE FUNCTION pgqueue.unb64(t text) RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT decode(t, 'base64') $$;
-- @@ function pgqueue.check_stream
-- @@ after function pgqueue.unb64

CREATE OR REPLACE FUNCTION pgqueue.check_stream(p_stream text) RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF p_stream IS NULL OR length(p_stream) = 0 OR length(p_stream) > 200 THEN
        RAISE EXCEPTION 'stream name must be 1 to 200 characters, got %', quote_nullable(left(p_stream, 40))
            USING ERRCODE = '22023';
    END IF;
END
$$;
-- @@ function pgqueue.checkpoint_json
-- @@ after function pgqueue.check_stream

-- The checkpoint as it travels in ops (cursor in base64).
CREATE OR REPLACE FUNCTION pgqueue.checkpoint_json(j pgqueue.job) RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT jsonb_build_object(
        'last_completed_step', j.last_completed_step,
        'cursor_step', j.cursor_step,
        'cursor', pgqueue.b64(j.cursor),
        'updated_at_ms', pgqueue.to_ms(j.checkpoint_updated_at),
        'schema_version', j.schema_version,
        'step_set_hash', j.step_set_hash,
        'crashes_by_step', j.crashes_by_step)
$$;
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
        'state_reason', j.state_reason,
        'state_detail', j.state_detail,
        'crashes_by_step', j.crashes_by_step,
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
        'state_reason', j.state_reason, 'state_detail', j.state_detail,
        'checkpoint', pgqueue.checkpoint_json(j))
$$;
-- @@ function pgqueue.backoff_ms
-- @@ after function pgqueue.job_state_json

-- Backoff after the n-th failure: about base * 2^n with +-25% jitter, capped.
CREATE OR REPLACE FUNCTION pgqueue.backoff_ms(p_stream text, p_attempts int) RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
    SELECT least(c.cap, (c.base * power(2, least(p_attempts, 40)) * (0.75 + random() * 0.5)))::bigint
    FROM (SELECT coalesce(sc.retry_base_ms, 1000) AS base, coalesce(sc.retry_cap_ms, 3600000) AS cap
          FROM (SELECT 1) one
          LEFT JOIN pgqueue.stream_config sc ON sc.stream = p_stream) c
$$;
-- @@ function pgqueue.bury
-- @@ after function pgqueue.backoff_ms

-- Move a job row to dead_letter (leader and apply share this).
CREATE OR REPLACE FUNCTION pgqueue.bury(p_job_id bigint, p_attempts int, p_error text, p_died_at timestamptz,
                             p_crashes jsonb) RETURNS void
LANGUAGE sql VOLATILE
AS $$
    WITH gone AS (DELETE FROM pgqueue.job WHERE id = p_job_id RETURNING *)
    INSERT INTO pgqueue.dead_letter (id, stream, kind, payload, priority, enqueued_at, dedup_key,
        attempts, max_attempts, last_error, died_at, last_completed_step, cursor_step, cursor,
        checkpoint_updated_at, schema_version, step_set_hash, crashes_by_step)
    SELECT id, stream, kind, payload, priority, enqueued_at, dedup_key,
        p_attempts, max_attempts, p_error, p_died_at, last_completed_step, cursor_step, cursor,
        checkpoint_updated_at, schema_version, step_set_hash, p_crashes
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
$$;
-- @@ function pgqueue.apply_job_state
-- @@ after function pgqueue.save_job

-- The apply side of save_job: set every field the body carries.
CREATE OR REPLACE FUNCTION pgqueue.apply_job_state(p_job_id bigint, b jsonb) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgqueue
AS $$
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
$$;
-- @@ function pgqueue.leased_job
-- @@ after function pgqueue.apply_job_state

-- Load a leased job under lock, fenced by its lease id (NULL when the lease is not current).
CREATE OR REPLACE FUNCTION pgqueue.leased_job(p_job_id bigint, p_lease_id bigint) RETURNS pgqueue.job
LANGUAGE sql VOLATILE
AS $$
    SELECT pgqueue.require_leader();
    SELECT * FROM pgqueue.job
    WHERE id = p_job_id AND lease_id = p_lease_id AND state = 'leased'
    FOR UPDATE
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
$$;
-- @@ function pgqueue.check_dedup_free
-- @@ after function pgqueue.operator_job

-- A parked or rewound job goes back to pending: refuse when a live job holds its dedup key.
CREATE OR REPLACE FUNCTION pgqueue.check_dedup_free(j pgqueue.job) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
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
$$;
-- @@ function pgqueue.save_as_pending
-- @@ after function pgqueue.check_dedup_free

-- An operator's change sends the job back to pending at once: refuse when a live job took
-- its dedup key meanwhile, clear the parking reason, save, and log the op.
CREATE OR REPLACE FUNCTION pgqueue.save_as_pending(j pgqueue.job, p_op text, p_checkpoint_changed boolean,
                                        p_extra jsonb DEFAULT '{}') RETURNS pgqueue.job
LANGUAGE plpgsql VOLATILE
AS $$
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
$$;
-- @@ function pgqueue.op_body
-- @@ after function pgqueue.save_as_pending

-- oplog.sql: functions
-- The whole body of an op: an Enqueue op's columns put back as the keys 0002 stored (job_id,
-- stream, kind, payload, priority, state, enqueued_at_ms, not_before_ms, dedup_key, attempts,
-- max_attempts, schema_version, next_job_id); any other op's body as stored. The state is the
-- one enqueue chose: scheduled when not_before is later than enqueued_at.
CREATE OR REPLACE FUNCTION pgqueue.op_body(o pgqueue.op_log) RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN o.op = 'Enqueue' AND o.payload IS NOT NULL THEN
        o.body || jsonb_build_object(
            'job_id', o.job_id, 'stream', o.stream, 'kind', o.kind,
            'payload', pgqueue.b64(o.payload), 'priority', o.priority,
            'state', CASE WHEN pgqueue.to_ms(o.not_before) > (o.body ->> 'enqueued_at_ms')::bigint
                          THEN 'scheduled' ELSE 'pending' END,
            'not_before_ms', pgqueue.to_ms(o.not_before), 'dedup_key', pgqueue.b64(o.dedup_key),
            'max_attempts', o.max_attempts, 'schema_version', o.schema_version,
            'next_job_id', o.job_id + 1)
    ELSE o.body END
$$;
-- @@ function pgqueue.apply_op
-- @@ after function pgqueue.op_body

-- Apply one op's effect to the state tables. Ops carry resulting values, never increments.
CREATE OR REPLACE FUNCTION pgqueue.apply_op(p_op text, p_job_id bigint, p_lease_id bigint, b jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgqueue
AS $$
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
$$;
-- @@ function pgqueue.ingest_op
-- @@ after function pgqueue.apply_op

-- Ingest one op from another database's log (a whole op_log row): record it and apply it,
-- unless this database already holds that seq (delivering an op twice changes nothing) or its
-- transaction is already in a seeded state. Ops must arrive in the source's commit order; per
-- job that is seq order, because a transition holds the job's row lock when it appends its op.
CREATE OR REPLACE FUNCTION pgqueue.ingest_op(o pgqueue.op_log) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgqueue
AS $$
BEGIN
    INSERT INTO pgqueue.op_log SELECT o.*
    ON CONFLICT (seq) DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF NOT pgqueue.reflected(o.xid) THEN
        PERFORM pgqueue.apply_op(o.op, o.job_id, o.lease_id, pgqueue.op_body(o));
    END IF;
    RETURN true;
END
$$;
-- @@ function pgqueue.ingest_ops
-- @@ after function pgqueue.ingest_op

-- Ingest a batch of ops (a jsonb array of op_log rows, as to_jsonb gives them) in array order.
-- Returns how many were new.
CREATE OR REPLACE FUNCTION pgqueue.ingest_ops(p_ops jsonb) RETURNS int
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgqueue
AS $$
DECLARE
    o pgqueue.op_log;
    v_new int := 0;
BEGIN
    FOR o IN SELECT * FROM jsonb_populate_recordset(NULL::pgqueue.op_log, p_ops) LOOP
        IF pgqueue.ingest_op(o) THEN
            v_new := v_new + 1;
        END IF;
    END LOOP;
    RETURN v_new;
END
$$;
-- @@ function pgqueue.require_leader
-- @@ after function pgqueue.ingest_ops

-- queries -----------------------------------------------------------------------------------

-- replica.sql: functions
-- Queue writes happen on the leader only; a replica names its leader in the refusal.
CREATE OR REPLACE FUNCTION pgqueue.require_leader() RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
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
$$;
-- @@ function pgqueue.set_role
-- @@ after function pgqueue.require_leader

-- Set this database's role. Promotion to leader bumps the epoch.
CREATE OR REPLACE FUNCTION pgqueue.set_role(p_role text, p_name text DEFAULT NULL, p_leader text DEFAULT NULL)
RETURNS pgqueue.node
LANGUAGE plpgsql VOLATILE
AS $$
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
        seed_snapshot = CASE WHEN p_role = 'leader' THEN NULL ELSE seed_snapshot END,
        changed_at = now()
    RETURNING * INTO n;
    RETURN n;
END
$$;
-- @@ function pgqueue.reflected
-- @@ after function pgqueue.set_role

-- True when the op of transaction p_xid is already in a seeded replica's copied state.
CREATE OR REPLACE FUNCTION pgqueue.reflected(p_xid xid8) RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pgqueue
AS $$ SELECT coalesce(pg_visible_in_snapshot(p_xid, n.seed_snapshot), false) FROM pgqueue.node n $$;
-- @@ function pgqueue.seed_rows
-- @@ after function pgqueue.reflected

-- Seed a replica's table from rows of the leader's (jsonb, as to_jsonb gives them). Only the
-- queue-state tables and the op log; rows already present are an error (seed an empty replica).
CREATE OR REPLACE FUNCTION pgqueue.seed_rows(p_table text, p_rows jsonb) RETURNS int
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgqueue
AS $$
DECLARE
    v_n int;
BEGIN
    IF p_table NOT IN ('job', 'dead_letter', 'stream_config', 'kind_config', 'step_set',
                       'schedule', 'op_log') THEN
        RAISE EXCEPTION 'seed_rows: % is not a queue-state table', quote_literal(p_table)
            USING ERRCODE = '22023';
    END IF;
    EXECUTE format('INSERT INTO pgqueue.%I SELECT * FROM jsonb_populate_recordset(NULL::pgqueue.%I, $1)',
                   p_table, p_table) USING p_rows;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
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
SET search_path = pg_catalog, pgqueue
AS $$
BEGIN
    IF current_setting('session_replication_role') <> 'replica' THEN
        RETURN NEW;
    END IF;
    IF EXISTS (SELECT 1 FROM pgqueue.op_log WHERE seq = NEW.seq) THEN
        RETURN NULL;
    END IF;
    IF NOT pgqueue.reflected(NEW.xid) THEN
        PERFORM pgqueue.apply_op(NEW.op, NEW.job_id, NEW.lease_id, pgqueue.op_body(NEW));
    END IF;
    RETURN NEW;
END
$$;
-- @@ function pgqueue.enable_apply_trigger
-- @@ after function pgqueue.op_log_apply_trigger

-- The trigger exists only on replicas (attach creates it, promote drops it), so the leader's
-- hot path never pays for it.
CREATE OR REPLACE FUNCTION pgqueue.enable_apply_trigger() RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    DROP TRIGGER IF EXISTS op_log_apply ON pgqueue.op_log;
    CREATE TRIGGER op_log_apply BEFORE INSERT ON pgqueue.op_log
        FOR EACH ROW EXECUTE FUNCTION pgqueue.op_log_apply_trigger();
    ALTER TABLE pgqueue.op_log ENABLE ALWAYS TRIGGER op_log_apply;
END
$$;
-- @@ function pgqueue.disable_apply_trigger
-- @@ after function pgqueue.enable_apply_trigger

CREATE OR REPLACE FUNCTION pgqueue.disable_apply_trigger() RETURNS void
LANGUAGE sql VOLATILE
AS $$ DROP TRIGGER IF EXISTS op_log_apply ON pgqueue.op_log $$;
-- @@ function pgqueue.replica_status
-- @@ after function pgqueue.disable_apply_trigger

-- Where each registered replica stands, in ops and seconds behind this leader. With p_upto,
-- only the ops up to that seq are examined (an index range, not the whole log): applied_seq is
-- then how far into that prefix the replica is proven to have applied, and the lag figures
-- count only the prefix. pgqueue.prune_op_log uses it for the prefix it may delete.
CREATE OR REPLACE FUNCTION pgqueue.replica_status(p_stale_after interval DEFAULT interval '1 day',
                                       p_wait interval DEFAULT interval '1 second',
                                       p_upto bigint DEFAULT NULL)
RETURNS TABLE (name text, method text, applied_seq bigint, lag_ops bigint, lag_seconds float8,
               active boolean, seen_at timestamptz, stale boolean)
LANGUAGE plpgsql VOLATILE
AS $$
-- A logical replica's slot confirms WAL positions, not ops, and may confirm a position inside a
-- transaction that is still to be sent (a keepalive while the walsender waits for WAL), so an
-- op's insert LSN below the confirmed position does not prove the op applied. Two rules do:
--  * every transaction visible in a snapshot committed before the WAL insert position read
--    after it; once the slot confirms that position, all of them are applied (exact figures;
--    waits up to p_wait for the slot to get there);
--  * an op below the slot's restart_lsn belongs to a transaction that committed before the
--    confirmed position (the slot keeps the start of every later one), so it is applied.
-- Ops neither rule proves count as lag: the figures are exact or an upper bound, never low.
DECLARE
    r pgqueue.replica;
    v_snap pg_snapshot;
    v_wal pg_lsn;
    v_confirmed pg_lsn;
    v_restart pg_lsn;
    v_active boolean;
    v_exact boolean;
    v_deadline timestamptz := clock_timestamp() + p_wait;
BEGIN
    v_snap := pg_current_snapshot();
    v_wal := pg_current_wal_insert_lsn();
    FOR r IN SELECT * FROM pgqueue.replica ORDER BY replica.name LOOP
        name := r.name;
        method := r.method;
        IF r.method = 'logical' THEN
            LOOP
                SELECT s.confirmed_flush_lsn, s.restart_lsn, s.active
                INTO v_confirmed, v_restart, v_active
                FROM pg_replication_slots s WHERE s.slot_name = r.slot_name;
                v_exact := v_confirmed IS NOT NULL AND v_confirmed >= v_wal;
                EXIT WHEN v_exact OR NOT coalesce(v_active, false) OR clock_timestamp() >= v_deadline;
                PERFORM pg_sleep(0.005);
            END LOOP;
            active := coalesce(v_active, false);
            seen_at := CASE WHEN active THEN now() ELSE r.seen_at END;
            SELECT count(*), extract(epoch FROM now() - min(o.at))::float8, min(o.seq) - 1
            INTO lag_ops, lag_seconds, applied_seq
            FROM pgqueue.op_log o
            WHERE o.seq <= coalesce(p_upto, 9223372036854775807)
              AND NOT ((v_exact AND pg_visible_in_snapshot(o.xid, v_snap))
                       OR (v_restart IS NOT NULL AND o.lsn < v_restart));
            IF applied_seq IS NULL THEN
                -- everything examined is applied; when nothing is kept, whatever was pruned was
                SELECT coalesce(p_upto, max(o.seq), (SELECT pruned_through FROM pgqueue.node), 0)
                INTO applied_seq FROM pgqueue.op_log o;
            END IF;
        ELSE
            active := r.seen_at > now() - interval '1 minute';
            seen_at := r.seen_at;
            applied_seq := r.confirmed_seq;
            SELECT count(*), extract(epoch FROM now() - min(o.at))::float8 INTO lag_ops, lag_seconds
            FROM pgqueue.op_log o
            WHERE o.seq > r.confirmed_seq AND o.seq <= coalesce(p_upto, 9223372036854775807);
        END IF;
        lag_seconds := coalesce(lag_seconds, 0);
        stale := NOT active AND seen_at < now() - p_stale_after;
        RETURN NEXT;
    END LOOP;
END
$$;
-- @@ function pgqueue.step_names
-- @@ after function pgqueue.replica_status

-- queries -----------------------------------------------------------------------------------

-- steps.sql: functions
-- The ordered step names of a step set (NULL when unknown).
CREATE OR REPLACE FUNCTION pgqueue.step_names(p_hash text) RETURNS text[]
LANGUAGE sql STABLE
AS $$
    SELECT array_agg(e ->> 'name' ORDER BY o)
    FROM pgqueue.step_set s, jsonb_array_elements(s.steps) WITH ORDINALITY AS t(e, o)
    WHERE s.hash = p_hash
$$;
-- @@ function pgqueue.register_step_set
-- @@ after function pgqueue.step_names

-- Record a step set (once per hash).
CREATE OR REPLACE FUNCTION pgqueue.register_step_set(p_hash text, p_kind text, p_steps jsonb) RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
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
$$;
-- @@ function pgqueue.schedule_json
-- @@ after function pgqueue.register_step_set

-- schedule.sql: functions
CREATE OR REPLACE FUNCTION pgqueue.schedule_json(c pgqueue.schedule) RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT jsonb_build_object(
        'stream', c.stream, 'name', c.name, 'cron', c.cron, 'timezone', c.timezone,
        'payload', pgqueue.b64(c.payload), 'kind', c.kind, 'priority', c.priority,
        'max_attempts', c.max_attempts, 'catch_up', c.catch_up,
        'misfire_grace_ms', c.misfire_grace_ms, 'paused', c.paused,
        'next_run_at_ms', pgqueue.to_ms(c.next_run_at),
        'last_fired_at_ms', pgqueue.to_ms(c.last_fired_at),
        'updated_at_ms', pgqueue.to_ms(c.updated_at))
$$;
-- @@ function pgqueue.upsert_schedule
-- @@ after function pgqueue.schedule_json

-- Create or change a schedule (the caller validated cron and zone and computed next_run_at).
CREATE OR REPLACE FUNCTION pgqueue.upsert_schedule(
    p_stream text, p_name text, p_cron text, p_timezone text, p_payload bytea, p_kind text,
    p_priority int, p_max_attempts int, p_catch_up text, p_misfire_grace_ms bigint,
    p_paused boolean, p_next_run_at timestamptz
) RETURNS pgqueue.schedule
LANGUAGE plpgsql VOLATILE
AS $$
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
$$;
-- @@ function pgqueue.advance_schedule
-- @@ after function pgqueue.upsert_schedule

-- Advance a fired (or skipped) schedule; runs in the same transaction as its ticks' enqueues.
CREATE OR REPLACE FUNCTION pgqueue.advance_schedule(p_stream text, p_name text, p_next_run_at timestamptz,
                                         p_last_fired_at timestamptz, p_fired jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
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
$$;
-- @@ function pgqueue.remove_schedule
-- @@ after function pgqueue.advance_schedule

CREATE OR REPLACE FUNCTION pgqueue.remove_schedule(p_stream text, p_name text) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM pgqueue.require_leader();
    DELETE FROM pgqueue.schedule WHERE stream = p_stream AND name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no schedule % in stream %', p_name, p_stream USING ERRCODE = 'PQ404';
    END IF;
    INSERT INTO pgqueue.op_log (stream, op, body)
    VALUES (p_stream, 'RemoveSchedule', jsonb_build_object('stream', p_stream, 'name', p_name));
END
$$;
-- @@ function pgqueue.enqueue
-- @@ after function pgqueue.remove_schedule

-- queries -----------------------------------------------------------------------------------

-- enqueue.sql: functions
-- Enqueue: returns one id per input, in input order. A job whose dedup_key is held by a live
-- job of the stream is not inserted; its slot returns the holder's id. Each statement of this
-- function takes a fresh snapshot (READ COMMITTED), so a holder committed by a concurrent
-- enqueuer is found by the lookup that follows the conflict, in the same round trip.
CREATE OR REPLACE FUNCTION pgqueue.enqueue(
    p_stream text,
    p_payloads bytea[],
    p_kinds text[],
    p_priorities int[],
    p_delays_ms bigint[],
    p_not_befores timestamptz[],
    p_dedup_keys bytea[],
    p_max_attempts int[],
    p_schema_versions int[]
) RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE
AS $$
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
       OR coalesce(cardinality(p_schema_versions), v_n) <> v_n THEN
        RAISE EXCEPTION 'enqueue: all arrays must have % elements', v_n USING ERRCODE = '22023';
    END IF;
    IF v_n = 0 THEN
        RETURN;
    END IF;
    IF coalesce(cardinality(array_remove(p_dedup_keys, NULL)), 0) = 0 THEN
        -- No dedup keys (the common batch): no conflicts to arbitrate, so a plain INSERT in
        -- input order and the ids as drawn.
        v_ids := ARRAY(SELECT nextval('pgqueue.job_id_seq') FROM generate_series(1, v_n));
        WITH ins AS (
            INSERT INTO pgqueue.job (id, stream, kind, payload, priority, state, not_before,
                                     enqueued_at, attempts, max_attempts, schema_version)
            SELECT v_ids[t.ord], p_stream, t.kind, t.payload, t.priority::smallint,
                   CASE WHEN t.at > v_now THEN 'scheduled' ELSE 'pending' END,
                   t.at, v_now, 0, t.max_attempts, t.schema_version
            FROM (SELECT u.*, greatest(v_now, date_trunc('milliseconds', coalesce(
                             u.not_before, v_now + coalesce(u.delay_ms, 0) * interval '1 millisecond'))) AS at
                  FROM unnest(p_payloads, p_kinds, p_priorities, p_delays_ms, p_not_befores,
                              p_max_attempts, p_schema_versions) WITH ORDINALITY
                       AS u(payload, kind, priority, delay_ms, not_before, max_attempts,
                            schema_version, ord)) t
            ORDER BY t.ord
            RETURNING id, stream, kind, payload, priority, state, not_before, dedup_key,
                      max_attempts, schema_version  -- what the op needs, not the whole row
        ), logged AS (
            INSERT INTO pgqueue.op_log (stream, op, job_id, body, kind, payload, priority,
                                        not_before, dedup_key, max_attempts, schema_version)
            SELECT ins.stream, 'Enqueue', ins.id, v_body, ins.kind, ins.payload, ins.priority,
                   ins.not_before, ins.dedup_key, ins.max_attempts, ins.schema_version
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
            INSERT INTO pgqueue.op_log (stream, op, job_id, body, kind, payload, priority,
                                        not_before, dedup_key, max_attempts, schema_version)
            SELECT ins.stream, 'Enqueue', ins.id, v_body, ins.kind, ins.payload, ins.priority,
                   ins.not_before, ins.dedup_key, ins.max_attempts, ins.schema_version
            FROM ins ORDER BY ins.id
            RETURNING job_id, not_before <= v_now AS ready
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
$$;
-- @@ function pgqueue.enqueue_one
-- @@ after function pgqueue.enqueue

-- Enqueue one job: the same semantics as pgqueue.enqueue for a batch of one, without the
-- arrays (one job per call is bounded by its round trip and commit; this keeps the function's
-- own share small).
CREATE OR REPLACE FUNCTION pgqueue.enqueue_one(
    p_stream text, p_payload bytea, p_kind text, p_priority int, p_delay_ms bigint,
    p_not_before timestamptz, p_dedup_key bytea, p_max_attempts int, p_schema_version int
) RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
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
            INSERT INTO pgqueue.op_log (stream, op, job_id, body, kind, payload, priority,
                                        not_before, dedup_key, max_attempts, schema_version)
            VALUES (j.stream, 'Enqueue', j.id,
                    jsonb_build_object('enqueued_at_ms', pgqueue.to_ms(v_now), 'attempts', 0),
                    j.kind, j.payload, j.priority, j.not_before, j.dedup_key, j.max_attempts,
                    j.schema_version);
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
-- @@ function pgqueue.promote_due
-- @@ after function pgqueue.enqueue_one

-- queries -----------------------------------------------------------------------------------

-- lease.sql: functions
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
-- @@ function pgqueue.lease
-- @@ after function pgqueue.promote_due

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
-- @@ function pgqueue.renew
-- @@ after function pgqueue.lease

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
-- @@ function pgqueue.ack
-- @@ after function pgqueue.renew

-- queries -----------------------------------------------------------------------------------

-- settle.sql: functions
-- Ack: the job is done and deleted; its history stays in op_log. Returns the ids acked.
CREATE OR REPLACE FUNCTION pgqueue.ack(p_job_ids bigint[], p_lease_ids bigint[]) RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM pgqueue.require_leader();
    RETURN QUERY
    -- Rows are locked in id order first, so two statements over overlapping jobs (a batched
    -- ack and a renewal round of the same worker) wait for each other instead of deadlocking.
    WITH locked AS MATERIALIZED (
        SELECT j.id FROM pgqueue.job j
        JOIN unnest(p_job_ids, p_lease_ids) AS t(job_id, lease_id)
          ON j.id = t.job_id AND j.lease_id = t.lease_id
        WHERE j.state = 'leased'
        ORDER BY j.id
        FOR UPDATE OF j
    ), gone AS (
        DELETE FROM pgqueue.job j USING locked l WHERE j.id = l.id
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
-- pending (or scheduled) after p_retry_in_ms, or the stream's backoff when NULL.
-- Returns one row (dead?) or none when the lease is no longer current.
CREATE OR REPLACE FUNCTION pgqueue.nack(p_job_id bigint, p_lease_id bigint, p_error text, p_retry_in_ms bigint,
                             p_max_attempts int DEFAULT NULL)
RETURNS TABLE (dead boolean)
LANGUAGE plpgsql VOLATILE
AS $$
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
$$;
-- @@ function pgqueue.return_leases
-- @@ after function pgqueue.nack

-- Worker: give leases back without costing an attempt (graceful shutdown). Checkpoint kept.
CREATE OR REPLACE FUNCTION pgqueue.return_leases(p_job_ids bigint[], p_lease_ids bigint[]) RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE
AS $$
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
$$;
-- @@ function pgqueue.mark_undecodable
-- @@ after function pgqueue.return_leases

-- Worker: this code cannot run the job (unknown_kind, payload_version, step_set_changed).
-- Costs no attempt. Returns false when the lease is not current.
CREATE OR REPLACE FUNCTION pgqueue.mark_undecodable(p_job_id bigint, p_lease_id bigint, p_reason text,
                                         p_detail jsonb) RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
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
$$;
-- @@ function pgqueue.upcast
-- @@ after function pgqueue.mark_undecodable

-- Worker: store an upcast payload and its new schema version as the job resumes.
CREATE OR REPLACE FUNCTION pgqueue.upcast(p_job_id bigint, p_lease_id bigint, p_payload bytea,
                               p_schema_version int) RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
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
$$;
-- @@ function pgqueue.reclaim_expired
-- @@ after function pgqueue.upcast

-- queries -----------------------------------------------------------------------------------

-- reclaim.sql: functions
-- Reclaim expired leases of every stream, up to p_limit per call. Each counts one failure and
-- one crash against the step in progress (key '' when none). Quarantine wins over dead when
-- both limits are reached at once. The expiry is re-checked under the row lock, so a renewal
-- that commits first wins. Returns the number reclaimed.
CREATE OR REPLACE FUNCTION pgqueue.reclaim_expired(p_limit int DEFAULT 1000) RETURNS int
LANGUAGE plpgsql VOLATILE
AS $$
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
$$;
-- @@ function pgqueue.requeue_dead_letter
-- @@ after function pgqueue.reclaim_expired

-- queries -----------------------------------------------------------------------------------

-- deadletter.sql: functions
-- Return a dead letter to pending with attempts reset (checkpoint kept, so steps resume).
-- Raises PQ404 when the id is not a dead letter, PQ409 when a live job holds its dedup key.
CREATE OR REPLACE FUNCTION pgqueue.requeue_dead_letter(p_job_id bigint) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
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
$$;
-- @@ function pgqueue.release
-- @@ after function pgqueue.requeue_dead_letter

-- queries -----------------------------------------------------------------------------------

-- operate.sql: functions
-- Operator: a quarantined or undecodable job runs again (optionally forgetting its crashes).
CREATE OR REPLACE FUNCTION pgqueue.release(p_job_id bigint, p_reset_crashes boolean DEFAULT false)
RETURNS pgqueue.job
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    j pgqueue.job := pgqueue.operator_job(p_job_id, 'release', ARRAY['quarantined', 'undecodable']);
BEGIN
    PERFORM pgqueue.require_leader();
    IF p_reset_crashes THEN
        j.crashes_by_step := '{}';
    END IF;
    RETURN pgqueue.save_as_pending(j, 'Release', false);
END
$$;
-- @@ function pgqueue.rewind
-- @@ after function pgqueue.release

-- Operator: the job's next run starts at step p_to_step (completed steps after it run again).
CREATE OR REPLACE FUNCTION pgqueue.rewind(p_job_id bigint, p_to_step text) RETURNS pgqueue.job
LANGUAGE plpgsql VOLATILE
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
    RETURN pgqueue.save_as_pending(j, 'Rewind', true);
END
$$;
-- @@ function pgqueue.restart
-- @@ after function pgqueue.rewind

-- Operator: drop the checkpoint and run the job from step one (only when asked).
CREATE OR REPLACE FUNCTION pgqueue.restart(p_job_id bigint) RETURNS pgqueue.job
LANGUAGE plpgsql VOLATILE
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
    RETURN pgqueue.save_as_pending(j, 'Restart', true);
END
$$;
-- @@ function pgqueue.skip_step
-- @@ after function pgqueue.restart

-- Operator: count the step in progress as completed without running it, and go on.
CREATE OR REPLACE FUNCTION pgqueue.skip_step(p_job_id bigint) RETURNS pgqueue.job
LANGUAGE plpgsql VOLATILE
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
    RETURN pgqueue.save_as_pending(j, 'SkipStep', true,
                                   jsonb_build_object('skipped', v_names[v_next]));
END
$$;
-- @@ function pgqueue.accept_step_set
-- @@ after function pgqueue.skip_step

-- Operator: accept the new step list of a job parked as step_set_changed; it resumes after
-- its last completed step, matched by name in the new list.
CREATE OR REPLACE FUNCTION pgqueue.accept_step_set(p_job_id bigint) RETURNS pgqueue.job
LANGUAGE plpgsql VOLATILE
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
    RETURN pgqueue.save_as_pending(j, 'AcceptStepSet', false);
END
$$;
-- @@ function pgqueue.cancel
-- @@ after function pgqueue.accept_step_set

-- Operator: remove a job that is not leased (live or dead) for good.
CREATE OR REPLACE FUNCTION pgqueue.cancel(p_job_id bigint) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
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
$$;
-- @@ function pgqueue.configure_stream
-- @@ after function pgqueue.cancel

-- Per-stream settings, logged like any other state change.
CREATE OR REPLACE FUNCTION pgqueue.configure_stream(
    p_stream text, p_retry_base_ms bigint DEFAULT NULL, p_retry_cap_ms bigint DEFAULT NULL,
    p_quarantine_after int DEFAULT NULL
) RETURNS pgqueue.stream_config
LANGUAGE plpgsql VOLATILE
AS $$
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
$$;
-- @@ function pgqueue.configure_kind
-- @@ after function pgqueue.configure_stream

-- Set (or with NULL, remove) a kind's quarantine threshold in a stream; logs only changes.
CREATE OR REPLACE FUNCTION pgqueue.configure_kind(p_stream text, p_kind text, p_quarantine_after int)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
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
$$;
-- @@ function pgqueue.prune_op_log
-- @@ after function pgqueue.configure_kind

-- queries -----------------------------------------------------------------------------------

-- maintain.sql: functions
-- Delete the oldest ops: the prefix of the log, in seq order, whose ops are older than p_keep,
-- were written by a transaction that has finished, and are applied by every replica that is
-- not stale (replica_status's rules, which for a logical replica wait up to p_wait to be
-- exact); at most p_limit. Only that prefix and the op after it are read: a maintenance pass
-- with nothing old to prune costs one index probe (0002 scanned the whole log on every pass:
-- 47 ms at 450,000 ops, every second, growing with the week of ops it keeps). An old op
-- behind a younger one (a long transaction's) waits until that one is old too, so every op up
-- to pruned_through is gone (but for an op of a transaction that was still open when it was
-- pruned past, which takes a transaction older than p_keep; 0002 had the same gap).
CREATE OR REPLACE FUNCTION pgqueue.prune_op_log(p_keep interval,
                                                p_stale_after interval DEFAULT interval '1 day',
                                                p_limit int DEFAULT 10000,
                                                p_wait interval DEFAULT interval '1 second')
RETURNS int
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_cutoff timestamptz := now() - p_keep;
    v_xmin xid8 := pg_snapshot_xmin(pg_current_snapshot());
    v_last bigint;
    v_applied bigint;
    v_n int;
BEGIN
    IF p_limit IS NULL OR p_limit < 1 THEN
        RAISE EXCEPTION 'prune_op_log: limit must be >= 1, got %', p_limit USING ERRCODE = '22023';
    END IF;
    PERFORM 1 FROM (SELECT o.at, o.xid FROM pgqueue.op_log o ORDER BY o.seq LIMIT 1) f
    WHERE f.at < v_cutoff AND f.xid < v_xmin;
    IF NOT FOUND THEN
        RETURN 0;  -- the oldest op is young (or unfinished): nothing to prune
    END IF;
    SELECT max(p.seq) INTO v_last
    FROM (SELECT o.seq, bool_and(o.at < v_cutoff AND o.xid < v_xmin) OVER (ORDER BY o.seq) AS old
          FROM (SELECT seq, at, xid FROM pgqueue.op_log ORDER BY seq LIMIT p_limit) o) p
    WHERE p.old;
    IF v_last IS NULL THEN
        -- another prune took the old ops between the two reads (each statement has its own
        -- snapshot): nothing left to do, and a NULL here must never reach the DELETE's bound
        RETURN 0;
    END IF;
    SELECT min(s.applied_seq) INTO v_applied
    FROM pgqueue.replica_status(p_stale_after, p_wait, v_last) s WHERE NOT s.stale;
    v_last := least(v_last, v_applied);  -- least ignores NULL: no replica, no bound
    DELETE FROM pgqueue.op_log o WHERE o.seq <= v_last;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    IF v_n > 0 THEN
        UPDATE pgqueue.node SET pruned_through = greatest(pruned_through, v_last);
    END IF;
    RETURN v_n;
END
$$;
-- @@ (comments)
-- @@ after function pgqueue.prune_op_log

-- queries -----------------------------------------------------------------------------------
