-- lease: Lease (pending -> leased) and Renew (leased -> leased, with the checkpoint).

-- schema: tables ----------------------------------------------------------------------------

-- How many leases of a rate-limited kind were granted in each bucket of time (a twentieth of
-- the kind's window, at least 1 ms), for the window the limit counts (pgqueue.lease): a lease
-- counts every bucket that reaches into its window, so the count is never less than the
-- leases in any window (at most a bucket's worth more: 5 % of the rate left unused), and a
-- window reads about 21 rows however many leases it holds. Buckets older than the window
-- are deleted as leases add new ones. Derived bookkeeping, not queue state: it is not in the
-- op log, and a promoted replica starts its windows empty.
CREATE TABLE pgqueue.kind_lease (
    stream text NOT NULL,
    kind   text NOT NULL,
    bucket bigint NOT NULL,  -- epoch ms of the bucket's start
    until  bigint NOT NULL,  -- and of its end (kept: a window changed later reads it right)
    n      int NOT NULL,
    PRIMARY KEY (stream, kind, bucket)
);

-- schema: functions -------------------------------------------------------------------------

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

-- Whether a job of p_kind is one a lease asked for: of p_kinds when given, and not of
-- p_not_kinds when given (a job without a kind is of none). A worker leases for each lane of
-- its slots the kinds that lane runs (pgqueue/runtime/capacity.py).
CREATE OR REPLACE FUNCTION pgqueue.in_lane(p_kind text, p_kinds text[], p_not_kinds text[])
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT (p_kinds IS NULL OR p_kind = ANY(p_kinds))
       AND (p_not_kinds IS NULL OR p_kind IS NULL OR p_kind <> ALL(p_not_kinds))
$$;

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
                                                    p_high smallint, p_after_id bigint,
                                                    p_kinds text[] DEFAULT NULL,
                                                    p_not_kinds text[] DEFAULT NULL)
RETURNS bigint[]
LANGUAGE sql VOLATILE
AS $$
    WITH taken AS (
        SELECT r.slot, r.ctid AS at FROM pgqueue.ready r
        WHERE r.stream = p_stream AND r.priority >= p_low AND r.priority <= p_high
          AND r.job_id > p_after_id AND r.xmax = '0'::xid
          AND pgqueue.in_lane(r.kind, p_kinds, p_not_kinds)
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

-- The ready entries of a stream a lease takes when its caller says where its last lease ended,
-- (p_after_priority, p_after_id): the first p_limit in lease order, leaving out those of that
-- priority up to that id, taken out now; their job ids in lease order. Three ranges
-- (pgqueue.take_ready_range), each read only while fewer than p_limit were found: the higher
-- priorities, that priority after that id, the lower priorities. The second starts at that id,
-- never reading the entries of the jobs leased before it, which under a held vacuum horizon
-- stay in the index (every lease from the start of the stream stepped over all of them:
-- 1,500-3,500 buffers per lease at 1,000 jobs/s). The caller looks from the start again every
-- so often (pgqueue.client.position.LeasePosition): an entry behind the position (a job that
-- became pending again, or committed after later ones) waits for that.
CREATE OR REPLACE FUNCTION pgqueue.take_ready_after(p_stream text, p_limit int,
                                                    p_after_priority smallint,
                                                    p_after_id bigint,
                                                    p_kinds text[] DEFAULT NULL,
                                                    p_not_kinds text[] DEFAULT NULL)
RETURNS bigint[]
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_ids bigint[];
BEGIN
    v_ids := '{}';
    IF p_after_priority < 32767 THEN
        v_ids := pgqueue.take_ready_range(p_stream, p_limit, (p_after_priority + 1)::smallint,
                                          32767::smallint, -9223372036854775808,
                                          p_kinds, p_not_kinds);
    END IF;
    IF cardinality(v_ids) < p_limit THEN
        v_ids := v_ids || pgqueue.take_ready_range(p_stream, p_limit - cardinality(v_ids),
                                                   p_after_priority, p_after_priority,
                                                   p_after_id, p_kinds, p_not_kinds);
    END IF;
    IF cardinality(v_ids) < p_limit AND p_after_priority > -32768 THEN
        v_ids := v_ids || pgqueue.take_ready_range(p_stream, p_limit - cardinality(v_ids),
                                                   (-32768)::smallint,
                                                   (p_after_priority - 1)::smallint,
                                                   -9223372036854775808, p_kinds, p_not_kinds);
    END IF;
    RETURN v_ids;
END
$$;

-- The lease id a lease drew for job p_id: the one at the job's place among its candidates.
-- A function, not the subscript written in the UPDATE: Citus (14.0) crashed its worker on an
-- array subscript by a column in a statement it plans for one node.
CREATE OR REPLACE FUNCTION pgqueue.lease_id_of(p_lease_ids bigint[], p_ids bigint[], p_id bigint)
RETURNS bigint
LANGUAGE sql IMMUTABLE
AS $$ SELECT p_lease_ids[array_position(p_ids, p_id)] $$;

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
    p_after_priority smallint DEFAULT NULL, p_after_id bigint DEFAULT NULL,
    p_kinds text[] DEFAULT NULL, p_not_kinds text[] DEFAULT NULL
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
-- And no JIT, in every function that turns a plan method off: up to PostgreSQL 17, a plan that
-- cannot do without the method (the sort of a few leased rows, the scan of a one-row table)
-- still uses it at a cost of 10^10 more, above every JIT threshold, so a stock server (jit on)
-- compiled the lease's statements at every call: 138 ms a lease of one job instead of 3.
SET jit = off
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
        v_ids := pgqueue.take_ready_after(p_stream, p_limit, p_after_priority, p_after_id,
                                          p_kinds, p_not_kinds);
        PERFORM set_config('pgqueue.ready_taken', 'on', true);
    ELSIF v_kinds IS NULL THEN
        -- the first ready entries in lease order that no other lease holds (SKIP LOCKED),
        -- taken out now (by where they are: the trigger of the UPDATE below would look each
        -- one up by key in every partition); their jobs are leased below where still pending
        -- (an entry whose job is not is just gone)
        WITH taken AS (
            SELECT r.slot, r.ctid AS at FROM pgqueue.ready r
            WHERE r.stream = p_stream AND pgqueue.in_lane(r.kind, p_kinds, p_not_kinds)
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
            RAISE EXCEPTION 'lease: stream % has kinds with limits, which a lease enforces only at READ COMMITTED, not % (the transaction''s level: default_transaction_isolation is %)',
                quote_literal(p_stream), upper(current_setting('transaction_isolation')),
                quote_literal(current_setting('default_transaction_isolation'))
                USING ERRCODE = '0A000',
                      HINT = 'lease outside the transaction, or SET TRANSACTION ISOLATION LEVEL READ COMMITTED; behind a pooler, set default_transaction_isolation to ''read committed'' for the role (ALTER ROLE ... SET)';
        END IF;
        -- this lease's UPDATE removes the entries of the jobs it takes (its trigger does)
        PERFORM set_config('pgqueue.ready_taken', 'off', true);
        SELECT p.ids, p.rated INTO v_ids, v_rated
        FROM pgqueue.pick_within_limits(p_stream, p_limit, v_kinds, v_max, v_rate, v_rate_ms,
                                        v_per_key, p_start, p_kinds, p_not_kinds) p;
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

-- The bucket a rate limit's window counts leases in: a twentieth of the window, at least 1 ms.
CREATE OR REPLACE FUNCTION pgqueue.rate_bucket_ms(p_window_ms bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT greatest(1, p_window_ms / 20) $$;

-- A limited kind's lock, held to the end of the transaction: a lease counts the kind under it
-- (taken without waiting: a kind another lease is counting is left to that one), and so does
-- pgqueue.start_rated (waiting: it counts one job, for a statement). Returns whether it is held
-- (false also when the kind has no settings row any more: nothing limits it). The lock is the
-- kind_config row's: locking a row needs UPDATE on the table, which only the owner has, so no
-- login can hold a kind's lock and stall it (an advisory lock any login may take). On Citus
-- kind_config is a reference table, whose rows a call running on a stream's node cannot lock:
-- there the lock is the row of pgqueue.kind_lease with bucket -1 (made on first use, counting
-- nothing, never deleted), which sits on the stream's node.
CREATE OR REPLACE FUNCTION pgqueue.lock_kind(p_stream text, p_kind text, p_wait boolean)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM pgqueue.layout WHERE name = 'citus') THEN
        IF NOT EXISTS (SELECT 1 FROM pgqueue.kind_config c
                       WHERE c.stream = p_stream AND c.kind = p_kind) THEN
            RETURN false;
        END IF;
        IF NOT EXISTS (SELECT 1 FROM pgqueue.kind_lease k
                       WHERE k.stream = p_stream AND k.kind = p_kind AND k.bucket = -1) THEN
            INSERT INTO pgqueue.kind_lease (stream, kind, bucket, until, n)
            VALUES (p_stream, p_kind, -1, 9223372036854775807, 0)
            ON CONFLICT DO NOTHING;
        END IF;
        IF p_wait THEN
            PERFORM FROM pgqueue.kind_lease k
            WHERE k.stream = p_stream AND k.kind = p_kind AND k.bucket = -1
            FOR NO KEY UPDATE;
        ELSE
            PERFORM FROM pgqueue.kind_lease k
            WHERE k.stream = p_stream AND k.kind = p_kind AND k.bucket = -1
            FOR NO KEY UPDATE SKIP LOCKED;
        END IF;
        RETURN FOUND;
    END IF;
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

-- The clock a rate window is read by: when the kind's lock was taken (the transaction began
-- earlier), as epoch ms (or the owner's pinned time).
CREATE OR REPLACE FUNCTION pgqueue.rate_clock_ms() RETURNS bigint
LANGUAGE sql VOLATILE
AS $$ SELECT pgqueue.to_ms(coalesce(pgqueue.pinned_now(), clock_timestamp())) $$;

-- The leases of a rate-limited kind in its window (p_at - p_rate_ms, p_at]: the buckets that
-- reach into it, once those wholly before it are deleted. Under the kind's lock.
CREATE OR REPLACE FUNCTION pgqueue.rate_window_used(p_stream text, p_kind text, p_rate_ms bigint,
                                                    p_at bigint)
RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
    DELETE FROM pgqueue.kind_lease k
    WHERE k.stream = p_stream AND k.kind = p_kind AND k.until <= p_at - p_rate_ms;
    SELECT coalesce(sum(k.n), 0)::bigint FROM pgqueue.kind_lease k
    WHERE k.stream = p_stream AND k.kind = p_kind;
$$;

-- Count p_n leases of a rate-limited kind in the bucket p_at falls in. Under the kind's lock.
CREATE OR REPLACE FUNCTION pgqueue.rate_window_add(p_stream text, p_kind text, p_rate_ms bigint,
                                                   p_at bigint, p_n bigint)
RETURNS void
LANGUAGE sql VOLATILE
AS $$
    INSERT INTO pgqueue.kind_lease AS k (stream, kind, bucket, until, n)
    SELECT p_stream, p_kind, p_at / s.size * s.size, p_at / s.size * s.size + s.size, p_n
    FROM (SELECT pgqueue.rate_bucket_ms(p_rate_ms) AS size) s
    ON CONFLICT (stream, kind, bucket) DO UPDATE
    SET n = k.n + excluded.n, until = greatest(k.until, excluded.until);
$$;

-- A kind's ready jobs in lease order that stand ahead of (p_pri, p_id) in it (priority
-- above p_pri, or equal and id below p_id; every one when p_pri is NULL), at most p_limit
-- (NULL: no limit), from their ready entries (one whose job is no longer pending is passed
-- over). Two ranges of ready_kind_idx, one after the other, so a backlog of the kind behind
-- the bound is never read (as one OR'ed filter it was: each lease read the kind's whole
-- backlog).
CREATE OR REPLACE FUNCTION pgqueue.ready_ahead(p_stream text, p_kind text, p_pri smallint,
                                               p_id bigint, p_limit int)
RETURNS TABLE (id bigint, priority smallint, concurrency_key text)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    -- PL/pgSQL: Citus plans no SQL function's parameterised query over distributed tables
    RETURN QUERY
    SELECT c.id, c.priority, j.concurrency_key FROM (
        (SELECT r.job_id AS id, r.priority FROM pgqueue.ready r
         WHERE r.stream = p_stream AND r.kind = p_kind
           AND r.priority > coalesce(p_pri::int, -32769)
         ORDER BY r.kind, r.priority DESC, r.job_id
         LIMIT p_limit)
        UNION ALL
        (SELECT r.job_id, r.priority FROM pgqueue.ready r
         WHERE r.stream = p_stream AND r.kind = p_kind
           AND r.priority = p_pri AND r.job_id < p_id
         ORDER BY r.kind, r.priority DESC, r.job_id
         LIMIT p_limit)) c
    -- (the stream named on job too: on Citus a join of the two by id alone is not one node's)
    JOIN pgqueue.job j ON j.stream = p_stream AND j.id = c.id AND j.state = 'pending'
    ORDER BY c.priority DESC, c.id;
END
$$;

-- The jobs a lease of a stream with limited kinds takes (pgqueue.lease): up to p_limit by
-- priority DESC then id. Candidates are chosen without locks and only the chosen rows are
-- locked (SKIP LOCKED; a few rounds when concurrent leases took some), so a lease locks no
-- more than it leases. Jobs without a kind and each kind without a limit (a skip scan of
-- ready_kind_idx: one probe per ready kind) give their first candidates. A limited kind
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
    p_per_key int[], p_start int, p_lane text[], p_not_lane text[],
    OUT ids bigint[], OUT rated bigint[]
)
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off  -- plans that do not depend on statistics (see pgqueue.lease)
SET enable_bitmapscan = off
SET enable_sort = off
SET enable_mergejoin = off
SET enable_hashjoin = off
SET jit = off  -- (see pgqueue.lease)
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
        -- jobs of kinds without a limit (and without a kind): their ready entries read in
        -- lease order passing over limited kinds' jobs, at most v_cap of them; only when a
        -- limited backlog that long stands ahead is each such kind taken apart (a skip scan
        -- of ready_kind_idx: one probe per ready kind, then its first candidates). The skip
        -- scan is not the first resort: it steps over the entries of every kind taken since
        -- the partition was last emptied. (An entry whose job is no longer pending is a
        -- candidate the lock step below passes over.)
        -- (the v_cap-th job read comes back too, whatever its kind: it says the scan stopped
        -- at the cap, not at the end of the jobs)
        SELECT coalesce(array_agg(c.id ORDER BY c.n) FILTER (WHERE c.free), '{}'),
               coalesce(array_agg(c.priority ORDER BY c.n) FILTER (WHERE c.free), '{}'),
               coalesce(max(c.n), 0)
        INTO v_free_ids, v_free_pris, v_scanned
        FROM (SELECT c.id, c.priority, c.n, c.kind IS NULL OR c.kind <> ALL(p_kinds) AS free
              FROM (SELECT r.job_id AS id, r.priority, r.kind,
                           row_number() OVER (ORDER BY r.priority DESC, r.job_id) AS n
                    FROM pgqueue.ready r
                    WHERE r.stream = p_stream AND r.job_id <> ALL(v_tried)
                      AND pgqueue.in_lane(r.kind, p_lane, p_not_lane)
                    ORDER BY r.priority DESC, r.job_id
                    LIMIT v_cap) c
              WHERE c.kind IS NULL OR c.kind <> ALL(p_kinds) OR c.n = v_cap
              LIMIT p_limit + 1) c;  -- stops the scan at p_limit found (and one more)
        v_free_ids := v_free_ids[1:p_limit];
        v_free_pris := v_free_pris[1:p_limit];
        IF cardinality(v_free_ids) < p_limit AND v_scanned >= v_cap THEN
            SELECT coalesce(array_agg(c.id), '{}'), coalesce(array_agg(c.priority), '{}')
            INTO v_free_ids, v_free_pris
            FROM (SELECT r.job_id AS id, r.priority FROM pgqueue.ready r
                  WHERE r.stream = p_stream AND r.kind IS NULL AND r.job_id <> ALL(v_tried)
                    AND pgqueue.in_lane(NULL, p_lane, p_not_lane)
                  ORDER BY r.kind, r.priority DESC, r.job_id  -- kind first: the kind index's order
                  LIMIT p_limit) c;
            FOR v_kind IN
                WITH RECURSIVE ready AS (
                    (SELECT e.kind FROM pgqueue.ready e
                     WHERE e.stream = p_stream AND e.kind IS NOT NULL
                     ORDER BY e.kind LIMIT 1)
                    UNION ALL
                    SELECT (SELECT e.kind FROM pgqueue.ready e
                            WHERE e.stream = p_stream AND e.kind > r.kind
                            ORDER BY e.kind LIMIT 1)
                    FROM ready r WHERE r.kind IS NOT NULL)
                SELECT r.kind FROM ready r WHERE r.kind IS NOT NULL AND r.kind <> ALL(p_kinds)
                  AND pgqueue.in_lane(r.kind, p_lane, p_not_lane)
            LOOP
                SELECT v_free_ids || coalesce(array_agg(c.id), '{}'),
                       v_free_pris || coalesce(array_agg(c.priority), '{}')
                INTO v_free_ids, v_free_pris
                FROM (SELECT r.job_id AS id, r.priority FROM pgqueue.ready r
                      WHERE r.stream = p_stream AND r.kind = v_kind AND r.job_id <> ALL(v_tried)
                      ORDER BY r.kind, r.priority DESC, r.job_id
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
            CONTINUE WHEN NOT pgqueue.in_lane(p_kinds[i], p_lane, p_not_lane);  -- not asked for
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
        -- statistics the planner took a pending index, skip-scanning it per id)
        SELECT coalesce(array_agg(l.id), '{}'), coalesce(array_agg(l.priority), '{}')
        INTO v_locked, v_locked_pris
        FROM (SELECT j.id, j.priority FROM pgqueue.job j
              WHERE j.stream = p_stream AND j.id = ANY(v_chosen) AND j.state || '' = 'pending'
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
                               JOIN pgqueue.job j ON j.stream = p_stream AND j.id = o.id
                               WHERE o.id = ANY(rated)
                                 AND (o.n <= p_start OR j.unstarted_reclaims > 0));
        END IF;
        PERFORM pgqueue.rate_window_add(p_stream, p_kinds[c.ki], p_rate_ms[c.ki], v_ats[c.ki], c.n)
        FROM (SELECT t.ki, count(*) AS n FROM unnest(v_lim_ids, v_lim_kinds) AS t(id, ki)
              WHERE t.id = ANY(v_counted) GROUP BY t.ki) c;
    END IF;
END
$$;

-- Worker: the handler is about to start a job of a rate-limited kind that was leased ahead
-- (pgqueue.lease said rate_at_start): count it in the kind's window now, under the kind's
-- lock, and say it started (op Renew, started true), so the kind's handler starts keep to its
-- rate. When the window is full the job goes back, costing nothing, until the window has room
-- (op ReturnLease; scheduled at that time), and a job whose cancel was requested ends as
-- cancelled. Returns 'started', 'deferred' or 'cancelled'; NULL when the lease is not current.
CREATE OR REPLACE FUNCTION pgqueue.start_rated(p_job_id bigint, p_lease_id bigint,
                                               p_stream text DEFAULT pgqueue.each_stream()) RETURNS text
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
            WHERE k.stream = j.stream AND k.kind = j.kind AND k.bucket >= 0;  -- (-1: a lock)
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

-- queries -----------------------------------------------------------------------------------

-- name: lease_jobs
-- Lease up to %(limit)s jobs of a stream by priority DESC then id (due scheduled jobs are
-- promoted to pending first), after (%(after_priority)s, %(after_id)s) when given (where the
-- caller's last lease ended); one new lease id each. Its columns are shapes.LEASE (read by
-- name: run.fetch_shaped).
SELECT id, lease_id, stream, kind, payload, priority, attempts, max_attempts, enqueued_at,
       lease_expires_at, lease_started, last_completed_step, cursor_step, cursor,
       checkpoint_updated_at, schema_version, step_set_hash,
       nullif(crashes_by_step, '{}'::jsonb) AS crashes_by_step,  -- nothing to decode when none
       not_before,  -- when it became due (the worker's wait histogram)
       trace_context,  -- the producer's, for the consumer span (pgqueue/telemetry/tracing.py)
       rate_at_start,  -- leased ahead, of a rate-limited kind: pgqueue.start_rated first
       timeout_ms  -- the job's own time limit, set at enqueue (the worker enforces it)
FROM pgqueue.lease(%(stream)s, %(limit)s::int, %(visibility_ms)s::bigint, %(worker_node)s::int,
                   %(worker_instance)s::int, %(request)s::uuid, %(resent)s::boolean,
                   %(start)s::int, %(after_priority)s::smallint, %(after_id)s::bigint,
                   %(kinds)s::text[], %(not_kinds)s::text[])

-- name: renew_leases
-- Extend many leases and write their checkpoints in one UPDATE, saying which handlers have
-- started; returns those still current, and whether a cancel of the job was requested.
SELECT job_id, lease_id, expires_at, cancel_requested
FROM pgqueue.renew(%(job_ids)b::bigint[], %(lease_ids)b::bigint[], %(visibility_ms)b::bigint[],
                   %(checkpoints)b::jsonb[], %(started)b::boolean[], %(stream)s::text)

-- name: cancel_requested
-- Of these leases (job id, lease id), the current ones whose job an operator asked to cancel:
-- what a NOTIFY pgqueue_cancel makes a worker look up. A read by primary key that writes no op:
-- a notification any login may send costs this, not a renewal.
SELECT t.lease_id
FROM unnest(%(job_ids)b::bigint[], %(lease_ids)b::bigint[]) AS t(job_id, lease_id)
JOIN pgqueue.job j ON j.id = t.job_id AND j.lease_id = t.lease_id
WHERE j.stream = %(stream)s::text AND j.state = 'leased' COLLATE "POSIX"  -- by id: job's indexes
  AND j.cancel_requested_at IS NOT NULL

-- name: start_rated
-- Count a leased-ahead job of a rate-limited kind in its window as its handler starts:
-- 'started', 'deferred' (window full: back to the queue), 'cancelled'; NULL: lease lost.
SELECT pgqueue.start_rated(%(job_id)s::bigint, %(lease_id)s::bigint, %(stream)s::text)
