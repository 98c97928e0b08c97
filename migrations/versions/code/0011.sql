-- GENERATED FILE: do not edit. What pgqueue schema revision 0011 changed in the functions and
-- views, object by object, against the code of revision 0010 (frozen by
-- `python -m pgqueue_migrations.new` when revision 0012 was started). Each entry is headed
-- by the object it defines and the one it follows, then its whole text (or `removed`); the
-- code of 0011 is every frozen file up to it applied in order (migrations/frozen.py). Loaded
-- when a database is upgraded to 0011 or downgraded to it; the current definitions live in
-- pgqueue/sql/.

-- @@ function pgqueue.ring_slot
-- @@ after (start)
-- core.sql: functions
-- The partition a row of a ring written now goes to (pgqueue.ready, pgqueue.job_count_delta):
-- the 4-second period it is written in, on a ring of 8 (32 seconds around). Past periods'
-- partitions are emptied whole, by TRUNCATE (pgqueue.recycle_ready, pgqueue.fold_job_counts):
-- nothing left for vacuum, which a held horizon keeps from removing anything. Not every
-- second: a TRUNCATE makes every session plan its statements on the ring again, and leases
-- wait behind its lock.
CREATE OR REPLACE FUNCTION pgqueue.ring_slot() RETURNS smallint
LANGUAGE sql VOLATILE PARALLEL SAFE
AS $$ SELECT (floor(extract(epoch FROM clock_timestamp()) / 4)::bigint % 8)::smallint $$;
-- @@ function pgqueue.ring_past_slots
-- @@ after function pgqueue.ring_slot

-- The ring's partitions that may be emptied now: all but the last period's, this one's and
-- the next's (rows are still being written to those), in slot order.
CREATE OR REPLACE FUNCTION pgqueue.ring_past_slots() RETURNS smallint[]
LANGUAGE sql VOLATILE
AS $$
    SELECT array_agg(s::smallint ORDER BY s) FROM generate_series(0, 7) s, pgqueue.ring_slot() n
    WHERE (s - n + 8) % 8 NOT IN (0, 1, 7)
$$;
-- @@ function pgqueue.lock_for_truncate
-- @@ after function pgqueue.ring_past_slots

-- Lock a ring's past partitions for truncation (pgqueue.recycle_ready, pgqueue.fold_job_counts)
-- in one request, never queueing for it: NOWAIT, tried p_tries times 2 ms apart. A queued
-- ACCESS EXCLUSIVE request would make every lease (which reads all the ring's partitions)
-- wait behind it. False: another session held one of them each time (they are left for the
-- next pass). Held to the end of the transaction.
CREATE OR REPLACE FUNCTION pgqueue.lock_for_truncate(p_parts regclass[], p_tries int)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_list text := (SELECT string_agg(format('%s', p), ', ') FROM unnest(p_parts) p);
BEGIN
    FOR i IN 1 .. p_tries LOOP
        BEGIN
            EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE NOWAIT', v_list);
            RETURN true;
        EXCEPTION WHEN lock_not_available THEN
            PERFORM pg_sleep(0.002);
        END;
    END LOOP;
    RETURN false;
END
$$;
-- @@ function pgqueue.error_summary
-- @@ after function pgqueue.lock_for_truncate

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
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO pgqueue.job_count_delta (slot, stream, state, delta)
        SELECT pgqueue.ring_slot(), stream, state, count(*) FROM new_rows GROUP BY stream, state;
        INSERT INTO pgqueue.ready (slot, stream, priority, job_id, kind)
        SELECT pgqueue.ring_slot(), n.stream, n.priority, n.id, n.kind
        FROM new_rows n WHERE n.state = 'pending';
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO pgqueue.job_count_delta (slot, stream, state, delta)
        SELECT pgqueue.ring_slot(), stream, state, -count(*) FROM old_rows GROUP BY stream, state;
        IF EXISTS (SELECT 1 FROM old_rows o WHERE o.state = 'pending') THEN
            PERFORM pgqueue.ready_drop(array_agg(o.stream), array_agg(o.priority), array_agg(o.id))
            FROM old_rows o WHERE o.state = 'pending';
        END IF;
    ELSE
        INSERT INTO pgqueue.job_count_delta (slot, stream, state, delta)
        SELECT pgqueue.ring_slot(), stream, state, sum(d) FROM (
            SELECT stream, state, 1 AS d FROM new_rows
            UNION ALL SELECT stream, state, -1 FROM old_rows) c
        GROUP BY stream, state HAVING sum(d) <> 0;
        IF EXISTS (SELECT 1 FROM old_rows o WHERE o.state = 'pending')
           AND current_setting('pgqueue.ready_taken', true) IS DISTINCT FROM 'on' THEN
            PERFORM pgqueue.ready_drop(array_agg(o.stream), array_agg(o.priority), array_agg(o.id))
            FROM old_rows o JOIN new_rows n ON n.id = o.id
            WHERE o.state = 'pending' AND (n.state <> 'pending' OR n.priority <> o.priority
                                           OR n.kind IS DISTINCT FROM o.kind);
        END IF;
        IF EXISTS (SELECT 1 FROM new_rows n WHERE n.state = 'pending') THEN
            INSERT INTO pgqueue.ready (slot, stream, priority, job_id, kind)
            SELECT pgqueue.ring_slot(), n.stream, n.priority, n.id, n.kind
            FROM new_rows n JOIN old_rows o ON o.id = n.id
            WHERE n.state = 'pending' AND (o.state <> 'pending' OR n.priority <> o.priority
                                           OR n.kind IS DISTINCT FROM o.kind);
        END IF;
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
        INSERT INTO pgqueue.job_count_delta (slot, stream, state, delta)
        SELECT pgqueue.ring_slot(), stream, 'dead', count(*) FROM new_rows GROUP BY stream;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO pgqueue.job_count_delta (slot, stream, state, delta)
        SELECT pgqueue.ring_slot(), stream, 'dead', -count(*) FROM old_rows GROUP BY stream;
    END IF;
    RETURN NULL;
END
$$;
-- @@ function pgqueue.fold_job_counts
-- @@ after enable trigger dead_letter_count_delete

-- Add the deltas of past periods into job_count and truncate their partitions (the last
-- period's, this one's and the next's are still being written), all in one lock request
-- (pgqueue.lock_for_truncate, never queued for) and one TRUNCATE; when another session holds
-- one of them (a fold running elsewhere, a count being read) they are left for the next call.
-- Counts read job_count plus every delta left, so they are exact whenever this runs. Returns
-- how many delta rows it folded.
CREATE OR REPLACE FUNCTION pgqueue.fold_job_counts() RETURNS bigint
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    v_slots smallint[];
    v_parts regclass[];
    v_n bigint;
BEGIN
    v_slots := ARRAY(SELECT s FROM unnest(pgqueue.ring_past_slots()) s
                     WHERE pg_relation_size(format('pgqueue.job_count_delta_%s', s)::regclass) > 0
                     ORDER BY s);
    v_parts := ARRAY(SELECT format('pgqueue.job_count_delta_%s', s)::regclass
                     FROM unnest(v_slots) s);
    IF cardinality(v_parts) = 0 OR NOT pgqueue.lock_for_truncate(v_parts, 5) THEN
        RETURN 0;
    END IF;
    WITH d AS (SELECT c.stream, c.state, c.delta FROM pgqueue.job_count_delta c
               WHERE c.slot = ANY(v_slots)),
    folded AS (
        INSERT INTO pgqueue.job_count AS c (stream, state, n)
        SELECT d.stream, d.state, sum(d.delta) FROM d GROUP BY d.stream, d.state
        ORDER BY d.stream, d.state  -- one lock order: concurrent folds never deadlock
        ON CONFLICT (stream, state) DO UPDATE SET n = c.n + EXCLUDED.n
        RETURNING 1)
    SELECT count(*) INTO v_n FROM d;
    EXECUTE 'TRUNCATE ' || (SELECT string_agg(format('%s', p), ', ') FROM unnest(v_parts) p);
    RETURN v_n;
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
CREATE OR REPLACE FUNCTION pgqueue.ready_drop(p_streams text[], p_priorities smallint[],
                                              p_ids bigint[])
RETURNS void
LANGUAGE sql VOLATILE
AS $$
    WITH gone AS (
        SELECT r.slot, r.ctid AS at FROM pgqueue.ready r
        JOIN unnest(p_streams, p_priorities, p_ids) AS d(stream, priority, id)
          ON r.stream = d.stream AND r.priority = d.priority AND r.job_id = d.id
        FOR UPDATE OF r SKIP LOCKED)
    DELETE FROM pgqueue.ready r USING gone g WHERE r.slot = g.slot AND r.ctid = g.at
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
            DELETE FROM pgqueue.ready r USING taken t
            WHERE r.slot = t.slot AND r.ctid = t.at
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
    RETURN QUERY
    WITH ranked AS (
        SELECT t.id, t.n FROM unnest(v_ids) WITH ORDINALITY AS t(id, n)
    ), leased AS (
        UPDATE pgqueue.job j
        SET state = 'leased', lease_id = nextval('pgqueue.lease_id_seq'),
            worker_node = p_worker_node, worker_instance = p_worker_instance,
            lease_expires_at = v_exp,
            lease_started = (p_start IS NULL OR r.n <= p_start OR j.unstarted_reclaims > 0)
        FROM ranked r WHERE j.id = ANY(v_ids) AND j.id = r.id
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
    )
    SELECT l.* FROM leased l ORDER BY l.priority DESC, l.id;
END
$$;
-- @@ function pgqueue.ready_ahead
-- @@ after function pgqueue.rate_window_add

-- A kind's ready jobs in lease order that stand ahead of (p_pri, p_id) in it (priority
-- above p_pri, or equal and id below p_id; every one when p_pri is NULL), at most p_limit
-- (NULL: no limit), from their ready entries (one whose job is no longer pending is passed
-- over). Two ranges of ready_kind_idx, one after the other, so a backlog of the kind behind
-- the bound is never read (as one OR'ed filter it was: each lease read the kind's whole
-- backlog).
CREATE OR REPLACE FUNCTION pgqueue.ready_ahead(p_stream text, p_kind text, p_pri smallint,
                                               p_id bigint, p_limit int)
RETURNS TABLE (id bigint, priority smallint, concurrency_key text)
LANGUAGE sql STABLE
AS $$
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
    JOIN pgqueue.job j ON j.id = c.id AND j.state = 'pending'
    ORDER BY c.priority DESC, c.id
$$;
-- @@ function pgqueue.pick_within_limits
-- @@ after function pgqueue.ready_ahead

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
    p_per_key int[], p_start int, OUT ids bigint[], OUT rated bigint[]
)
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off  -- plans that do not depend on statistics (see pgqueue.lease)
SET enable_bitmapscan = off
SET enable_sort = off
SET enable_mergejoin = off
SET enable_hashjoin = off
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
-- @@ function pgqueue.recycle_ready
-- @@ after function pgqueue.release_maintenance

-- Empty the partitions of pgqueue.ready that past periods filled once they hold no ready
-- job, by TRUNCATE: their dead entries are gone at once, whatever holds the vacuum horizon
-- back (a vacuum could remove none of them then). The partitions of the last period, this
-- one and the next are left alone (entries still being written). A partition still holding
-- ready jobs is emptied too when they are few (at most 1,000): their entries move to this
-- period's partition first, in the same transaction; a backlog larger than that drains
-- through leases. All of them in one lock request and one TRUNCATE; the lock is never queued
-- for (pgqueue.lock_for_truncate, NOWAIT tried for 50 ms: every lease reads all the ring's
-- partitions and would wait behind a queued request); when it cannot be had they are left
-- for the next pass.
-- Returns how many partitions were emptied. A worker's (maintenance passes): SECURITY
-- DEFINER for the TRUNCATE, which needs the owner.
CREATE OR REPLACE FUNCTION pgqueue.recycle_ready() RETURNS int
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    v_now smallint := pgqueue.ring_slot();
    v_part regclass;
    v_parts regclass[] := '{}';
    v_slot smallint;
    v_live int;
BEGIN
    FOREACH v_slot IN ARRAY pgqueue.ring_past_slots() LOOP
        v_part := format('pgqueue.ready_%s', v_slot)::regclass;
        CONTINUE WHEN pg_relation_size(v_part) = 0;  -- empty since its last truncation
        EXECUTE format('SELECT count(*) FROM (SELECT 1 FROM %s r JOIN pgqueue.job j '
                       'ON j.id = r.job_id AND j.state = ''pending'' LIMIT 1001) c', v_part)
        INTO v_live;
        CONTINUE WHEN v_live > 1000;
        v_parts := v_parts || v_part;
    END LOOP;
    IF cardinality(v_parts) = 0 OR NOT pgqueue.lock_for_truncate(v_parts, 25) THEN
        RETURN 0;
    END IF;
    -- nobody reads or writes these partitions now: their ready jobs' entries move, the rest
    -- (taken, or no longer pending) go with them
    FOREACH v_part IN ARRAY v_parts LOOP
        EXECUTE format('INSERT INTO pgqueue.ready (slot, stream, priority, job_id, kind) '
                       'SELECT DISTINCT ON (r.job_id) $1, r.stream, r.priority, r.job_id, r.kind '
                       'FROM %s r JOIN pgqueue.job j ON j.id = r.job_id '
                       'AND j.state = ''pending'' AND j.priority = r.priority', v_part)
        USING v_now;
    END LOOP;
    EXECUTE 'TRUNCATE ' || (SELECT string_agg(format('%s', p), ', ') FROM unnest(v_parts) p);
    RETURN cardinality(v_parts);
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
    pgqueue.release_maintenance, pgqueue.recycle_ready
    TO pgqueue_worker;
