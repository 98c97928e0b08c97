-- GENERATED FILE: do not edit. What pgqueue schema revision 0008 changed in the functions and
-- views, object by object, against the code of revision 0007 (frozen by
-- `python -m pgqueue_migrations.new` when revision 0009 was started). Each entry is headed
-- by the object it defines and the one it follows, then its whole text (or `removed`); the
-- code of 0008 is every frozen file up to it applied in order (migrations/frozen.py). Loaded
-- when a database is upgraded to 0008 or downgraded to it; the current definitions live in
-- pgqueue/sql/.

-- @@ function pgqueue.check_name
-- @@ after function pgqueue.check_stream

-- A kind or a concurrency key as every way in takes it (a job's, a schedule's, a kind's
-- settings): 1 to 200 characters, or null. A longer one would be refused by an index only
-- later: a scheduled job's kind enters the ready index when it comes due, and every lease of
-- its stream would fail there.
CREATE OR REPLACE FUNCTION pgqueue.check_name(p_value text, p_what text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF length(p_value) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION '% must be 1 to 200 characters (or null), got %', p_what, length(p_value)
            USING ERRCODE = '22023';
    END IF;
END
$$;
-- @@ function pgqueue.payload_limit
-- @@ after function pgqueue.check_name

-- The most payload bytes a job of the stream may carry (stream_config.max_payload_bytes, 16 MiB
-- by default), which enqueue and upcast keep.
CREATE OR REPLACE FUNCTION pgqueue.payload_limit(p_stream text) RETURNS bigint
LANGUAGE sql STABLE
AS $$ SELECT coalesce((SELECT c.max_payload_bytes FROM pgqueue.stream_config c
                       WHERE c.stream = p_stream), 16777216) $$;
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
SET search_path = pg_catalog, pgqueue, pg_temp  -- the owner's session calls it (README, Roles)
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
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    n pgqueue.node;
BEGIN
    -- Wait for every transition in flight (each read this table in require_leader, and holds
    -- its ACCESS SHARE lock) before the role changes, so none commits as a leader's write
    -- after a demotion; the ones that come later wait, then read the new role.
    LOCK TABLE pgqueue.node IN ACCESS EXCLUSIVE MODE;
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
-- @@ function pgqueue.enable_apply_trigger
-- @@ after function pgqueue.op_log_apply_trigger

-- The trigger exists only on replicas (attach creates it, promote drops it), so the leader's
-- hot path never pays for it.
CREATE OR REPLACE FUNCTION pgqueue.enable_apply_trigger() RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgqueue, pg_temp
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
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$ DROP TRIGGER IF EXISTS op_log_apply ON pgqueue.op_log $$;
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
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    c pgqueue.schedule;
    v_now timestamptz := pgqueue.now_ms();
BEGIN
    PERFORM pgqueue.require_leader();
    PERFORM pgqueue.check_stream(p_stream);
    PERFORM pgqueue.check_name(p_kind, 'kind');
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
-- last fired time, not before its next run and not after the database's clock, and the new
-- next_run_at after all of them; otherwise PQ422, and the tick's savepoint takes its enqueues
-- back with it. That is what makes a fire time fire at most once, ever. Only a due schedule
-- that is not paused advances: a worker's tick may not move one that is not its turn.
CREATE OR REPLACE FUNCTION pgqueue.advance_schedule(p_stream text, p_name text, p_next_run_at timestamptz,
                                         p_last_fired_at timestamptz, p_fired jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
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
    IF c.paused THEN
        RAISE EXCEPTION 'schedule % of stream % is paused: no tick advances it', p_name, p_stream
            USING ERRCODE = 'PQ422';
    END IF;
    IF c.next_run_at IS NULL OR c.next_run_at > v_now THEN
        RAISE EXCEPTION 'schedule % of stream % is not due (next run %, the database''s clock %)',
            p_name, p_stream, coalesce(c.next_run_at::text, 'none'), v_now USING ERRCODE = 'PQ422';
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
        IF v_at < c.next_run_at THEN
            RAISE EXCEPTION 'schedule % of stream %: fire time % is before its next run %',
                p_name, p_stream, v_at, c.next_run_at USING ERRCODE = 'PQ422';
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
-- @@ function pgqueue.job_fields_fit
-- @@ after function pgqueue.request_enqueued

-- What a job carries besides its payload, as every way in takes it (Python checks the same
-- first, pgqueue/validate.py): a kind and a concurrency key of 1 to 200 characters, a dedup
-- key of at most 1,024 bytes, a trace context of at most 16,384 bytes. A longer key would be
-- refused by an index only later (see check_name), a longer trace would weigh on every copy
-- of the job and its op. job_fields_fit is the test (inlined in a batch's scan);
-- check_job_fields raises naming the field, and the job's index in a batch (p_at).
CREATE OR REPLACE FUNCTION pgqueue.job_fields_fit(p_kind text, p_dedup_key bytea,
                                                  p_concurrency_key text, p_trace jsonb)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT coalesce(length(p_kind) BETWEEN 1 AND 200, true)
         AND coalesce(octet_length(p_dedup_key) <= 1024, true)
         AND coalesce(length(p_concurrency_key) BETWEEN 1 AND 200, true)
         AND coalesce(octet_length(p_trace::text) <= 16384, true) $$;
-- @@ function pgqueue.check_job_fields
-- @@ after function pgqueue.job_fields_fit

CREATE OR REPLACE FUNCTION pgqueue.check_job_fields(p_at bigint, p_kind text, p_dedup_key bytea,
                                                    p_concurrency_key text, p_trace jsonb)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_job text := CASE WHEN p_at IS NULL THEN '' ELSE format('jobs[%s].', p_at) END;
BEGIN
    PERFORM pgqueue.check_name(p_kind, v_job || 'kind');
    PERFORM pgqueue.check_name(p_concurrency_key, v_job || 'concurrency_key');
    IF octet_length(p_dedup_key) > 1024 THEN
        RAISE EXCEPTION '%dedup_key must be at most 1024 bytes, got %', v_job,
            octet_length(p_dedup_key) USING ERRCODE = '22023';
    END IF;
    IF octet_length(p_trace::text) > 16384 THEN
        RAISE EXCEPTION '%trace context must be at most 16384 bytes, got %', v_job,
            octet_length(p_trace::text) USING ERRCODE = '22023';
    END IF;
END
$$;
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
       OR coalesce(cardinality(p_concurrency_keys), v_n) <> v_n THEN
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
    crashes_by_step jsonb, not_before timestamptz, trace_context jsonb, rate_at_start boolean
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
-- @@ function pgqueue.lock_kind
-- @@ after function pgqueue.rate_bucket_ms

-- A limited kind's lock, held to the end of the transaction: a lease counts the kind under it
-- (taken without waiting: a kind another lease is counting is left to that one), and so does
-- pgqueue.start_rated (waiting: it counts one job, for a statement). Returns whether it is held
-- (false also when the kind has no settings row any more: nothing limits it). The lock is the
-- kind_config row's: locking a row needs UPDATE on the table, which only the owner has, so no
-- login can hold a kind's lock and stall it (an advisory lock any login may take).
CREATE OR REPLACE FUNCTION pgqueue.lock_kind(p_stream text, p_kind text, p_wait boolean)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF p_wait THEN
        PERFORM FROM pgqueue.kind_config c WHERE c.stream = p_stream AND c.kind = p_kind
        FOR NO KEY UPDATE;
    ELSE
        PERFORM FROM pgqueue.kind_config c WHERE c.stream = p_stream AND c.kind = p_kind
        FOR NO KEY UPDATE SKIP LOCKED;
    END IF;
    RETURN FOUND;
END
$$;
-- @@ function pgqueue.pick_within_limits
-- @@ after function pgqueue.ready_ahead

-- The jobs a lease of a stream with limited kinds takes (pgqueue.lease): up to p_limit by
-- priority DESC then id. Candidates are chosen without locks and only the chosen rows are
-- locked (SKIP LOCKED; a few rounds when concurrent leases took some), so a lease locks no
-- more than it leases. Jobs without a kind and each kind without a limit (a skip scan of
-- job_pending_kind_idx: one probe per ready kind) give their first candidates. A limited kind
-- with ready jobs is counted under its lock (pgqueue.lock_kind; taken without waiting: a kind
-- another lease is counting is left to that lease, and nobody else takes its jobs meanwhile): its
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
    v_locked_pris smallint[];
    v_got bigint[] := '{}';        -- the jobs locked, and their priorities
    v_got_pris smallint[] := '{}';
    v_job record;
    v_kind text;
    v_round int := 0;
    v_scanned int;
    v_bpri smallint;                -- the p_limit-th candidate of the kinds without a limit
    v_bid bigint;
    v_cap int := p_limit * 4 + 200;  -- jobs read in lease order before taking kinds apart
    v_counted bigint[];             -- rate-limited leases counted in their windows now
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
        -- (the v_cap-th job read comes back too, whatever its kind: it says the scan stopped
        -- at the cap, not at the end of the jobs)
        SELECT coalesce(array_agg(c.id ORDER BY c.n) FILTER (WHERE c.free), '{}'),
               coalesce(array_agg(c.priority ORDER BY c.n) FILTER (WHERE c.free), '{}'),
               coalesce(max(c.n), 0)
        INTO v_free_ids, v_free_pris, v_scanned
        FROM (SELECT c.id, c.priority, c.n, c.kind IS NULL OR c.kind <> ALL(p_kinds) AS free
              FROM (SELECT j.id, j.priority, j.kind,
                           row_number() OVER (ORDER BY j.priority DESC, j.id) AS n
                    FROM pgqueue.job j
                    WHERE j.stream = p_stream AND j.state = 'pending' AND j.id <> ALL(v_tried)
                    ORDER BY j.priority DESC, j.id
                    LIMIT v_cap) c
              WHERE c.kind IS NULL OR c.kind <> ALL(p_kinds) OR c.n = v_cap
              LIMIT p_limit + 1) c;  -- stops the scan at p_limit found (and one more)
        v_free_ids := v_free_ids[1:p_limit];
        v_free_pris := v_free_pris[1:p_limit];
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
                SELECT 1 FROM pgqueue.ready_ahead(p_stream, p_kinds[i], v_bpri, v_bid, 1));
            CONTINUE WHEN NOT pgqueue.lock_kind(p_stream, p_kinds[i], false);
            v_at := pgqueue.rate_clock_ms();
            v_ats[i] := v_at;
            v_room := p_limit;
            IF p_max[i] IS NOT NULL THEN
                v_room := least(v_room, p_max[i] - (
                    SELECT count(*) FROM pgqueue.job j
                    WHERE j.state = 'leased' AND j.stream = p_stream AND j.kind = p_kinds[i]));
            END IF;
            IF p_rate[i] IS NOT NULL THEN
                v_room := least(v_room, p_rate[i] - pgqueue.rate_window_used(
                    p_stream, p_kinds[i], p_rate_ms[i], v_at));
            END IF;
            CONTINUE WHEN v_room <= 0;
            v_before := cardinality(v_lim_ids);
            IF p_per_key[i] IS NULL THEN
                SELECT v_lim_ids || coalesce(array_agg(c.id), '{}'),
                       v_lim_pris || coalesce(array_agg(c.priority), '{}')
                INTO v_lim_ids, v_lim_pris
                FROM (SELECT r.id, r.priority
                      FROM pgqueue.ready_ahead(p_stream, p_kinds[i], v_bpri, v_bid, v_room) r
                      LIMIT v_room) c;
            ELSE
                -- max_per_key: the kind's jobs in order, a job whose key already holds max_per_key
                -- leases passed over (it holds back no other key: the scan goes on behind it)
                SELECT coalesce(jsonb_object_agg(h.concurrency_key, h.n), '{}') INTO v_held
                FROM (SELECT j.concurrency_key, count(*) AS n FROM pgqueue.job j
                      WHERE j.state = 'leased' AND j.stream = p_stream AND j.kind = p_kinds[i]
                        AND j.concurrency_key IS NOT NULL
                      GROUP BY j.concurrency_key) h;
                FOR v_job IN SELECT r.id, r.priority, r.concurrency_key
                             FROM pgqueue.ready_ahead(p_stream, p_kinds[i], v_bpri, v_bid, NULL) r
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
        -- by primary key: `state || ''` keeps the partial indexes out of reach (without
        -- statistics the planner took job_pending_kind_idx, skip-scanning it per id)
        SELECT coalesce(array_agg(l.id), '{}'), coalesce(array_agg(l.priority), '{}')
        INTO v_locked, v_locked_pris
        FROM (SELECT j.id, j.priority FROM pgqueue.job j
              WHERE j.id = ANY(v_chosen) AND j.state || '' = 'pending'
              FOR UPDATE SKIP LOCKED) l;
        v_got := v_got || v_locked;
        v_got_pris := v_got_pris || v_locked_pris;
        v_tried := v_tried || ARRAY(SELECT c FROM unnest(v_chosen) c WHERE c <> ALL(v_locked));
        EXIT WHEN cardinality(v_got) >= p_limit OR cardinality(v_locked) = cardinality(v_chosen)
                  OR v_round >= 3;
    END LOOP;
    ids := ARRAY(SELECT g.id FROM unnest(v_got, v_got_pris) AS g(id, priority)
                 ORDER BY g.priority DESC, g.id);
    rated := ARRAY(SELECT t.id FROM unnest(v_lim_ids, v_lim_kinds) AS t(id, ki)
                   WHERE t.id = ANY(v_got) AND p_rate[t.ki] IS NOT NULL);
    -- the leases of rate-limited kinds said started now, into the bucket of the clock of their
    -- kind's lock (the same rule as pgqueue.lease's lease_started)
    IF cardinality(rated) > 0 THEN
        v_counted := rated;  -- every one, unless some are leased ahead (counted as they start)
        IF p_start IS NOT NULL THEN
            v_counted := ARRAY(SELECT o.id FROM unnest(ids) WITH ORDINALITY AS o(id, n)
                               JOIN pgqueue.job j ON j.id = o.id
                               WHERE o.id = ANY(rated)
                                 AND (o.n <= p_start OR j.unstarted_reclaims > 0));
        END IF;
        PERFORM pgqueue.rate_window_add(p_stream, p_kinds[c.ki], p_rate_ms[c.ki], v_ats[c.ki], c.n)
        FROM (SELECT t.ki, count(*) AS n FROM unnest(v_lim_ids, v_lim_kinds) AS t(id, ki)
              WHERE t.id = ANY(v_counted) GROUP BY t.ki) c;
    END IF;
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
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    v_now timestamptz := pgqueue.now_ms();
BEGIN
    PERFORM pgqueue.require_leader();
    IF EXISTS (SELECT 1 FROM unnest(p_visibility_ms) v WHERE v IS NULL OR v < 0)
       OR cardinality(p_visibility_ms) IS DISTINCT FROM cardinality(p_job_ids) THEN
        -- NULL would leave a lease that never expires, never reclaimed
        RAISE EXCEPTION 'renew: every visibility must be >= 0 ms, one per job'
            USING ERRCODE = '22023';
    END IF;
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
-- @@ function pgqueue.upcast
-- @@ after function pgqueue.end_cancelled

-- Worker: store an upcast payload and its new schema version as the job resumes.
CREATE OR REPLACE FUNCTION pgqueue.upcast(p_job_id bigint, p_lease_id bigint, p_payload bytea,
                               p_schema_version int) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    j pgqueue.job := pgqueue.leased_job(p_job_id, p_lease_id);
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
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
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
    PERFORM pgqueue.check_name(p_kind, 'kind');
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
    -- one change of kinds' settings at a time, also when its row does not exist yet (two
    -- first settings would each start from nothing, and the second drop the first's). A lock
    -- no role but the owner may take (an advisory one any login could hold). It does not
    -- conflict with the row locks leases take (pgqueue.lock_kind): the FOR UPDATE below waits
    -- for those.
    LOCK TABLE pgqueue.kind_config IN SHARE ROW EXCLUSIVE MODE;
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
-- @@ function pgqueue.claim_maintenance
-- @@ after function pgqueue.apply_to_jobs

-- queries -----------------------------------------------------------------------------------

-- maintain.sql: functions
-- Claim (or renew) the maintenance runner's place for p_ttl_ms: true when the caller holds it.
-- Taken over when the claim lapsed or its holder's session ended (a runner killed is replaced
-- at the next pass elsewhere; a frozen one once its claim lapses). A worker's: no other role
-- may write the row, nor lock it (locking needs UPDATE on the table).
CREATE OR REPLACE FUNCTION pgqueue.claim_maintenance(p_holder uuid, p_ttl_ms bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    IF p_holder IS NULL OR p_ttl_ms IS NULL OR p_ttl_ms < 1 THEN
        RAISE EXCEPTION 'claim_maintenance: a holder and a ttl of at least 1 ms'
            USING ERRCODE = '22023';
    END IF;
    INSERT INTO pgqueue.maintenance_runner AS m (holder, pid, until)
    VALUES (p_holder, pg_backend_pid(), v_now + p_ttl_ms * interval '1 millisecond')
    ON CONFLICT (only_one) DO UPDATE
    SET holder = excluded.holder, pid = excluded.pid, until = excluded.until
    WHERE m.holder = excluded.holder OR m.until < v_now
       OR NOT EXISTS (SELECT 1 FROM pg_stat_activity a
                      WHERE a.pid = m.pid AND a.datname = current_database());
    RETURN FOUND;
END
$$;
-- @@ function pgqueue.release_maintenance
-- @@ after function pgqueue.claim_maintenance

-- Give the claim up (a runner that stops): the next pass elsewhere takes it at once.
CREATE OR REPLACE FUNCTION pgqueue.release_maintenance(p_holder uuid) RETURNS void
LANGUAGE sql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$ UPDATE pgqueue.maintenance_runner SET until = '-infinity' WHERE holder = p_holder $$;
-- @@ function pgqueue.prune_op_log
-- @@ after function pgqueue.release_maintenance

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
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
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
-- @@ GRANT EXECUTE ON FUNCTION pgqueue.lease, pgqueue.renew, pgqueue.start_rated, pgqueue.ack, pgqueue.na
-- @@ after GRANT EXECUTE ON FUNCTION pgqueue.enqueue, pgqueue.enqueue_one TO pgqueue_producer;

-- worker
GRANT EXECUTE ON FUNCTION pgqueue.lease, pgqueue.renew, pgqueue.start_rated, pgqueue.ack,
    pgqueue.nack, pgqueue.return_leases, pgqueue.mark_undecodable, pgqueue.end_cancelled,
    pgqueue.upcast, pgqueue.reclaim_expired_jobs, pgqueue.reclaim_expired,
    pgqueue.register_step_set, pgqueue.configure_kind_settings, pgqueue.configure_kind,
    pgqueue.register_worker, pgqueue.heartbeat_worker, pgqueue.deregister_worker,
    pgqueue.prune_workers, pgqueue.claim_due_schedules, pgqueue.advance_schedule,
    pgqueue.prune_old_ops, pgqueue.touch_replicas, pgqueue.claim_maintenance,
    pgqueue.release_maintenance
    TO pgqueue_worker;
