-- GENERATED FILE: do not edit. What pgqueue schema revision 0020 changed in the functions and
-- views, object by object, against the code of revision 0019 (frozen by
-- `python -m pgqueue_migrations.new` when revision 0021 was started). Each entry is headed
-- by the object it defines and the one it follows, then its whole text (or `removed`); the
-- code of 0020 is every frozen file up to it applied in order (migrations/frozen.py). Loaded
-- when a database is upgraded to 0020 or downgraded to it; the current definitions live in
-- pgqueue/sql/.

-- @@ function pgqueue.register_worker_kinds
-- @@ after function pgqueue.register_worker

-- The kinds a registered worker handles, with its handlers' settings (pgqueue.worker.kinds).
CREATE OR REPLACE FUNCTION pgqueue.register_worker_kinds(p_id bigint, p_kinds jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
BEGIN
    IF jsonb_typeof(p_kinds) IS DISTINCT FROM 'array' THEN
        RAISE EXCEPTION 'register_worker_kinds: kinds must be a JSON array, got %',
            coalesce(jsonb_typeof(p_kinds), 'NULL') USING ERRCODE = '22023';
    END IF;
    UPDATE pgqueue.worker SET kinds = p_kinds WHERE id = p_id;
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
        RETURNING j.id
    )
    SELECT coalesce(array_agg(p.id ORDER BY p.id), '{}') INTO v_ids FROM promoted p;
    -- the ops in a statement of their own (see pgqueue.ack)
    INSERT INTO pgqueue.op_log (stream, op, job_id, body)
    SELECT p_stream, 'Promote', t.id, jsonb_build_object('job_id', t.id, 'state', 'pending')
    FROM unnest(v_ids) AS t(id);  -- in id order (unnest's)
    RETURN cardinality(v_ids);
END
$$;
-- @@ function pgqueue.lease_id_of
-- @@ after function pgqueue.take_ready_after

-- The lease id a lease drew for job p_id: the one at the job's place among its candidates.
-- A function, not the subscript written in the UPDATE: Citus (14.0) crashed its worker on an
-- array subscript by a column in a statement it plans for one node.
CREATE OR REPLACE FUNCTION pgqueue.lease_id_of(p_lease_ids bigint[], p_ids bigint[], p_id bigint)
RETURNS bigint
LANGUAGE sql IMMUTABLE
AS $$ SELECT p_lease_ids[array_position(p_ids, p_id)] $$;
-- @@ function pgqueue.lease
-- @@ after function pgqueue.lease_id_of

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
    -- what the call leased, in id order: the jobs, their lease ids, which started at once
    v_leased bigint[];
    v_leased_ids bigint[];
    v_leased_started boolean[];
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
    -- The UPDATE gathers what it leased into arrays; the rows are then read again to be
    -- returned (held by this transaction, their payloads streamed, not copied into arrays),
    -- and the ops and the expiry entry written from the arrays, in statements of their own.
    -- On Citus an INSERT fed by the UPDATE's rows would send them to every node and commit
    -- there in two phases (see pgqueue.ack).
    WITH leased AS (
        UPDATE pgqueue.job j
        SET state = 'leased', lease_id = pgqueue.lease_id_of(v_lease_ids, v_ids, j.id),
            worker_node = p_worker_node, worker_instance = p_worker_instance,
            lease_expires_at = v_exp,
            lease_started = (j.id = ANY(v_started) OR j.unstarted_reclaims > 0)
        WHERE j.stream = p_stream AND j.id = ANY(v_ids)
          -- (an entry's job no longer pending is not leased; one another transaction holds,
          -- an operator's, is waited for and leased if still pending then: that transaction
          -- never waits for the entry this lease holds, pgqueue.ready_drop)
          AND j.state = 'pending'
        RETURNING j.id, j.lease_id, j.lease_started
    )
    SELECT coalesce(array_agg(l.id ORDER BY l.id), '{}'), array_agg(l.lease_id ORDER BY l.id),
           array_agg(l.lease_started ORDER BY l.id)
    INTO v_leased, v_leased_ids, v_leased_started
    FROM leased l;
    IF cardinality(v_leased) = 0 THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT j.id, j.lease_id, j.stream, j.kind, j.payload, j.priority, j.attempts,
           j.max_attempts, j.enqueued_at, j.lease_expires_at, j.lease_started,
           j.last_completed_step, j.cursor_step, j.cursor, j.checkpoint_updated_at,
           j.schema_version, j.step_set_hash, j.crashes_by_step, j.not_before, j.trace_context,
           NOT j.lease_started AND j.id = ANY(v_rated) AS rate_at_start, j.timeout_ms
    FROM pgqueue.job j
    WHERE j.stream = p_stream AND j.id = ANY(v_leased)
      AND j.state = 'leased' COLLATE "POSIX"  -- (by id, not a stream's index: job's indexes)
    ORDER BY j.priority DESC, j.id;
    INSERT INTO pgqueue.op_log (stream, op, job_id, lease_id, body, request)
    SELECT p_stream, 'Lease', t.id, t.lease_id,
           CASE WHEN t.started THEN v_body ELSE v_body_ahead END,
           CASE WHEN t.n = 1 THEN p_request END  -- the call's first op, as ids ascend
    FROM unnest(v_leased, v_leased_ids, v_leased_started) WITH ORDINALITY
         AS t(id, lease_id, started, n);  -- in id order (unnest's)
    -- where reclaim finds them once they expire: one row for the call
    INSERT INTO pgqueue.lease_expiry (slot, expires_at, job_ids, stream)
    VALUES (pgqueue.expiry_slot(v_exp), v_exp, v_leased, p_stream);
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
    p_started boolean[] DEFAULT NULL, p_stream text DEFAULT pgqueue.each_stream()
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
    v_ids bigint[];
    v_leases bigint[];
    v_renewed_until timestamptz[];
    v_cancel boolean[];
    v_bodies jsonb[];
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
    )
    SELECT coalesce(array_agg(r.id ORDER BY r.id), '{}'), array_agg(r.lease_id ORDER BY r.id),
           array_agg(r.lease_expires_at ORDER BY r.id),
           array_agg(r.cancel_requested_at IS NOT NULL ORDER BY r.id),
           array_agg(jsonb_build_object(
               'job_id', r.id, 'lease_id', r.lease_id,
               'expires_at_ms', pgqueue.to_ms(r.lease_expires_at),
               'checkpoint', pgqueue.checkpoint_json_of(r.last_completed_step, r.cursor_step,
                   r.cursor, r.checkpoint_updated_at, r.schema_version, r.step_set_hash,
                   r.crashes_by_step),
               'started', r.lease_started) ORDER BY r.id)
    INTO v_ids, v_leases, v_renewed_until, v_cancel, v_bodies
    FROM renewed r;
    -- The ops and the expiry entries in statements of their own (see pgqueue.ack).
    INSERT INTO pgqueue.op_log (stream, op, job_id, lease_id, body)
    SELECT p_stream, 'Renew', t.id, t.lease_id, t.body
    FROM unnest(v_ids, v_leases, v_bodies) AS t(id, lease_id, body);  -- in id order (unnest's)
    -- where reclaim finds them once they expire: one row per new expiry of the call
    INSERT INTO pgqueue.lease_expiry (slot, expires_at, job_ids, stream)
    SELECT pgqueue.expiry_slot(t.expires_at), t.expires_at, array_agg(t.id ORDER BY t.id),
           p_stream
    FROM unnest(v_ids, v_renewed_until) AS t(id, expires_at) GROUP BY t.expires_at;
    RETURN QUERY SELECT t.id, t.lease_id, t.expires_at, t.cancel
                 FROM unnest(v_ids, v_leases, v_renewed_until, v_cancel)
                      AS t(id, lease_id, expires_at, cancel);
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
                                       p_stream text DEFAULT pgqueue.each_stream()) RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    v_stream text;
    v_ids bigint[];
    v_leases bigint[];
BEGIN
    PERFORM pgqueue.require_leader();
    IF p_stream IS NULL THEN
        FOR v_stream IN SELECT DISTINCT j.stream FROM pgqueue.job j WHERE j.id = ANY(p_job_ids) LOOP
            RETURN QUERY SELECT pgqueue.ack(p_job_ids, p_lease_ids, v_stream);
        END LOOP;
        RETURN;
    END IF;
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
        RETURNING j.id, j.lease_id
    )
    SELECT coalesce(array_agg(g.id ORDER BY g.id), '{}'),
           coalesce(array_agg(g.lease_id ORDER BY g.id), '{}')
    INTO v_ids, v_leases
    FROM gone g;
    -- The ops in a statement of their own (on Citus an INSERT fed by the DELETE's rows would
    -- send them to every node and commit there in two phases).
    INSERT INTO pgqueue.op_log (stream, op, job_id, lease_id, body)
    SELECT p_stream, 'Ack', t.id, t.lease_id, '{}'::jsonb  -- job and lease: the row's columns
    FROM unnest(v_ids, v_leases) AS t(id, lease_id);  -- in id order (unnest's)
    RETURN QUERY SELECT unnest(v_ids);
END
$$;
-- @@ function pgqueue.verb_states
-- @@ after function pgqueue.requeue_dead_letter

-- queries -----------------------------------------------------------------------------------

-- operate.sql: functions
-- The operator verbs (the CLI's, the HTTP API's and the dashboard's names) and the states each
-- applies to: the rule the verbs check (through pgqueue.operator_job; requeue takes dead
-- letters, cancel every job), which pgqueue.job_verbs reads for what a job's page offers.
CREATE OR REPLACE FUNCTION pgqueue.verb_states(p_verb text) RETURNS text[]
LANGUAGE sql IMMUTABLE
AS $$ SELECT CASE p_verb
    WHEN 'requeue' THEN ARRAY['dead']
    WHEN 'release' THEN ARRAY['quarantined', 'undecodable']
    WHEN 'rewind' THEN ARRAY['pending', 'scheduled', 'quarantined', 'undecodable']
    WHEN 'restart' THEN ARRAY['pending', 'scheduled', 'quarantined', 'undecodable']
    WHEN 'skip-step' THEN ARRAY['pending', 'scheduled', 'quarantined', 'undecodable']
    WHEN 'accept-step-set' THEN ARRAY['undecodable']
    WHEN 'cancel' THEN ARRAY['pending', 'scheduled', 'leased', 'quarantined', 'undecodable', 'dead']
END $$;
-- @@ function pgqueue.job_verbs
-- @@ after function pgqueue.verb_states

-- The verbs a job allows, in the order the CLI lists them: those whose states hold its own,
-- accept-step-set only for a job parked as step_set_changed, rewind and skip-step only for a
-- job with a recorded step list (p_step_job). What a job's page offers, and the verbs refuse
-- the others.
CREATE OR REPLACE FUNCTION pgqueue.job_verbs(p_state text, p_state_reason text,
                                             p_step_job boolean) RETURNS text[]
LANGUAGE sql IMMUTABLE
AS $$ SELECT ARRAY(
    SELECT t.verb
    FROM unnest(ARRAY['requeue', 'release', 'rewind', 'restart', 'skip-step', 'accept-step-set',
                      'cancel']) WITH ORDINALITY AS t(verb, n)
    WHERE p_state = ANY (pgqueue.verb_states(t.verb))
      AND (t.verb <> 'accept-step-set' OR p_state_reason IS NOT DISTINCT FROM 'step_set_changed')
      AND (t.verb NOT IN ('rewind', 'skip-step') OR p_step_job)
    ORDER BY t.n) $$;
-- @@ function pgqueue.job_change
-- @@ after function pgqueue.job_verbs

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
CREATE OR REPLACE FUNCTION pgqueue.release(p_job_id bigint, p_reset_crashes boolean DEFAULT false,
                                           p_stream text DEFAULT pgqueue.each_stream())
RETURNS TABLE (id bigint, stream text, kind text, state text, attempts int,
               last_completed_step text, cursor_step text)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    j pgqueue.job := pgqueue.operator_job(p_job_id, 'release', pgqueue.verb_states('release'), p_stream);
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
CREATE OR REPLACE FUNCTION pgqueue.rewind(p_job_id bigint, p_to_step text, p_stream text DEFAULT pgqueue.each_stream())
RETURNS TABLE (id bigint, stream text, kind text, state text, attempts int,
               last_completed_step text, cursor_step text)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    j pgqueue.job := pgqueue.operator_job(p_job_id, 'rewind', pgqueue.verb_states('rewind'),
                                          p_stream);
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
CREATE OR REPLACE FUNCTION pgqueue.restart(p_job_id bigint, p_stream text DEFAULT pgqueue.each_stream())
RETURNS TABLE (id bigint, stream text, kind text, state text, attempts int,
               last_completed_step text, cursor_step text)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    j pgqueue.job := pgqueue.operator_job(p_job_id, 'restart', pgqueue.verb_states('restart'),
                                          p_stream);
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
CREATE OR REPLACE FUNCTION pgqueue.skip_step(p_job_id bigint, p_stream text DEFAULT pgqueue.each_stream())
RETURNS TABLE (id bigint, stream text, kind text, state text, attempts int,
               last_completed_step text, cursor_step text)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    j pgqueue.job := pgqueue.operator_job(p_job_id, 'skip a step of',
                                          pgqueue.verb_states('skip-step'), p_stream);
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
CREATE OR REPLACE FUNCTION pgqueue.accept_step_set(p_job_id bigint, p_stream text DEFAULT pgqueue.each_stream())
RETURNS TABLE (id bigint, stream text, kind text, state text, attempts int,
               last_completed_step text, cursor_step text)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    j pgqueue.job := pgqueue.operator_job(p_job_id, 'accept the step set of',
                                          pgqueue.verb_states('accept-step-set'), p_stream);
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
    pgqueue.error_summary, pgqueue.each_stream, pgqueue.verb_states, pgqueue.job_verbs
    TO pgqueue_reader;
-- @@ GRANT EXECUTE ON FUNCTION pgqueue.lease, pgqueue.renew, pgqueue.start_rated, pgqueue.ack, pgqueue.na
-- @@ after GRANT EXECUTE ON FUNCTION pgqueue.enqueue, pgqueue.enqueue_one TO pgqueue_producer;

-- worker
GRANT EXECUTE ON FUNCTION pgqueue.lease, pgqueue.renew, pgqueue.start_rated, pgqueue.ack,
    pgqueue.nack, pgqueue.return_leases, pgqueue.mark_undecodable, pgqueue.end_cancelled,
    pgqueue.upcast, pgqueue.reclaim_expired_jobs, pgqueue.reclaim_expired,
    pgqueue.reclaim_due_jobs, pgqueue.recycle_lease_expiry,
    pgqueue.register_step_set, pgqueue.configure_kind_settings, pgqueue.configure_kind,
    pgqueue.register_worker, pgqueue.register_worker_kinds, pgqueue.heartbeat_worker,
    pgqueue.deregister_worker,
    pgqueue.prune_workers, pgqueue.claim_due_schedules, pgqueue.advance_schedule,
    pgqueue.prune_old_ops, pgqueue.touch_replicas, pgqueue.claim_maintenance,
    pgqueue.release_maintenance, pgqueue.recycle_ready, pgqueue.recycle_op_log,
    pgqueue.recycle_rings
    TO pgqueue_worker;
