-- enqueue: Enqueue: - -> pending / scheduled, one op per inserted job.

-- schema: functions -------------------------------------------------------------------------

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

-- Wake idle workers of this stream: identical notifications coalesce per commit. Not on a
-- Citus cluster, where an enqueue runs on the node holding its stream: a notification there
-- reaches only that node's listeners, and a transaction that notified on a worker node cannot
-- take part in a two-phase commit (an enqueue into streams on two nodes).
CREATE OR REPLACE FUNCTION pgqueue.notify_ready(p_stream text) RETURNS void
LANGUAGE sql VOLATILE
AS $$ SELECT pg_notify('pgqueue_jobs', p_stream) FROM pgqueue.layout WHERE name = 'single' $$;

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
    v_at       timestamptz[];
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
    -- Each job's due time, by its place in the batch. The job rows and their ops are written
    -- in statements of their own, both from the inputs: on Citus an INSERT fed by another
    -- INSERT's rows sends them to every node and commits there in two phases (see pgqueue.ack).
    v_at := ARRAY(SELECT greatest(v_now, date_trunc('milliseconds', coalesce(
                      u.not_before, v_now + coalesce(u.delay_ms, 0) * interval '1 millisecond')))
                  FROM unnest(p_priorities, p_not_befores, p_delays_ms) WITH ORDINALITY
                       AS u(priority, not_before, delay_ms, ord)
                  ORDER BY u.ord);
    IF coalesce(cardinality(array_remove(p_dedup_keys, NULL)), 0) = 0 THEN
        -- No dedup keys (the common batch): no conflicts to arbitrate, so a plain INSERT in
        -- input order and the ids as drawn.
        v_ids := ARRAY(SELECT nextval('pgqueue.job_id_seq') FROM generate_series(1, v_n));
        INSERT INTO pgqueue.job (id, stream, kind, payload, priority, state, not_before,
                                 enqueued_at, attempts, max_attempts, schema_version,
                                 max_attempts_given, trace_context, concurrency_key, timeout_ms)
        SELECT v_ids[u.ord], p_stream, u.kind, u.payload, u.priority::smallint,
               CASE WHEN v_at[u.ord] > v_now THEN 'scheduled' ELSE 'pending' END,
               v_at[u.ord], v_now, 0, coalesce(u.max_attempts, 25), u.schema_version,
               u.max_attempts IS NOT NULL, u.trace, u.ckey, u.timeout_ms
        FROM unnest(p_payloads, p_kinds, p_priorities, p_max_attempts, p_schema_versions,
                    p_traces, p_concurrency_keys, p_timeouts_ms) WITH ORDINALITY
             AS u(payload, kind, priority, max_attempts, schema_version, trace, ckey,
                  timeout_ms, ord)
        ORDER BY u.ord;
        INSERT INTO pgqueue.op_log (stream, op, job_id, body, kind, payload, priority,
                                    not_before, dedup_key, max_attempts, schema_version,
                                    request)
        SELECT p_stream, 'Enqueue', v_ids[u.ord],
               CASE WHEN u.trace IS NULL AND u.ckey IS NULL AND u.timeout_ms IS NULL THEN v_body
                    ELSE v_body || jsonb_strip_nulls(jsonb_build_object(
                        'trace', u.trace, 'concurrency_key', u.ckey, 'timeout_ms', u.timeout_ms))
               END,
               u.kind, u.payload, u.priority::smallint, v_at[u.ord], NULL,
               u.max_attempts,  -- null: not set
               u.schema_version,
               CASE WHEN u.ord = 1 THEN p_request END  -- the call's first op
        FROM unnest(p_payloads, p_kinds, p_priorities, p_max_attempts, p_schema_versions,
                    p_traces, p_concurrency_keys, p_timeouts_ms) WITH ORDINALITY
             AS u(payload, kind, priority, max_attempts, schema_version, trace, ckey,
                  timeout_ms, ord);  -- in input order (unnest's), as the ids ascend
        IF EXISTS (SELECT 1 FROM unnest(v_at) AS a(at) WHERE a.at <= v_now) THEN
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
        WITH ins AS (
            INSERT INTO pgqueue.job (id, stream, kind, payload, priority, state, not_before,
                                     enqueued_at, dedup_key, attempts, max_attempts, schema_version,
                                     max_attempts_given, trace_context, concurrency_key,
                                     timeout_ms)
            SELECT v_ids[t.k], p_stream, p_kinds[t.ord], p_payloads[t.ord],
                   p_priorities[t.ord]::smallint,
                   CASE WHEN v_at[t.ord] > v_now THEN 'scheduled' ELSE 'pending' END,
                   v_at[t.ord], v_now, p_dedup_keys[t.ord], 0,
                   coalesce(p_max_attempts[t.ord], 25), p_schema_versions[t.ord],
                   p_max_attempts[t.ord] IS NOT NULL, p_traces[t.ord],
                   p_concurrency_keys[t.ord], p_timeouts_ms[t.ord]
            -- Insert in dedup-key order so concurrent batches take key locks in one order
            -- (no deadlock); within a key the earlier input wins.
            FROM unnest(v_todo) WITH ORDINALITY AS t(ord, k)
            ORDER BY p_dedup_keys[t.ord] NULLS LAST, t.ord
            ON CONFLICT (stream, dedup_key)
                WHERE dedup_key IS NOT NULL AND state IN ('pending', 'scheduled', 'leased')
                DO NOTHING
            RETURNING id
        )
        SELECT array_agg(ins.id ORDER BY ins.id) INTO v_inserted FROM ins;
        -- their ops, in id order: the first this call writes carries its token
        INSERT INTO pgqueue.op_log (stream, op, job_id, body, kind, payload, priority,
                                    not_before, dedup_key, max_attempts, schema_version,
                                    request)
        SELECT p_stream, 'Enqueue', v_ids[t.k],
               CASE WHEN p_traces[t.ord] IS NULL AND p_concurrency_keys[t.ord] IS NULL
                         AND p_timeouts_ms[t.ord] IS NULL THEN v_body
                    ELSE v_body || jsonb_strip_nulls(jsonb_build_object(
                        'trace', p_traces[t.ord], 'concurrency_key', p_concurrency_keys[t.ord],
                        'timeout_ms', p_timeouts_ms[t.ord]))
               END,
               p_kinds[t.ord], p_payloads[t.ord], p_priorities[t.ord]::smallint, v_at[t.ord],
               p_dedup_keys[t.ord], p_max_attempts[t.ord], p_schema_versions[t.ord],
               CASE WHEN NOT v_stamped AND v_ids[t.k] = v_inserted[1] THEN p_request END
        FROM unnest(v_todo) WITH ORDINALITY AS t(ord, k)
        WHERE v_ids[t.k] = ANY(v_inserted);  -- in id order (unnest's: the ids ascend with k)
        v_ready := EXISTS (SELECT 1 FROM unnest(v_todo) WITH ORDINALITY AS t(ord, k)
                           WHERE v_ids[t.k] = ANY(v_inserted) AND v_at[t.ord] <= v_now);
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

-- queries -----------------------------------------------------------------------------------

-- name: notify_jobs_here
-- On Citus, after an enqueue (which its stream's node does not notify: pgqueue.notify_ready):
-- idle workers listening on the coordinator are told of the stream's new jobs from here.
SELECT pg_notify('pgqueue_jobs', %(stream)s::text)

-- name: enqueue_jobs
-- Enqueue a batch into one stream (one round trip, one op per inserted job). Returns one id
-- per input in input order; an input whose dedup key a live job holds returns the holder's id.
-- The arrays travel in binary (the b placeholders): text arrays of bytea cost a hex encoding and a quoting
-- pass per element on both sides (1,000 jobs: 13.0 -> 10.8 ms per call).
SELECT id FROM pgqueue.enqueue(
    %(stream)s, %(payloads)b::bytea[], %(kinds)b::text[], %(priorities)b::int[],
    %(delays_ms)b::bigint[], %(not_befores)b::timestamptz[], %(dedup_keys)b::bytea[],
    %(max_attempts)b::int[], %(schema_versions)b::int[], %(request)s::uuid, %(resent)s::boolean,
    %(traces)s::jsonb[], %(concurrency_keys)s::text[], %(timeouts_ms)s::int[])
    AS t(id)

-- name: enqueue_job
-- Enqueue one job (no arrays): its id, or the id of the live job holding its dedup key.
SELECT pgqueue.enqueue_one(%(stream)s::text, %(payload)b::bytea, %(kind)s::text,
    %(priority)s::int, %(delay_ms)s::bigint, %(not_before)s::timestamptz, %(dedup_key)s::bytea,
    %(max_attempts)s::int, %(schema_version)s::int, %(request)s::uuid, %(resent)s::boolean,
    %(trace)s::jsonb, %(concurrency_key)s::text, %(timeout_ms)s::int) AS id
