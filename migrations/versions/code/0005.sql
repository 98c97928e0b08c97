-- GENERATED FILE: do not edit. What pgqueue schema revision 0005 changed in the functions and
-- views, object by object, against the code of revision 0003 (frozen by
-- `python -m pgqueue_migrations.new` when revision 0006 was started). Each entry is headed
-- by the object it defines and the one it follows, then its whole text (or `removed`); the
-- code of 0005 is every frozen file up to it applied in order (migrations/frozen.py). Loaded
-- when a database is upgraded to 0005 or downgraded to it; the current definitions live in
-- pgqueue/sql/.

-- @@ view pgqueue.jobs
-- @@ after (start)
-- core.sql: functions
-- Every job pgqueue knows, live or dead, in one shape: what q.job() and operators read.
CREATE OR REPLACE VIEW pgqueue.jobs AS
SELECT id, stream, kind, state, payload, priority, attempts, max_attempts, not_before,
       enqueued_at, dedup_key, last_error, state_reason, state_detail, lease_id, worker_node,
       worker_instance, lease_expires_at, NULL::timestamptz AS died_at, last_completed_step, cursor_step, cursor,
       checkpoint_updated_at, schema_version, step_set_hash, crashes_by_step, concurrency_key,
       cancel_requested_at
FROM pgqueue.job
UNION ALL
SELECT id, stream, kind, 'dead', payload, priority, attempts, max_attempts, NULL, enqueued_at,
       dedup_key, last_error, NULL, NULL, NULL, NULL, NULL, NULL, died_at, last_completed_step,
       cursor_step, cursor, checkpoint_updated_at, schema_version, step_set_hash, crashes_by_step,
       concurrency_key, NULL
FROM pgqueue.dead_letter;
-- @@ function pgqueue.require_leader
-- @@ after function pgqueue.check_stream

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
        'unstarted_reclaims', j.unstarted_reclaims,
        'at_ms', pgqueue.to_ms(p_at))
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
        checkpoint_updated_at, schema_version, step_set_hash, crashes_by_step, max_attempts_given,
        concurrency_key)
    SELECT id, stream, kind, payload, priority, enqueued_at, dedup_key,
        p_attempts, max_attempts, p_error, p_died_at, last_completed_step, cursor_step, cursor,
        checkpoint_updated_at, schema_version, step_set_hash, p_crashes, max_attempts_given,
        concurrency_key
    FROM gone
$$;
-- @@ function pgqueue.finish_cancel
-- @@ after function pgqueue.apply_job_state

-- A leased job whose cancel was requested (pgqueue.cancel) ends as cancelled: deleted, its op
-- Cancel (was leased, by whom, and the error when a failure ended it). Every end of such a
-- lease but an ack comes here (the handler stopping, a nack, a reclaim, a give-back,
-- parking), so a cancelled job never runs again.
CREATE OR REPLACE FUNCTION pgqueue.finish_cancel(j pgqueue.job, p_by text, p_error text DEFAULT NULL)
RETURNS void
LANGUAGE sql VOLATILE
AS $$
    DELETE FROM pgqueue.job WHERE id = j.id;
    INSERT INTO pgqueue.op_log (stream, op, job_id, lease_id, body)
    VALUES (j.stream, 'Cancel', j.id, j.lease_id, jsonb_strip_nulls(jsonb_build_object(
        'job_id', j.id, 'was', 'leased', 'by', p_by,
        'requested_at_ms', pgqueue.to_ms(j.cancel_requested_at), 'error', p_error)));
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
-- @@ function pgqueue.dedup_holder
-- @@ after function pgqueue.operator_job

-- The live job (pending, scheduled or leased) that holds a dedup key in a stream, other than
-- p_id; NULL when none is visible to the statement that asks.
CREATE OR REPLACE FUNCTION pgqueue.dedup_holder(p_stream text, p_key bytea, p_id bigint) RETURNS bigint
LANGUAGE sql STABLE
AS $$
    SELECT id FROM pgqueue.job
    WHERE stream = p_stream AND dedup_key = p_key AND id <> p_id
      AND state IN ('pending', 'scheduled', 'leased')
    LIMIT 1
$$;
-- @@ function pgqueue.refuse_dedup
-- @@ after function pgqueue.dedup_holder

-- Refuse an operator's move to pending because a live job holds the key: PQ409, with the
-- holder in DETAIL (holder=ID) when it is known, which queries.translate turns into
-- DedupConflict.holder. p_doing completes "cannot ...".
CREATE OR REPLACE FUNCTION pgqueue.refuse_dedup(p_doing text, p_holder bigint) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF p_holder IS NULL THEN
        RAISE EXCEPTION 'cannot %: a live job holds its dedup key', p_doing
            USING ERRCODE = 'PQ409';
    END IF;
    RAISE EXCEPTION 'cannot %: live job % holds its dedup key', p_doing, p_holder
        USING ERRCODE = 'PQ409', DETAIL = format('holder=%s', p_holder);
END
$$;
-- @@ function pgqueue.check_dedup_free
-- @@ after function pgqueue.refuse_dedup

-- A parked or rewound job goes back to pending: refuse when a live job holds its dedup key.
-- This sees committed holders only; save_as_pending catches the one an open transaction adds.
CREATE OR REPLACE FUNCTION pgqueue.check_dedup_free(j pgqueue.job) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_holder bigint;
BEGIN
    IF j.dedup_key IS NULL OR j.state IN ('pending', 'scheduled', 'leased') THEN
        RETURN;
    END IF;
    v_holder := pgqueue.dedup_holder(j.stream, j.dedup_key, j.id);
    IF v_holder IS NOT NULL THEN
        PERFORM pgqueue.refuse_dedup(format('return job %s to pending', j.id), v_holder);
    END IF;
END
$$;
-- @@ function pgqueue.save_as_pending
-- @@ after function pgqueue.check_dedup_free

-- An operator's change sends the job back to pending at once: refuse when a live job took
-- its dedup key meanwhile, clear the parking reason, save, and log the op. A holder enqueued
-- by a transaction still open at the check makes the UPDATE wait for it; when that commits,
-- the dedup index refuses the UPDATE, and that is reported like a committed holder (PQ409
-- naming it), never as a raw unique violation.
CREATE OR REPLACE FUNCTION pgqueue.save_as_pending(j pgqueue.job, p_op text, p_checkpoint_changed boolean,
                                        p_extra jsonb DEFAULT '{}') RETURNS pgqueue.job
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_index text;
BEGIN
    PERFORM pgqueue.check_dedup_free(j);
    IF p_checkpoint_changed THEN
        j.checkpoint_updated_at := pgqueue.now_ms();
    END IF;
    j.state := 'pending';
    j.not_before := pgqueue.now_ms();
    j.state_reason := NULL;
    j.state_detail := NULL;
    BEGIN
        PERFORM pgqueue.save_job(j, p_op, NULL, p_extra);
    EXCEPTION WHEN unique_violation THEN
        GET STACKED DIAGNOSTICS v_index = CONSTRAINT_NAME;
        IF v_index IS DISTINCT FROM 'job_dedup_idx' THEN
            RAISE;
        END IF;
        -- a new statement, a new snapshot: the holder that just committed is visible
        PERFORM pgqueue.refuse_dedup(format('return job %s to pending', j.id),
                                     pgqueue.dedup_holder(j.stream, j.dedup_key, j.id));
    END;
    RETURN j;
END
$$;
-- @@ function pgqueue.count_jobs
-- @@ after function pgqueue.save_as_pending

-- observe.sql: functions
-- The statement triggers behind job_count_delta: the rows a statement removed count -1 in
-- their (stream, state), the rows it wrote +1, nothing is written for no net change (a
-- renewal). They run on every path that writes jobs, replicas' apply included (ENABLE ALWAYS).
CREATE OR REPLACE FUNCTION pgqueue.count_jobs() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO pgqueue.job_count_delta (stream, state, delta)
        SELECT stream, state, count(*) FROM new_rows GROUP BY stream, state;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO pgqueue.job_count_delta (stream, state, delta)
        SELECT stream, state, -count(*) FROM old_rows GROUP BY stream, state;
    ELSE
        INSERT INTO pgqueue.job_count_delta (stream, state, delta)
        SELECT stream, state, sum(d) FROM (
            SELECT stream, state, 1 AS d FROM new_rows
            UNION ALL SELECT stream, state, -1 FROM old_rows) c
        GROUP BY stream, state HAVING sum(d) <> 0;
    END IF;
    RETURN NULL;
END
$$;
-- @@ function pgqueue.count_dead_letters
-- @@ after function pgqueue.count_jobs

CREATE OR REPLACE FUNCTION pgqueue.count_dead_letters() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO pgqueue.job_count_delta (stream, state, delta)
        SELECT stream, 'dead', count(*) FROM new_rows GROUP BY stream;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO pgqueue.job_count_delta (stream, state, delta)
        SELECT stream, 'dead', -count(*) FROM old_rows GROUP BY stream;
    END IF;
    RETURN NULL;
END
$$;
-- @@ trigger job_count_insert
-- @@ after function pgqueue.count_dead_letters

CREATE OR REPLACE TRIGGER job_count_insert AFTER INSERT ON pgqueue.job
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION pgqueue.count_jobs();
-- @@ trigger job_count_update
-- @@ after trigger job_count_insert
CREATE OR REPLACE TRIGGER job_count_update AFTER UPDATE ON pgqueue.job
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgqueue.count_jobs();
-- @@ trigger job_count_delete
-- @@ after trigger job_count_update
CREATE OR REPLACE TRIGGER job_count_delete AFTER DELETE ON pgqueue.job
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION pgqueue.count_jobs();
-- @@ trigger dead_letter_count_insert
-- @@ after trigger job_count_delete
CREATE OR REPLACE TRIGGER dead_letter_count_insert AFTER INSERT ON pgqueue.dead_letter
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
    EXECUTE FUNCTION pgqueue.count_dead_letters();
-- @@ trigger dead_letter_count_delete
-- @@ after trigger dead_letter_count_insert
CREATE OR REPLACE TRIGGER dead_letter_count_delete AFTER DELETE ON pgqueue.dead_letter
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT
    EXECUTE FUNCTION pgqueue.count_dead_letters();
-- @@ enable trigger job_count_insert
-- @@ after trigger dead_letter_count_delete
ALTER TABLE pgqueue.job ENABLE ALWAYS TRIGGER job_count_insert;
-- @@ enable trigger job_count_update
-- @@ after enable trigger job_count_insert
ALTER TABLE pgqueue.job ENABLE ALWAYS TRIGGER job_count_update;
-- @@ enable trigger job_count_delete
-- @@ after enable trigger job_count_update
ALTER TABLE pgqueue.job ENABLE ALWAYS TRIGGER job_count_delete;
-- @@ enable trigger dead_letter_count_insert
-- @@ after enable trigger job_count_delete
ALTER TABLE pgqueue.dead_letter ENABLE ALWAYS TRIGGER dead_letter_count_insert;
-- @@ enable trigger dead_letter_count_delete
-- @@ after enable trigger dead_letter_count_insert
ALTER TABLE pgqueue.dead_letter ENABLE ALWAYS TRIGGER dead_letter_count_delete;
-- @@ function pgqueue.fold_job_counts
-- @@ after enable trigger dead_letter_count_delete

-- Add the deltas written so far into job_count (concurrent folds each take other rows).
-- Returns how many delta rows it folded.
CREATE OR REPLACE FUNCTION pgqueue.fold_job_counts() RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
    WITH d AS (DELETE FROM pgqueue.job_count_delta RETURNING stream, state, delta),
    folded AS (
        INSERT INTO pgqueue.job_count AS c (stream, state, n)
        SELECT stream, state, sum(delta) FROM d GROUP BY stream, state
        ORDER BY stream, state  -- one lock order: concurrent folds never deadlock
        ON CONFLICT (stream, state) DO UPDATE SET n = c.n + EXCLUDED.n
        RETURNING 1)
    SELECT count(*) FROM d
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
        -- max_attempts is null in an op of a job whose producer did not set it (0005 on)
        INSERT INTO pgqueue.job (id, stream, kind, payload, priority, state, not_before,
                                 enqueued_at, dedup_key, attempts, max_attempts, schema_version,
                                 max_attempts_given, trace_context, concurrency_key)
        VALUES (p_job_id, b ->> 'stream', b ->> 'kind', pgqueue.unb64(b ->> 'payload'),
                (b ->> 'priority')::smallint, b ->> 'state',
                pgqueue.from_ms((b ->> 'not_before_ms')::bigint),
                pgqueue.from_ms((b ->> 'enqueued_at_ms')::bigint),
                pgqueue.unb64(b ->> 'dedup_key'), (b ->> 'attempts')::int,
                coalesce((b ->> 'max_attempts')::int, 25), (b ->> 'schema_version')::int,
                (b ->> 'max_attempts') IS NOT NULL, b -> 'trace', b ->> 'concurrency_key')
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
                                 pgqueue.from_ms((b ->> 'at_ms')::bigint), b -> 'crashes_by_step');
        ELSE
            UPDATE pgqueue.job
            SET state = b ->> 'state', attempts = (b ->> 'attempts')::int,
                max_attempts = (b ->> 'max_attempts')::int,
                last_error = b ->> 'last_error', state_reason = b ->> 'state_reason',
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
            max_attempts_given, concurrency_key)
        SELECT d.id, d.stream, d.kind, d.payload, d.priority, b ->> 'state',
            pgqueue.from_ms((b ->> 'not_before_ms')::bigint), d.enqueued_at, d.dedup_key,
            (b ->> 'attempts')::int, d.max_attempts, d.last_error, d.last_completed_step,
            d.cursor_step, d.cursor, d.checkpoint_updated_at, d.schema_version, d.step_set_hash,
            d.crashes_by_step, d.max_attempts_given, d.concurrency_key
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
-- @@ function pgqueue.request_begin
-- @@ after function pgqueue.ingest_ops

-- The start of a call that carries a request token (enqueue, enqueue_one, lease). Every such
-- call first takes the token's transaction lock, so a call re-sent after its reply was lost
-- waits here until its first attempt has ended; a re-sent one then gets the seq and
-- transaction of the op its first attempt committed (NULLs when none did: it runs as a first
-- attempt). The unique index on op_log.request stays the backstop: a first attempt that
-- reaches the server only after its re-send committed fails there instead of applying twice.
CREATE OR REPLACE FUNCTION pgqueue.request_begin(p_request uuid, p_resent boolean,
                                                 OUT seq bigint, OUT xid xid8)
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('pgqueue.request'), hashtext(p_request::text));
    IF p_resent THEN
        SELECT o.seq, o.xid INTO seq, xid FROM pgqueue.op_log o WHERE o.request = p_request;
    END IF;
END
$$;
-- @@ function pgqueue.op_log_batch
-- @@ after function pgqueue.request_begin

-- The next ops after p_after as op_log rows in jsonb, in seq order: at most p_limit, and no
-- more once about 64 MiB of payloads and bodies are in (always at least one), so that a batch
-- of large jobs never outgrows one jsonb value (1 GB) on its way to ingest_ops. With
-- p_committed_only, only ops whose transaction finished before this snapshot began (the
-- follow reader: no later commit can appear below them). A short batch is not the end of the
-- log; an empty one is.
CREATE OR REPLACE FUNCTION pgqueue.op_log_batch(p_after bigint, p_limit int,
                                                p_committed_only boolean)
RETURNS TABLE (seq bigint, op jsonb)
LANGUAGE sql STABLE
AS $$
    WITH sized AS (
        SELECT o.seq, coalesce(octet_length(o.payload), 0) + octet_length(o.body::text) AS size
        FROM pgqueue.op_log o
        WHERE o.seq > p_after
          AND (NOT p_committed_only
               -- ops from before this database's promotion: committed, another leader's xid
               OR o.seq <= (SELECT n.promoted_through FROM pgqueue.node n)
               OR o.xid < pg_snapshot_xmin(pg_current_snapshot()))
        ORDER BY o.seq
        LIMIT p_limit
    ), kept AS (
        SELECT w.seq FROM (
            SELECT sized.seq, coalesce(sum(sized.size) OVER (
                       ORDER BY sized.seq ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)
                   AS before
            FROM sized) w
        WHERE w.before <= 67108864
    )
    SELECT o.seq, to_jsonb(o) FROM pgqueue.op_log o JOIN kept k ON k.seq = o.seq ORDER BY o.seq
$$;
-- @@ function pgqueue.set_role
-- @@ after function pgqueue.op_log_batch

-- queries -----------------------------------------------------------------------------------

-- replica.sql: functions
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
        promoted_through = CASE WHEN p_role = 'leader' AND role <> 'leader'
                                THEN greatest(promoted_through,
                                              (SELECT coalesce(max(o.seq), 0) FROM pgqueue.op_log o))
                                ELSE promoted_through END,
        changed_at = now()
    RETURNING * INTO n;
    RETURN n;
END
$$;
-- @@ function pgqueue.replica_status
-- @@ after function pgqueue.disable_apply_trigger

-- Where each registered replica stands, in ops and seconds behind this leader. With p_upto,
-- only the ops up to that seq are examined (an index range, not the whole log): applied_seq is
-- then how far into that prefix the replica is proven to have applied, and the lag figures
-- count only the prefix. pgqueue.prune_op_log uses it for the prefix it may delete.
-- seen_at is when the leader last saw the replica alive: a logical replica whenever its slot
-- is active (here or in pgqueue.touch_replicas, every maintenance pass) or has confirmed a
-- position past an op, a follower when it confirms; status stores what it saw (outside a
-- read-only transaction). stale: not active and not seen for p_stale_after, by
-- pgqueue.now_ms() (which tests pin).
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
    v_promoted bigint := (SELECT n.promoted_through FROM pgqueue.node n);
    r pgqueue.replica;
    v_snap pg_snapshot;
    v_wal pg_lsn;
    v_confirmed pg_lsn;
    v_restart pg_lsn;
    v_active boolean;
    v_exact boolean;
    v_deadline timestamptz := clock_timestamp() + p_wait;
    v_now timestamptz := pgqueue.now_ms();
    v_writable boolean := NOT current_setting('transaction_read_only')::boolean;
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
            seen_at := CASE WHEN active THEN greatest(r.seen_at, v_now) ELSE r.seen_at END;
            IF NOT active AND v_confirmed IS NOT NULL THEN
                -- the slot is idle now, but the replica confirmed a WAL position at or past
                -- this op, so it was alive after the op's transaction began
                seen_at := greatest(seen_at, (SELECT o.at FROM pgqueue.op_log o
                                              WHERE o.lsn <= v_confirmed
                                              ORDER BY o.seq DESC LIMIT 1));
            END IF;
            SELECT count(*), extract(epoch FROM now() - min(o.at))::float8, min(o.seq) - 1
            INTO lag_ops, lag_seconds, applied_seq
            FROM pgqueue.op_log o
            WHERE o.seq <= coalesce(p_upto, 9223372036854775807)
              -- ops from before a promotion carry another leader's xid and lsn: proved only
              -- by the exact snapshot (they committed), never by this database's slot
              AND NOT ((v_exact AND (o.seq <= v_promoted OR pg_visible_in_snapshot(o.xid, v_snap)))
                       OR (v_restart IS NOT NULL AND o.seq > v_promoted AND o.lsn < v_restart));
            IF applied_seq IS NULL THEN
                -- everything examined is applied; when nothing is kept, whatever was pruned was
                SELECT coalesce(p_upto, max(o.seq), (SELECT pruned_through FROM pgqueue.node), 0)
                INTO applied_seq FROM pgqueue.op_log o;
            END IF;
        ELSE
            active := r.seen_at > v_now - interval '1 minute';
            seen_at := r.seen_at;
            applied_seq := r.confirmed_seq;
            SELECT count(*), extract(epoch FROM now() - min(o.at))::float8 INTO lag_ops, lag_seconds
            FROM pgqueue.op_log o
            WHERE o.seq > r.confirmed_seq AND o.seq <= coalesce(p_upto, 9223372036854775807);
        END IF;
        lag_seconds := coalesce(lag_seconds, 0);
        stale := NOT active AND seen_at < v_now - p_stale_after;
        IF v_writable AND seen_at > r.seen_at + interval '1 second' THEN
            -- remember it: a short disconnect later is measured from here, not from attach
            UPDATE pgqueue.replica x SET seen_at = replica_status.seen_at
            WHERE x.name = r.name AND x.seen_at < replica_status.seen_at;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;
-- @@ function pgqueue.touch_replicas
-- @@ after function pgqueue.replica_status

-- The leader sees every logical replica whose slot is active now: its seen_at moves to now
-- (at most once per p_every, so a pass every second does not rewrite the rows every second).
-- A follower's seen_at moves when it confirms (replica_confirm). Returns the rows moved.
CREATE OR REPLACE FUNCTION pgqueue.touch_replicas(p_every interval DEFAULT interval '10 seconds')
RETURNS int
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_now timestamptz := pgqueue.now_ms();
    v_n int;
BEGIN
    UPDATE pgqueue.replica r SET seen_at = v_now
    FROM pg_replication_slots s
    WHERE r.method = 'logical' AND s.slot_name = r.slot_name AND s.active
      AND r.seen_at < v_now - p_every;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;
-- @@ function pgqueue.upsert_schedule
-- @@ after function pgqueue.schedule_json

-- Create or change a schedule (the caller validated cron and zone and computed next_run_at).
-- Refused (PQ422) when next_run_at is not after the schedule's last fired time: the caller
-- computes it from max(the database's clock, last_fired_at) under the row lock.
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
    -- c is the row as updated under its lock, with the last fired time of the latest tick
    -- that committed before it: the raise undoes the change
    IF c.next_run_at <= c.last_fired_at THEN
        RAISE EXCEPTION 'schedule % of stream %: next_run_at % is not after its last fired time % (a fire time fires once)',
            p_name, p_stream, c.next_run_at, c.last_fired_at USING ERRCODE = 'PQ422';
    END IF;
    INSERT INTO pgqueue.op_log (stream, op, body)
    VALUES (p_stream, 'UpsertSchedule', pgqueue.schedule_json(c));
    RETURN c;
END
$$;
-- @@ function pgqueue.advance_schedule
-- @@ after function pgqueue.upsert_schedule

-- Advance a fired (or skipped) schedule; runs in the same transaction as its ticks' enqueues.
-- p_fired lists the fire times enqueued (ISO 8601 text, ascending) and p_last_fired_at is the
-- last of them (NULL when none fired). Under the row lock, each must be after the schedule's
-- last fired time and not after the database's clock, and the new next_run_at after all of
-- them; otherwise PQ422, and the tick's savepoint takes its enqueues back with it. That is
-- what makes a fire time fire at most once, ever.
CREATE OR REPLACE FUNCTION pgqueue.advance_schedule(p_stream text, p_name text, p_next_run_at timestamptz,
                                         p_last_fired_at timestamptz, p_fired jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    c pgqueue.schedule;
    v_now timestamptz := pgqueue.now_ms();
    v_last timestamptz;
    v_at timestamptz;
BEGIN
    PERFORM pgqueue.require_leader();
    SELECT * INTO c FROM pgqueue.schedule WHERE stream = p_stream AND name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no schedule % in stream %', p_name, p_stream USING ERRCODE = 'PQ404';
    END IF;
    v_last := c.last_fired_at;
    FOR v_at IN
        SELECT date_trunc('milliseconds', f.t::timestamptz)
        FROM jsonb_array_elements_text(coalesce(p_fired, '[]'::jsonb)) WITH ORDINALITY AS f(t, i)
        ORDER BY f.i
    LOOP
        IF v_at <= v_last THEN
            RAISE EXCEPTION 'schedule % of stream %: fire time % is not after %, fired before it (a fire time fires once)',
                p_name, p_stream, v_at, v_last USING ERRCODE = 'PQ422';
        END IF;
        IF v_at > v_now THEN
            RAISE EXCEPTION 'schedule % of stream %: fire time % is after the database''s clock %',
                p_name, p_stream, v_at, v_now USING ERRCODE = 'PQ422';
        END IF;
        v_last := v_at;
    END LOOP;
    IF jsonb_array_length(coalesce(p_fired, '[]'::jsonb)) = 0 THEN
        v_at := NULL;    -- nothing fired
    ELSE
        v_at := v_last;
    END IF;
    IF date_trunc('milliseconds', p_last_fired_at) IS DISTINCT FROM v_at THEN
        RAISE EXCEPTION 'schedule % of stream %: last_fired_at % is not the last of the fired times %',
            p_name, p_stream, p_last_fired_at, p_fired USING ERRCODE = 'PQ422';
    END IF;
    IF date_trunc('milliseconds', p_next_run_at) <= v_last THEN
        RAISE EXCEPTION 'schedule % of stream %: next_run_at % is not after its last fired time % (a fire time fires once)',
            p_name, p_stream, p_next_run_at, v_last USING ERRCODE = 'PQ422';
    END IF;
    UPDATE pgqueue.schedule
    SET next_run_at = date_trunc('milliseconds', p_next_run_at), last_fired_at = v_last
    WHERE stream = p_stream AND name = p_name
    RETURNING * INTO c;
    INSERT INTO pgqueue.op_log (stream, op, body)
    VALUES (p_stream, 'UpdateScheduleNextRun', jsonb_build_object(
        'stream', c.stream, 'name', c.name, 'next_run_at_ms', pgqueue.to_ms(c.next_run_at),
        'last_fired_at_ms', pgqueue.to_ms(c.last_fired_at), 'fired', p_fired));
END
$$;
-- @@ function pgqueue.request_enqueued
-- @@ after function pgqueue.remove_schedule

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
                     WHERE o.seq >= p_seq AND o.xid = p_xid AND o.op = 'Enqueue'
                       AND o.dedup_key IS NULL ORDER BY o.seq);
    FOR i IN 1 .. p_n LOOP
        v_key := p_dedup_keys[i];
        IF v_key IS NULL THEN
            v_result[i] := v_plain[v_next];
            v_next := v_next + 1;
        ELSE
            v_id := NULL;
            SELECT o.job_id INTO v_id FROM pgqueue.op_log o
            WHERE o.seq >= p_seq AND o.xid = p_xid AND o.op = 'Enqueue' AND o.dedup_key = v_key
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
-- @@ function pgqueue.enqueue_body
-- @@ after function pgqueue.request_enqueued

-- Enqueue: returns one id per input, in input order. A job whose dedup_key is held by a live
-- job of the stream is not inserted; its slot returns the holder's id. Each statement of this
-- function takes a fresh snapshot (READ COMMITTED), so a holder committed by a concurrent
-- enqueuer is found by the lookup that follows the conflict, in the same round trip.
-- An Enqueue op's own body (its job's fields are the op row's columns): what every op of the
-- call shares, and the job's trace context and concurrency key when it has them (a
-- replica's job gets them too).
-- pgqueue.enqueue writes the same CASE inline: called per row, the function cost 9 % of a
-- batch of 1,000.
CREATE OR REPLACE FUNCTION pgqueue.enqueue_body(p_shared jsonb, p_trace jsonb,
                                                p_concurrency_key text) RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$ SELECT CASE WHEN p_trace IS NULL AND p_concurrency_key IS NULL THEN p_shared
                  ELSE p_shared || jsonb_strip_nulls(jsonb_build_object(
                      'trace', p_trace, 'concurrency_key', p_concurrency_key)) END $$;
-- @@ function pgqueue.enqueue
-- @@ after function pgqueue.enqueue_body

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
    p_concurrency_keys text[] DEFAULT NULL
) RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE
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
       OR coalesce(cardinality(p_concurrency_keys), v_n) <> v_n THEN
        RAISE EXCEPTION 'enqueue: all arrays must have % elements', v_n USING ERRCODE = '22023';
    END IF;
    IF v_n = 0 THEN
        RETURN;
    END IF;
    v_limit := coalesce((SELECT c.max_payload_bytes FROM pgqueue.stream_config c
                         WHERE c.stream = p_stream), 16777216);
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
                                     max_attempts_given, trace_context, concurrency_key)
            SELECT v_ids[t.ord], p_stream, t.kind, t.payload, t.priority::smallint,
                   CASE WHEN t.at > v_now THEN 'scheduled' ELSE 'pending' END,
                   t.at, v_now, 0, coalesce(t.max_attempts, 25), t.schema_version,
                   t.max_attempts IS NOT NULL, t.trace, t.ckey
            FROM (SELECT u.*, greatest(v_now, date_trunc('milliseconds', coalesce(
                             u.not_before, v_now + coalesce(u.delay_ms, 0) * interval '1 millisecond'))) AS at
                  FROM unnest(p_payloads, p_kinds, p_priorities, p_delays_ms, p_not_befores,
                              p_max_attempts, p_schema_versions, p_traces, p_concurrency_keys)
                       WITH ORDINALITY
                       AS u(payload, kind, priority, delay_ms, not_before, max_attempts,
                            schema_version, trace, ckey, ord)) t
            ORDER BY t.ord
            RETURNING id, stream, kind, payload, priority, state, not_before, dedup_key,
                      max_attempts, schema_version, max_attempts_given,
                      trace_context, concurrency_key  -- what the op needs
        ), logged AS (
            INSERT INTO pgqueue.op_log (stream, op, job_id, body, kind, payload, priority,
                                        not_before, dedup_key, max_attempts, schema_version,
                                        request)
            SELECT ins.stream, 'Enqueue', ins.id,
                   CASE WHEN ins.trace_context IS NULL AND ins.concurrency_key IS NULL THEN v_body
                        ELSE v_body || jsonb_strip_nulls(jsonb_build_object(
                            'trace', ins.trace_context, 'concurrency_key', ins.concurrency_key))
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
                   p_concurrency_keys[t.ord] AS ckey
            FROM unnest(v_todo) WITH ORDINALITY AS t(ord, k)
        ), ins AS (
            INSERT INTO pgqueue.job (id, stream, kind, payload, priority, state, not_before,
                                     enqueued_at, dedup_key, attempts, max_attempts, schema_version,
                                     max_attempts_given, trace_context, concurrency_key)
            SELECT id, p_stream, kind, payload, priority,
                   CASE WHEN not_before > v_now THEN 'scheduled' ELSE 'pending' END,
                   not_before, v_now, dedup_key, 0, coalesce(max_attempts, 25), schema_version,
                   max_attempts IS NOT NULL, trace, ckey
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
                   CASE WHEN ins.trace_context IS NULL AND ins.concurrency_key IS NULL THEN v_body
                        ELSE v_body || jsonb_strip_nulls(jsonb_build_object(
                            'trace', ins.trace_context, 'concurrency_key', ins.concurrency_key))
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
    p_stream text, p_payload bytea, p_kind text, p_priority int, p_delay_ms bigint,
    p_not_before timestamptz, p_dedup_key bytea, p_max_attempts int, p_schema_version int,
    p_request uuid DEFAULT NULL, p_resent boolean DEFAULT false, p_trace jsonb DEFAULT NULL,
    p_concurrency_key text DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql VOLATILE
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
    v_at := greatest(v_now, date_trunc('milliseconds', coalesce(
        p_not_before, v_now + coalesce(p_delay_ms, 0) * interval '1 millisecond')));
    v_limit := coalesce((SELECT c.max_payload_bytes FROM pgqueue.stream_config c
                         WHERE c.stream = p_stream), 16777216);
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
                                 max_attempts_given, trace_context, concurrency_key)
        VALUES (nextval('pgqueue.job_id_seq'), p_stream, p_kind, p_payload, p_priority::smallint,
                CASE WHEN v_at > v_now THEN 'scheduled' ELSE 'pending' END, v_at, v_now,
                p_dedup_key, 0, coalesce(p_max_attempts, 25), p_schema_version,
                p_max_attempts IS NOT NULL, p_trace, p_concurrency_key)
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
                        p_trace, p_concurrency_key),
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
-- for each limited kind of the stream the lease takes the kind's advisory lock without
-- waiting (a kind another lease is counting is skipped by this one, never waited for),
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
    crashes_by_step jsonb, not_before timestamptz, trace_context jsonb, rate_at_start boolean
)
LANGUAGE plpgsql VOLATILE
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
    IF p_limit < 1 OR p_visibility_ms < 0 OR p_start < 0 THEN
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
                       WHERE k.stream = j.stream AND k.kind = j.kind AND k.rate_count IS NOT NULL)
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
                  NOT j.lease_started AND j.id = ANY(v_rated) AS rate_at_start
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
-- @@ function pgqueue.rate_bucket_ms
-- @@ after function pgqueue.lease

-- The bucket a rate limit's window counts leases in: a twentieth of the window, at least 1 ms.
CREATE OR REPLACE FUNCTION pgqueue.rate_bucket_ms(p_window_ms bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT greatest(1, p_window_ms / 20) $$;
-- @@ function pgqueue.pick_within_limits
-- @@ after function pgqueue.rate_bucket_ms

-- The jobs a lease of a stream with limited kinds takes (pgqueue.lease): up to p_limit by
-- priority DESC then id. Candidates are chosen without locks and only the chosen rows are
-- locked (SKIP LOCKED; a few rounds when concurrent leases took some), so a lease locks no
-- more than it leases. Jobs without a kind and each kind without a limit (a skip scan of
-- job_pending_kind_idx: one probe per ready kind) give their first candidates. A limited kind
-- with ready jobs is counted under its advisory lock (taken without waiting: a kind another
-- lease is counting is left to that lease, and nobody else takes its jobs meanwhile): its
-- room is its max_concurrency less its leased jobs and its rate_count less its leases in the
-- window, by the clock when the lock was taken; with max_per_key a key holding that many is
-- passed over. A lease of a rate-limited kind counts in its window from its start: one said
-- started at the lease (p_start NULL: every one; else the first p_start in lease order, and any
-- once reclaimed unstarted) is written to the kind's rate bucket here; one leased ahead is
-- counted by pgqueue.start_rated when its handler is about to start it (deferred when its
-- window is full), so the handlers' starts keep to the rate, not only the grants. Returns the
-- ids in lease order, and which of them are of rate-limited kinds.
CREATE OR REPLACE FUNCTION pgqueue.pick_within_limits(
    p_stream text, p_limit int, p_kinds text[], p_max int[], p_rate int[], p_rate_ms bigint[],
    p_per_key int[], p_start int, OUT ids bigint[], OUT rated bigint[]
)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_room int;
    v_held jsonb;
    v_before int;
    v_at bigint;
    v_ats bigint[] := '{}';        -- each limited kind's clock, by its index in p_kinds
    v_free_ids bigint[] := '{}';   -- candidates of kinds without a limit
    v_free_pris smallint[] := '{}';
    v_lim_ids bigint[] := '{}';    -- candidates of limited kinds, under their locks
    v_lim_pris smallint[] := '{}';
    v_lim_kinds int[] := '{}';     -- the index in p_kinds of each
    v_tried bigint[] := '{}';      -- unlimited candidates another lease locked first
    v_chosen bigint[];
    v_locked bigint[];
    v_got bigint[] := '{}';
    v_job record;
    v_kind text;
    v_round int := 0;
    v_scanned int;
    v_bpri smallint;                -- the p_limit-th candidate of the kinds without a limit
    v_bid bigint;
    v_cap int := p_limit * 4 + 200;  -- jobs read in lease order before taking kinds apart
    i int;
BEGIN
    LOOP
        v_round := v_round + 1;
        -- jobs of kinds without a limit (and without a kind): read in lease order passing
        -- over limited kinds' jobs, at most v_cap of them; only when a limited backlog that
        -- long stands ahead is each such kind taken apart (a skip scan of
        -- job_pending_kind_idx: one probe per ready kind, then its first candidates). The
        -- skip scan is not the first resort: it steps over the index entries of jobs leased
        -- or acked since the last vacuum.
        SELECT coalesce(array_agg(c.id), '{}'), coalesce(array_agg(c.priority), '{}')
        INTO v_free_ids, v_free_pris
        FROM (SELECT c.id, c.priority  -- the outer LIMIT stops the scan at p_limit found
              FROM (SELECT j.id, j.priority, j.kind FROM pgqueue.job j
                    WHERE j.stream = p_stream AND j.state = 'pending' AND j.id <> ALL(v_tried)
                    ORDER BY j.priority DESC, j.id
                    LIMIT v_cap) c
              WHERE c.kind IS NULL OR c.kind <> ALL(p_kinds)
              LIMIT p_limit) c;
        v_scanned := 0;
        IF cardinality(v_free_ids) < p_limit THEN  -- short: the end of the jobs, or the cap?
            SELECT count(*)::int INTO v_scanned
            FROM (SELECT 1 FROM pgqueue.job j
                  WHERE j.stream = p_stream AND j.state = 'pending' AND j.id <> ALL(v_tried)
                  ORDER BY j.priority DESC, j.id
                  LIMIT v_cap) c;
        END IF;
        IF cardinality(v_free_ids) < p_limit AND v_scanned >= v_cap THEN
            SELECT coalesce(array_agg(c.id), '{}'), coalesce(array_agg(c.priority), '{}')
            INTO v_free_ids, v_free_pris
            FROM (SELECT j.id, j.priority FROM pgqueue.job j
                  WHERE j.stream = p_stream AND j.state = 'pending' AND j.kind IS NULL
                    AND j.id <> ALL(v_tried)
                  ORDER BY j.kind, j.priority DESC, j.id  -- kind first: the kind index's order
                  LIMIT p_limit) c;
            FOR v_kind IN
                WITH RECURSIVE ready AS (
                    (SELECT j.kind FROM pgqueue.job j
                     WHERE j.stream = p_stream AND j.state = 'pending' AND j.kind IS NOT NULL
                     ORDER BY j.kind LIMIT 1)
                    UNION ALL
                    SELECT (SELECT j.kind FROM pgqueue.job j
                            WHERE j.stream = p_stream AND j.state = 'pending' AND j.kind > r.kind
                            ORDER BY j.kind LIMIT 1)
                    FROM ready r WHERE r.kind IS NOT NULL)
                SELECT r.kind FROM ready r WHERE r.kind IS NOT NULL AND r.kind <> ALL(p_kinds)
            LOOP
                SELECT v_free_ids || coalesce(array_agg(c.id), '{}'),
                       v_free_pris || coalesce(array_agg(c.priority), '{}')
                INTO v_free_ids, v_free_pris
                FROM (SELECT j.id, j.priority FROM pgqueue.job j
                      WHERE j.stream = p_stream AND j.state = 'pending' AND j.kind = v_kind
                        AND j.id <> ALL(v_tried)
                      ORDER BY j.kind, j.priority DESC, j.id
                      LIMIT p_limit) c;
            END LOOP;
        END IF;
        IF v_round = 1 THEN
            SELECT f.priority, f.id INTO v_bpri, v_bid
            FROM unnest(v_free_ids, v_free_pris) AS f(id, priority)
            ORDER BY f.priority DESC, f.id OFFSET p_limit - 1 LIMIT 1;
        -- each limited kind with ready jobs ahead of the p_limit-th candidate of the others (a
        -- kind whose first job would not make the cut is not locked, nor counted): its
        -- candidates, as many as its room
        FOR i IN 1 .. cardinality(p_kinds) LOOP
            CONTINUE WHEN NOT EXISTS (  -- no ready job of the kind: nothing to count for
                SELECT 1 FROM pgqueue.job j
                WHERE j.stream = p_stream AND j.state = 'pending' AND j.kind = p_kinds[i]
                 AND (v_bpri IS NULL OR j.priority > v_bpri OR (j.priority = v_bpri AND j.id < v_bid)));
            CONTINUE WHEN NOT pg_try_advisory_xact_lock(
                hashtext('pgqueue.kind'), hashtext(p_stream || '/' || p_kinds[i]));
            -- the rate's clock: when the lock was taken (the transaction began earlier)
            v_at := pgqueue.to_ms(coalesce(nullif(current_setting('pgqueue.now', true), '')::timestamptz,
                                           clock_timestamp()));
            v_ats[i] := v_at;
            v_room := p_limit;
            IF p_max[i] IS NOT NULL THEN
                v_room := least(v_room, p_max[i] - (
                    SELECT count(*) FROM pgqueue.job j
                    WHERE j.state = 'leased' AND j.stream = p_stream AND j.kind = p_kinds[i]));
            END IF;
            IF p_rate[i] IS NOT NULL THEN  -- buckets that reach into the window (at - ms, at]
                DELETE FROM pgqueue.kind_lease k
                WHERE k.stream = p_stream AND k.kind = p_kinds[i] AND k.until <= v_at - p_rate_ms[i];
                v_room := least(v_room, p_rate[i] - (
                    SELECT coalesce(sum(k.n), 0) FROM pgqueue.kind_lease k
                    WHERE k.stream = p_stream AND k.kind = p_kinds[i]));
            END IF;
            CONTINUE WHEN v_room <= 0;
            v_before := cardinality(v_lim_ids);
            IF p_per_key[i] IS NULL THEN
                SELECT v_lim_ids || coalesce(array_agg(c.id), '{}'),
                       v_lim_pris || coalesce(array_agg(c.priority), '{}')
                INTO v_lim_ids, v_lim_pris
                FROM (SELECT j.id, j.priority FROM pgqueue.job j
                      WHERE j.stream = p_stream AND j.state = 'pending' AND j.kind = p_kinds[i]
                       AND (v_bpri IS NULL OR j.priority > v_bpri OR (j.priority = v_bpri AND j.id < v_bid))
                      ORDER BY j.kind, j.priority DESC, j.id
                      LIMIT v_room) c;
            ELSE
                -- max_per_key: the kind's jobs in order, a job whose key already holds max_per_key
                -- leases passed over (it holds back no other key: the scan goes on behind it)
                SELECT coalesce(jsonb_object_agg(h.concurrency_key, h.n), '{}') INTO v_held
                FROM (SELECT j.concurrency_key, count(*) AS n FROM pgqueue.job j
                      WHERE j.state = 'leased' AND j.stream = p_stream AND j.kind = p_kinds[i]
                        AND j.concurrency_key IS NOT NULL
                      GROUP BY j.concurrency_key) h;
                FOR v_job IN SELECT j.id, j.priority, j.concurrency_key FROM pgqueue.job j
                             WHERE j.stream = p_stream AND j.state = 'pending' AND j.kind = p_kinds[i]
                              AND (v_bpri IS NULL OR j.priority > v_bpri OR (j.priority = v_bpri AND j.id < v_bid))
                             ORDER BY j.kind, j.priority DESC, j.id
                LOOP
                    IF v_job.concurrency_key IS NOT NULL THEN
                        CONTINUE WHEN coalesce((v_held ->> v_job.concurrency_key)::int, 0) >= p_per_key[i];
                        v_held := v_held || jsonb_build_object(v_job.concurrency_key,
                            coalesce((v_held ->> v_job.concurrency_key)::int, 0) + 1);
                    END IF;
                    v_lim_ids := v_lim_ids || v_job.id;
                    v_lim_pris := v_lim_pris || v_job.priority;
                    EXIT WHEN cardinality(v_lim_ids) - v_before >= v_room;
                END LOOP;
            END IF;
            v_lim_kinds := v_lim_kinds || array_fill(i, ARRAY[cardinality(v_lim_ids) - v_before]);
        END LOOP;
        END IF;
        v_chosen := ARRAY(SELECT t.id FROM (
                SELECT * FROM unnest(v_free_ids, v_free_pris) AS f(id, priority)
                UNION ALL
                SELECT * FROM unnest(v_lim_ids, v_lim_pris) AS l(id, priority)) t
            WHERE t.id <> ALL(v_got)
            ORDER BY t.priority DESC, t.id LIMIT p_limit - cardinality(v_got));
        EXIT WHEN cardinality(v_chosen) = 0;
        v_locked := ARRAY(SELECT j.id FROM pgqueue.job j
                          WHERE j.id = ANY(v_chosen) AND j.state = 'pending'
                          ORDER BY j.priority DESC, j.id
                          FOR UPDATE SKIP LOCKED);
        v_got := v_got || v_locked;
        v_tried := v_tried || ARRAY(SELECT c FROM unnest(v_chosen) c WHERE c <> ALL(v_locked));
        EXIT WHEN cardinality(v_got) >= p_limit OR cardinality(v_locked) = cardinality(v_chosen)
                  OR v_round >= 3;
    END LOOP;
    ids := ARRAY(SELECT j.id FROM pgqueue.job j WHERE j.id = ANY(v_got)
                 ORDER BY j.priority DESC, j.id);
    rated := ARRAY(SELECT t.id FROM unnest(v_lim_ids, v_lim_kinds) AS t(id, ki)
                   WHERE t.id = ANY(v_got) AND p_rate[t.ki] IS NOT NULL);
    -- the leases of rate-limited kinds said started now, into the bucket of the clock of their
    -- kind's lock (the same rule as pgqueue.lease's lease_started)
    INSERT INTO pgqueue.kind_lease AS k (stream, kind, bucket, until, n)
    SELECT p_stream, p_kinds[t.ki], v_ats[t.ki] / s.size * s.size,
           v_ats[t.ki] / s.size * s.size + s.size, count(*)
    FROM unnest(v_lim_ids, v_lim_kinds) AS t(id, ki)
    JOIN unnest(ids) WITH ORDINALITY AS o(id, n) ON o.id = t.id
    JOIN pgqueue.job j ON j.id = t.id
    CROSS JOIN LATERAL (SELECT pgqueue.rate_bucket_ms(p_rate_ms[t.ki]) AS size) s
    WHERE p_rate[t.ki] IS NOT NULL
      AND (p_start IS NULL OR o.n <= p_start OR j.unstarted_reclaims > 0)
    GROUP BY t.ki, s.size, v_ats[t.ki]
    ON CONFLICT (stream, kind, bucket) DO UPDATE
    SET n = k.n + excluded.n, until = greatest(k.until, excluded.until);
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
CREATE OR REPLACE FUNCTION pgqueue.start_rated(p_job_id bigint, p_lease_id bigint) RETURNS text
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    j pgqueue.job := pgqueue.leased_job(p_job_id, p_lease_id);
    c pgqueue.kind_config;
    v_at bigint;
    v_size bigint;
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
        -- the lock a lease takes to count the kind (waited for here: held for a statement)
        PERFORM pg_advisory_xact_lock(hashtext('pgqueue.kind'), hashtext(j.stream || '/' || j.kind));
        v_at := pgqueue.to_ms(coalesce(nullif(current_setting('pgqueue.now', true), '')::timestamptz,
                                       clock_timestamp()));
        DELETE FROM pgqueue.kind_lease k
        WHERE k.stream = j.stream AND k.kind = j.kind AND k.until <= v_at - c.rate_ms;
        IF (SELECT coalesce(sum(k.n), 0) FROM pgqueue.kind_lease k
            WHERE k.stream = j.stream AND k.kind = j.kind) >= c.rate_count THEN
            -- full: back until the oldest bucket leaves the window
            SELECT min(k.until) + c.rate_ms INTO v_free FROM pgqueue.kind_lease k
            WHERE k.stream = j.stream AND k.kind = j.kind;
            j.state := 'scheduled';
            j.not_before := pgqueue.from_ms(v_free);
            PERFORM pgqueue.save_job(j, 'ReturnLease', p_lease_id,
                                     jsonb_build_object('deferred', 'rate_limit'));
            RETURN 'deferred';
        END IF;
        v_size := pgqueue.rate_bucket_ms(c.rate_ms);
        INSERT INTO pgqueue.kind_lease AS k (stream, kind, bucket, until, n)
        VALUES (j.stream, j.kind, v_at / v_size * v_size, v_at / v_size * v_size + v_size, 1)
        ON CONFLICT (stream, kind, bucket) DO UPDATE
        SET n = k.n + 1, until = greatest(k.until, excluded.until);
    END IF;
    UPDATE pgqueue.job SET lease_started = true WHERE id = j.id;
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
CREATE OR REPLACE FUNCTION pgqueue.renew(
    p_job_ids bigint[], p_lease_ids bigint[], p_visibility_ms bigint[], p_checkpoints jsonb[],
    p_started boolean[] DEFAULT NULL
) RETURNS TABLE (job_id bigint, lease_id bigint, expires_at timestamptz,
              cancel_requested boolean)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_now timestamptz := pgqueue.now_ms();
BEGIN
    PERFORM pgqueue.require_leader();
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
    )
    SELECT r.id, r.lease_id, r.lease_expires_at, r.cancel_requested_at IS NOT NULL FROM renewed r;
END
$$;
-- @@ function pgqueue.nack
-- @@ after function pgqueue.ack

-- Nack: one failure. attempts + 1; dead when attempts >= max_attempts > 0, otherwise back to
-- pending (or scheduled) after p_retry_in_ms, or the stream's backoff when NULL. A job whose
-- cancel was requested ends as cancelled instead (never retried). Returns one row (dead?, and
-- the state it went to: pending, scheduled, dead or cancelled) or none when the lease is no
-- longer current.
CREATE OR REPLACE FUNCTION pgqueue.nack(p_job_id bigint, p_lease_id bigint, p_error text, p_retry_in_ms bigint,
                             p_max_attempts int DEFAULT NULL)
RETURNS TABLE (dead boolean, state text)
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
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
    IF j.cancel_requested_at IS NOT NULL THEN
        PERFORM pgqueue.finish_cancel(j, 'nack', p_error);
        RETURN QUERY SELECT false, 'cancelled'::text;
        RETURN;
    END IF;
    j.attempts := j.attempts + 1;
    j.last_error := coalesce(p_error, j.last_error);
    -- A handler's own limit (app.job(max_attempts=...)) applies when the producer set none;
    -- a limit set at enqueue always wins.
    IF NOT j.max_attempts_given THEN
        j.max_attempts := coalesce(p_max_attempts, j.max_attempts);
    END IF;
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
    RETURN QUERY SELECT v_state = 'dead', v_state;
END
$$;
-- @@ function pgqueue.return_leases
-- @@ after function pgqueue.nack

-- Worker: give leases back without costing an attempt (graceful shutdown). Checkpoint kept.
-- A job whose cancel was requested ends as cancelled instead. Returns each job let go of, and
-- the state it went to (pending, or cancelled).
CREATE OR REPLACE FUNCTION pgqueue.return_leases(p_job_ids bigint[], p_lease_ids bigint[])
RETURNS TABLE (id bigint, state text)
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := pgqueue.now_ms();
    j pgqueue.job;
    i int;
BEGIN
    PERFORM pgqueue.require_leader();
    FOR i IN 1 .. coalesce(cardinality(p_job_ids), 0) LOOP
        j := pgqueue.leased_job(p_job_ids[i], p_lease_ids[i]);
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
                                         p_detail jsonb) RETURNS text
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    j pgqueue.job := pgqueue.leased_job(p_job_id, p_lease_id);
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
CREATE OR REPLACE FUNCTION pgqueue.end_cancelled(p_job_id bigint, p_lease_id bigint) RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    j pgqueue.job := pgqueue.leased_job(p_job_id, p_lease_id);
BEGIN
    IF j.id IS NULL THEN
        RETURN false;
    END IF;
    PERFORM pgqueue.finish_cancel(j, 'handler');
    RETURN true;
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
        job_id := j.id; stream := j.stream; kind := j.kind; state := v_state;
        step := v_step; crashes := v_crashes;
        RETURN NEXT;
    END LOOP;
END
$$;
-- @@ function pgqueue.reclaim_expired
-- @@ after function pgqueue.reclaim_expired_jobs

-- The count only (what the previous releases' maintenance calls).
CREATE OR REPLACE FUNCTION pgqueue.reclaim_expired(p_limit int DEFAULT 1000) RETURNS int
LANGUAGE sql VOLATILE
AS $$ SELECT count(*)::int FROM pgqueue.reclaim_expired_jobs(p_limit) $$;
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
            crashes_by_step, max_attempts_given, concurrency_key)
        VALUES (d.id, d.stream, d.kind, d.payload, d.priority, 'pending', v_now, d.enqueued_at,
            d.dedup_key, 0, d.max_attempts, d.last_error, d.last_completed_step, d.cursor_step,
            d.cursor, d.checkpoint_updated_at, d.schema_version, d.step_set_hash,
            d.crashes_by_step, d.max_attempts_given, d.concurrency_key);
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
AS $$
DECLARE
    v_now timestamptz := pgqueue.now_ms();
    j pgqueue.job;
    v_stream text;
BEGIN
    PERFORM pgqueue.require_leader();
    SELECT * INTO j FROM pgqueue.job WHERE id = p_job_id FOR UPDATE;
    IF FOUND THEN
        IF j.state = 'leased' THEN
            IF j.cancel_requested_at IS NULL THEN
                UPDATE pgqueue.job SET cancel_requested_at = v_now WHERE id = p_job_id;
                INSERT INTO pgqueue.op_log (stream, op, job_id, lease_id, body)
                VALUES (j.stream, 'RequestCancel', j.id, j.lease_id,
                        jsonb_build_object('job_id', j.id, 'lease_id', j.lease_id,
                                           'at_ms', pgqueue.to_ms(v_now)));
                PERFORM pg_notify('pgqueue_cancel', j.lease_id::text);
            END IF;
            RETURN 'requested';
        END IF;
        DELETE FROM pgqueue.job WHERE id = p_job_id;
        INSERT INTO pgqueue.op_log (stream, op, job_id, body)
        VALUES (j.stream, 'Cancel', p_job_id, jsonb_build_object('job_id', p_job_id, 'was', j.state));
        RETURN 'cancelled';
    END IF;
    DELETE FROM pgqueue.dead_letter WHERE id = p_job_id RETURNING stream INTO v_stream;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no job %', p_job_id USING ERRCODE = 'PQ404';
    END IF;
    INSERT INTO pgqueue.op_log (stream, op, job_id, body)
    VALUES (v_stream, 'Cancel', p_job_id, jsonb_build_object('job_id', p_job_id, 'was', 'dead'));
    RETURN 'cancelled';
END
$$;
-- @@ function pgqueue.configure_stream
-- @@ after function pgqueue.cancel

-- Per-stream settings, logged like any other state change.
CREATE OR REPLACE FUNCTION pgqueue.configure_stream(
    p_stream text, p_retry_base_ms bigint DEFAULT NULL, p_retry_cap_ms bigint DEFAULT NULL,
    p_quarantine_after int DEFAULT NULL, p_max_payload_bytes bigint DEFAULT NULL
) RETURNS pgqueue.stream_config
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    c pgqueue.stream_config;
BEGIN
    PERFORM pgqueue.require_leader();
    PERFORM pgqueue.check_stream(p_stream);
    IF p_max_payload_bytes IS NOT NULL AND p_max_payload_bytes NOT BETWEEN 1 AND 67108864 THEN
        RAISE EXCEPTION 'max_payload_bytes must be 1 to 67108864 (64 MiB), got %',
            p_max_payload_bytes USING ERRCODE = '22023';
    END IF;
    INSERT INTO pgqueue.stream_config AS s (stream, retry_base_ms, retry_cap_ms, quarantine_after,
                                            max_payload_bytes)
    VALUES (p_stream, coalesce(p_retry_base_ms, 1000), coalesce(p_retry_cap_ms, 3600000),
            coalesce(p_quarantine_after, 3), coalesce(p_max_payload_bytes, 16777216))
    ON CONFLICT (stream) DO UPDATE SET
        retry_base_ms = coalesce(p_retry_base_ms, s.retry_base_ms),
        retry_cap_ms = coalesce(p_retry_cap_ms, s.retry_cap_ms),
        quarantine_after = coalesce(p_quarantine_after, s.quarantine_after),
        max_payload_bytes = coalesce(p_max_payload_bytes, s.max_payload_bytes)
    RETURNING * INTO c;
    INSERT INTO pgqueue.op_log (stream, op, body)
    VALUES (p_stream, 'ConfigureStream', to_jsonb(c));
    RETURN c;
END
$$;
-- @@ function pgqueue.configure_kind_settings
-- @@ after function pgqueue.configure_stream

-- A kind's settings in a stream: the keys of p_settings are set (a JSON null clears one:
-- quarantine_after, max_concurrency, rate_count with rate_ms, max_per_key), the others are
-- left as they are. Logs the kind's whole settings as a ConfigureKind op when they changed
-- (the op alone rebuilds them); returns whether they did.
CREATE OR REPLACE FUNCTION pgqueue.configure_kind_settings(p_stream text, p_kind text,
                                                           p_settings jsonb)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_old pgqueue.kind_config;
    v_new pgqueue.kind_config;
    v_found boolean;
    v_key text;
    v_val jsonb;
    v_most numeric;  -- the largest value the setting's column holds
BEGIN
    PERFORM pgqueue.require_leader();
    PERFORM pgqueue.check_stream(p_stream);
    IF p_kind IS NULL OR p_kind = '' THEN
        RAISE EXCEPTION 'kind must be a non-empty name' USING ERRCODE = '22023';
    END IF;
    IF jsonb_typeof(p_settings) IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'kind settings must be a JSON object' USING ERRCODE = '22023';
    END IF;
    -- each setting named, and a whole number in its column's range (or null: clear it), so a
    -- psql caller hears what is wrong instead of a check constraint's name
    FOR v_key, v_val IN SELECT e.key, e.value FROM jsonb_each(p_settings) e LOOP
        IF v_key NOT IN ('quarantine_after', 'max_concurrency', 'rate_count', 'rate_ms',
                         'max_per_key') THEN
            RAISE EXCEPTION 'unknown kind setting %: use quarantine_after, max_concurrency, rate_count and rate_ms, max_per_key',
                quote_literal(left(v_key, 40)) USING ERRCODE = '22023';
        END IF;
        CONTINUE WHEN jsonb_typeof(v_val) = 'null';
        v_most := CASE v_key WHEN 'rate_ms' THEN 9223372036854775807 ELSE 2147483647 END;
        IF jsonb_typeof(v_val) <> 'number' OR (v_val #>> '{}')::numeric % 1 <> 0
           OR (v_val #>> '{}')::numeric NOT BETWEEN 1 AND v_most THEN
            RAISE EXCEPTION '% must be a whole number of at least 1 (or null, to clear it), got %',
                v_key, left(v_val::text, 40) USING ERRCODE = '22023';
        END IF;
    END LOOP;
    -- one change of a kind's settings at a time, also when its row does not exist yet (two
    -- first settings would each start from nothing, and the second drop the first's)
    PERFORM pg_advisory_xact_lock(hashtext('pgqueue.kind_config'),
                                  hashtext(p_stream || '/' || p_kind));
    SELECT * INTO v_old FROM pgqueue.kind_config WHERE stream = p_stream AND kind = p_kind
    FOR UPDATE;
    v_found := FOUND;
    v_new := jsonb_populate_record(v_old, p_settings);  -- the keys given over the row there is
    v_new.stream := p_stream;
    v_new.kind := p_kind;
    IF (v_new.rate_count IS NULL) <> (v_new.rate_ms IS NULL) THEN
        RAISE EXCEPTION 'rate_count and rate_ms are set together (at most rate_count leases in any rate_ms window) or cleared together'
            USING ERRCODE = '22023';
    END IF;
    IF v_found AND v_old IS NOT DISTINCT FROM v_new THEN
        RETURN false;  -- no change
    ELSIF NOT v_found AND num_nonnulls(v_new.quarantine_after, v_new.max_concurrency,
                                       v_new.rate_count, v_new.rate_ms, v_new.max_per_key) = 0 THEN
        RETURN false;  -- nothing to clear
    END IF;
    PERFORM pgqueue.save_kind_config(v_new);
    INSERT INTO pgqueue.op_log (stream, op, body)
    VALUES (p_stream, 'ConfigureKind', to_jsonb(v_new));
    RETURN true;
END
$$;
-- @@ function pgqueue.save_kind_config
-- @@ after function pgqueue.configure_kind_settings

-- The one writer of kind_config (configure_kind_settings and the op's apply): the row as given, or
-- none when it sets nothing.
CREATE OR REPLACE FUNCTION pgqueue.save_kind_config(p pgqueue.kind_config) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF num_nonnulls(p.quarantine_after, p.max_concurrency, p.rate_count, p.rate_ms,
                    p.max_per_key) = 0 THEN
        DELETE FROM pgqueue.kind_config WHERE stream = p.stream AND kind = p.kind;
        RETURN;
    END IF;
    INSERT INTO pgqueue.kind_config AS k VALUES (p.*)
    ON CONFLICT (stream, kind) DO UPDATE
    SET quarantine_after = excluded.quarantine_after, max_concurrency = excluded.max_concurrency,
        rate_count = excluded.rate_count, rate_ms = excluded.rate_ms,
        max_per_key = excluded.max_per_key;
END
$$;
-- @@ function pgqueue.configure_kind
-- @@ after function pgqueue.save_kind_config

-- The previous release's call (its workers register quarantine_after=N): sets that alone.
CREATE OR REPLACE FUNCTION pgqueue.configure_kind(p_stream text, p_kind text, p_quarantine_after int)
RETURNS boolean
LANGUAGE sql VOLATILE
AS $$
    SELECT pgqueue.configure_kind_settings(p_stream, p_kind,
                                  jsonb_build_object('quarantine_after', p_quarantine_after))
$$;
-- @@ function pgqueue.apply_to_jobs
-- @@ after function pgqueue.configure_kind

-- Operator: one verb on many jobs of a filter (the bulk actions). Each job is locked and
-- checked against the filter (stream, state, kind; NULL: any) it was chosen by, then goes
-- through the same function as the verb on one job, in its own subtransaction, so each logs
-- its op and a job the verb does not fit (gone, changed meanwhile, a dedup key taken) is
-- returned with why instead of failing the rest. Callers send at most 50 ids at a time: past
-- 64 subtransactions in one transaction every other session's snapshots overflow and slow
-- down. The verb is one of a fixed list: no SQL is built from it.
CREATE OR REPLACE FUNCTION pgqueue.apply_to_jobs(p_verb text, p_job_ids bigint[],
                                                 p_to_step text DEFAULT NULL,
                                                 p_stream text DEFAULT NULL,
                                                 p_state text DEFAULT NULL,
                                                 p_kind text DEFAULT NULL)
RETURNS TABLE (job_id bigint, refused text)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_id bigint;
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
        PERFORM 1 FROM pgqueue.job j
        WHERE j.id = v_id AND (p_stream IS NULL OR j.stream = p_stream)
          AND (p_state IS NULL OR j.state = p_state) AND (p_kind IS NULL OR j.kind = p_kind)
        FOR UPDATE;
        IF NOT FOUND AND (p_state IS NULL OR p_state = 'dead') THEN
            PERFORM 1 FROM pgqueue.dead_letter d
            WHERE d.id = v_id AND (p_stream IS NULL OR d.stream = p_stream)
              AND (p_kind IS NULL OR d.kind = p_kind)
            FOR UPDATE;
        END IF;
        IF NOT FOUND THEN
            job_id := v_id;
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
                WHEN 'cancel' THEN PERFORM pgqueue.cancel(v_id);
            END CASE;
        EXCEPTION WHEN SQLSTATE 'PQ404' OR SQLSTATE 'PQ409' OR SQLSTATE 'PQ422' THEN
            job_id := v_id;
            refused := SQLERRM;
            RETURN NEXT;
        END;
    END LOOP;
END
$$;
-- @@ function pgqueue.prune_op_log
-- @@ after function pgqueue.apply_to_jobs

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
-- A leader's write: a replica refuses it (PQ401 naming its leader), as it refuses every queue
-- write; its log is the leader's, and what it may drop is the leader's decision.
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
    -- ops from before a promotion are committed whatever their (another leader's) xid says
    v_promoted bigint := (SELECT n.promoted_through FROM pgqueue.node n);
    v_last bigint;
    v_applied bigint;
    v_n int;
BEGIN
    PERFORM pgqueue.require_leader();
    IF p_limit IS NULL OR p_limit < 1 THEN
        RAISE EXCEPTION 'prune_op_log: limit must be >= 1, got %', p_limit USING ERRCODE = '22023';
    END IF;
    PERFORM 1 FROM (SELECT o.seq, o.at, o.xid FROM pgqueue.op_log o ORDER BY o.seq LIMIT 1) f
    WHERE f.at < v_cutoff AND (f.seq <= v_promoted OR f.xid < v_xmin);
    IF NOT FOUND THEN
        RETURN 0;  -- the oldest op is young (or unfinished): nothing to prune
    END IF;
    SELECT max(p.seq) INTO v_last
    FROM (SELECT o.seq, bool_and(o.at < v_cutoff AND (o.seq <= v_promoted OR o.xid < v_xmin))
                            OVER (ORDER BY o.seq) AS old
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
