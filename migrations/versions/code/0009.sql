-- GENERATED FILE: do not edit. What pgqueue schema revision 0009 changed in the functions and
-- views, object by object, against the code of revision 0008 (frozen by
-- `python -m pgqueue_migrations.new` when revision 0010 was started). Each entry is headed
-- by the object it defines and the one it follows, then its whole text (or `removed`); the
-- code of 0009 is every frozen file up to it applied in order (migrations/frozen.py). Loaded
-- when a database is upgraded to 0009 or downgraded to it; the current definitions live in
-- pgqueue/sql/.

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
