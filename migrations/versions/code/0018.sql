-- GENERATED FILE: do not edit. What pgqueue schema revision 0018 changed in the functions and
-- views, object by object, against the code of revision 0017 (frozen by
-- `python -m pgqueue_migrations.new` when revision 0019 was started). Each entry is headed
-- by the object it defines and the one it follows, then its whole text (or `removed`); the
-- code of 0018 is every frozen file up to it applied in order (migrations/frozen.py). Loaded
-- when a database is upgraded to 0018 or downgraded to it; the current definitions live in
-- pgqueue/sql/.

-- @@ function pgqueue.finish_cancel
-- @@ after function pgqueue.apply_job_state

-- A leased job whose cancel was requested (pgqueue.cancel) ends as cancelled: deleted, its op
-- Cancel (was leased, by whom, and the error when a failure ended it). Every end of such a
-- lease but an ack comes here (the handler stopping, a nack, a reclaim, a give-back,
-- parking), so a cancelled job never runs again.
CREATE OR REPLACE FUNCTION pgqueue.finish_cancel(j pgqueue.job, p_by text, p_error text DEFAULT NULL,
                                                 p_summary text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    -- a variable, not j.stream in the statements: Citus runs a call delegated to a stream's
    -- node only with statements that name the stream as a value it can compare
    v_stream text := j.stream;
BEGIN
    DELETE FROM pgqueue.job WHERE stream = v_stream AND id = j.id;
    INSERT INTO pgqueue.op_log (stream, op, job_id, lease_id, body)
    VALUES (v_stream, 'Cancel', j.id, j.lease_id, jsonb_strip_nulls(jsonb_build_object(
        'job_id', j.id, 'was', 'leased', 'by', p_by,
        'requested_at_ms', pgqueue.to_ms(j.cancel_requested_at), 'error', p_error,
        'error_summary', p_summary)));
END
$$;
-- @@ function pgqueue.is_dedup_index
-- @@ after function pgqueue.finish_cancel

-- Whether a unique violation's constraint is the live jobs' dedup key index: job_dedup_idx,
-- or on a Citus node one of its shards' (job_dedup_idx_102010).
CREATE OR REPLACE FUNCTION pgqueue.is_dedup_index(p_name text) RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$ SELECT coalesce(p_name = 'job_dedup_idx' OR p_name ~ '^job_dedup_idx_[0-9]+$', false) $$;
-- @@ function pgqueue.each_stream
-- @@ after function pgqueue.is_dedup_index

-- The default of a transition's stream argument, p_stream: NULL, each job's own stream, looked
-- up. On a Citus cluster a call must name its stream instead, and one that does not is
-- refused, saying so: only a call naming the stream runs on the node holding it, where the
-- stream's ids and op seqs come from; run on the coordinator, its op would take the
-- coordinator's seq, out of order among the stream's ops. A VOLATILE function rather than a
-- NULL literal: Citus (14.0.1) plans a call of a function distributed on p_stream by hashing
-- the argument's constant, and a NULL constant crashes the coordinator's backend; a volatile
-- default is never a constant. (A NULL passed explicitly still crashes it: the client never
-- passes one.)
CREATE OR REPLACE FUNCTION pgqueue.each_stream() RETURNS text
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM pgqueue.layout WHERE name = 'citus') THEN
        RAISE EXCEPTION 'on a Citus cluster a call about jobs names their stream: pass it as p_stream'
            USING ERRCODE = '22023',
                  HINT = 'e.g. SELECT * FROM pgqueue.release(42, p_stream => ''billing''); the stream of job 42 is SELECT pgqueue.stream_of(42)';
    END IF;
    RETURN NULL;
END
$$;
-- @@ function pgqueue.operator_job
-- @@ after function pgqueue.leased_job

-- Load a job for an operator, under lock; PQ404 when it is not a live job, PQ422 when leased
-- or not in one of p_states. p_stream: the job's stream, as the client found it (on Citus the
-- verb then runs on the stream's node, and every statement there names it); NULL: looked up.
CREATE OR REPLACE FUNCTION pgqueue.operator_job(p_job_id bigint, p_action text, p_states text[],
                                                p_stream text DEFAULT NULL) RETURNS pgqueue.job
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    j pgqueue.job;
    v_stream text := coalesce(p_stream, pgqueue.stream_of(p_job_id));
BEGIN
    PERFORM pgqueue.require_leader();
    -- found by id, then locked by stream and id (on Citus a lock is taken on one node only)
    SELECT * INTO j FROM pgqueue.job WHERE stream = v_stream AND id = p_job_id FOR UPDATE;
    IF NOT FOUND THEN
        v_stream := coalesce(p_stream, pgqueue.dead_stream_of(p_job_id));
        IF EXISTS (SELECT 1 FROM pgqueue.dead_letter WHERE stream = v_stream AND id = p_job_id) THEN
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
        IF NOT pgqueue.is_dedup_index(v_index) THEN
            RAISE;
        END IF;
        -- a new statement, a new snapshot: the holder that just committed is visible
        PERFORM pgqueue.refuse_dedup(format('return job %s to pending', j.id),
                                     pgqueue.dedup_holder(j.stream, j.dedup_key, j.id));
    END;
    RETURN j;
END
$$;
-- @@ function pgqueue.op_body
-- @@ after function pgqueue.fold_job_counts

-- oplog.sql: functions
-- The whole body of an op: an Enqueue op's columns put back as the keys 0002 stored (job_id,
-- stream, kind, payload, priority, state, enqueued_at_ms, not_before_ms, dedup_key, attempts,
-- max_attempts, schema_version, next_job_id); any other op's body as stored. The state is the
-- one enqueue chose: scheduled when not_before is later than enqueued_at.
-- (o anyelement: an op_log row, or on a Citus worker a row of one of op_log's shards, which a
-- query sent to the shards reads as the shard's row type, op_log_102050: the same columns.)
CREATE OR REPLACE FUNCTION pgqueue.op_body(o anyelement) RETURNS jsonb
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
-- @@ function pgqueue.claim_due_schedules
-- @@ after function pgqueue.lock_schedule

-- Due schedules of every stream, claimed with SKIP LOCKED for the caller's transaction: a
-- concurrent scheduler skips them, and once it commits their next_run_at is in the future.
-- Due by p_now, never later than the database's clock (pgqueue.now_ms): a caller cannot
-- claim, and so lock, schedules that are not due yet.
-- p_stream: that stream's only (on Citus a lock is taken on one node only: the scheduler there
-- claims stream by stream, each in a transaction of the stream's node).
CREATE OR REPLACE FUNCTION pgqueue.claim_due_schedules(p_now timestamptz, p_limit int,
                                                       p_stream text DEFAULT NULL)
RETURNS SETOF pgqueue.schedule
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
BEGIN
    IF p_stream IS NOT NULL THEN
        RETURN QUERY
        SELECT * FROM pgqueue.schedule
        WHERE stream = p_stream AND NOT paused AND next_run_at <= least(p_now, pgqueue.now_ms())
        ORDER BY next_run_at
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED;
        RETURN;
    END IF;
    RETURN QUERY
    SELECT * FROM pgqueue.schedule
    WHERE NOT paused AND next_run_at <= least(p_now, pgqueue.now_ms())
    ORDER BY next_run_at
    LIMIT p_limit
    FOR UPDATE SKIP LOCKED;
END
$$;
-- @@ function pgqueue.lock_kind
-- @@ after function pgqueue.rate_bucket_ms

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
-- @@ function pgqueue.start_rated
-- @@ after function pgqueue.pick_within_limits

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
                                       p_stream text DEFAULT pgqueue.each_stream()) RETURNS SETOF bigint
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
                             p_stream text DEFAULT pgqueue.each_stream())
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
                                                 p_stream text DEFAULT pgqueue.each_stream())
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
                                         p_detail jsonb, p_stream text DEFAULT pgqueue.each_stream()) RETURNS text
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
                                                 p_stream text DEFAULT pgqueue.each_stream()) RETURNS boolean
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
                               p_schema_version int, p_stream text DEFAULT pgqueue.each_stream()) RETURNS boolean
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
-- @@ function pgqueue.reclaim_expired_jobs
-- @@ after function pgqueue.reclaim_job

-- Reclaim expired leases of every stream, up to p_limit per call, reading every leased job
-- (job_leased_idx): what a maintenance runner's first pass does, and one every few minutes,
-- so a lease no row of pgqueue.lease_expiry names (written by the previous release during an
-- upgrade, applied on a replica before its promotion) is reclaimed too. Under a held vacuum
-- horizon this reads the entry of every job leased since: the other passes use
-- pgqueue.reclaim_due_jobs. The expiry is re-checked under the row lock, so a renewal that
-- commits first wins (pgqueue.reclaim_job). Returns a row per job reclaimed.
-- p_stream: only that stream's (on Citus the call runs on the node holding it: maintenance
-- there calls it for each stream that has expired leases, pgqueue.streams_to_reclaim).
CREATE OR REPLACE FUNCTION pgqueue.reclaim_expired_jobs(p_limit int DEFAULT 1000,
                                                        p_stream text DEFAULT pgqueue.each_stream())
RETURNS TABLE (job_id bigint, stream text, kind text, state text, step text, crashes int)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := pgqueue.now_ms();
    j     pgqueue.job;
BEGIN
    PERFORM pgqueue.require_leader();
    -- one stream's (Citus routes a statement to one node by a plain equality on stream only,
    -- not by "p_stream IS NULL OR ..."), else every stream's
    IF p_stream IS NOT NULL THEN
        FOR j IN
            SELECT * FROM pgqueue.job
            WHERE stream = p_stream AND state = 'leased' AND lease_expires_at < v_now
            ORDER BY id
            LIMIT p_limit
            FOR UPDATE SKIP LOCKED
        LOOP
            RETURN QUERY SELECT * FROM pgqueue.reclaim_job(j, v_now);
        END LOOP;
        RETURN;
    END IF;
    FOR j IN
        SELECT * FROM pgqueue.job
        WHERE state = 'leased' AND lease_expires_at < v_now
        ORDER BY id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    LOOP
        RETURN QUERY SELECT * FROM pgqueue.reclaim_job(j, v_now);
    END LOOP;
END
$$;
-- @@ function pgqueue.reclaim_due_jobs
-- @@ after function pgqueue.reclaim_expired_jobs

-- Reclaim expired leases of every stream, up to p_limit per call, found through the rows of
-- pgqueue.lease_expiry that came due (what every maintenance pass but a runner's first does):
-- however many jobs were leased since the vacuum horizon was pinned, a pass reads the rows of
-- the buckets not yet emptied and one job row per job they name. A job locked by another
-- transaction is passed over (SKIP LOCKED) and found again by the next pass: its row stays
-- until reclaim is done with it (pgqueue.recycle_lease_expiry). Plans that do not depend on
-- statistics (the ring is truncated every few seconds): index scans only.
CREATE OR REPLACE FUNCTION pgqueue.reclaim_due_jobs(p_limit int DEFAULT 1000,
                                                    p_stream text DEFAULT pgqueue.each_stream())
RETURNS TABLE (job_id bigint, stream text, kind text, state text, step text, crashes int)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off
SET enable_mergejoin = off
SET enable_hashjoin = off
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := pgqueue.now_ms();
    j     pgqueue.job;
BEGIN
    PERFORM pgqueue.require_leader();
    -- one stream's (Citus routes a statement to one node by a plain equality on stream only,
    -- not by "p_stream IS NULL OR ..."), else every stream's
    IF p_stream IS NOT NULL THEN
        FOR j IN
            SELECT * FROM pgqueue.job
            WHERE stream = p_stream
              AND id = ANY(ARRAY(SELECT unnest(e.job_ids) FROM pgqueue.lease_expiry e
                                 WHERE e.stream = p_stream AND e.expires_at < v_now))
              AND state = 'leased' COLLATE "POSIX" AND lease_expires_at < v_now
            ORDER BY id
            LIMIT p_limit
            FOR UPDATE SKIP LOCKED
        LOOP
            RETURN QUERY SELECT * FROM pgqueue.reclaim_job(j, v_now);
        END LOOP;
        RETURN;
    END IF;
    FOR j IN
        SELECT * FROM pgqueue.job
        WHERE id = ANY(ARRAY(SELECT unnest(e.job_ids) FROM pgqueue.lease_expiry e
                             WHERE e.expires_at < v_now))
          AND state = 'leased' AND lease_expires_at < v_now
        ORDER BY id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    LOOP
        RETURN QUERY SELECT * FROM pgqueue.reclaim_job(j, v_now);
    END LOOP;
END
$$;
-- @@ function pgqueue.requeue_dead_letter
-- @@ after function pgqueue.reclaim_expired

-- queries -----------------------------------------------------------------------------------

-- deadletter.sql: functions
-- Return a dead letter to pending with attempts reset (checkpoint kept, so steps resume).
-- Raises PQ404 when the id is not a dead letter, PQ409 when a live job holds its dedup key.
-- p_stream: the dead letter's stream (on Citus the call runs on its node); NULL: looked up.
CREATE OR REPLACE FUNCTION pgqueue.requeue_dead_letter(p_job_id bigint, p_stream text DEFAULT pgqueue.each_stream())
RETURNS void
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    v_now  timestamptz := pgqueue.now_ms();
    d      pgqueue.dead_letter;
    v_holder bigint;
    v_index  text;
    v_stream text := coalesce(p_stream, pgqueue.dead_stream_of(p_job_id));
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
        IF NOT pgqueue.is_dedup_index(v_index) THEN
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
    j pgqueue.job := pgqueue.operator_job(p_job_id, 'release', ARRAY['quarantined', 'undecodable'], p_stream);
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
    j pgqueue.job := pgqueue.operator_job(p_job_id, 'rewind',
                                          ARRAY['pending', 'scheduled', 'quarantined', 'undecodable'], p_stream);
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
    j pgqueue.job := pgqueue.operator_job(p_job_id, 'restart',
                                          ARRAY['pending', 'scheduled', 'quarantined', 'undecodable'], p_stream);
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
                                          ARRAY['pending', 'scheduled', 'quarantined', 'undecodable'], p_stream);
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
    j pgqueue.job := pgqueue.operator_job(p_job_id, 'accept the step set of', ARRAY['undecodable'], p_stream);
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
-- @@ function pgqueue.notify_cancel
-- @@ after function pgqueue.accept_step_set

-- Tell the worker holding p_lease_id that its job's cancel was requested. Not on a Citus
-- cluster (see pgqueue.notify_ready): there the client notifies on the coordinator's session,
-- where workers listen, and a worker that missed it learns at its next renewal.
CREATE OR REPLACE FUNCTION pgqueue.notify_cancel(p_lease_id bigint) RETURNS void
LANGUAGE sql VOLATILE
AS $$ SELECT pg_notify('pgqueue_cancel', p_lease_id::text) FROM pgqueue.layout WHERE name = 'single' $$;
-- @@ function pgqueue.cancel
-- @@ after function pgqueue.notify_cancel

-- Operator: cancel a job. One that is not leased (live or dead) is removed for good at once
-- ('cancelled'). One a worker holds is asked to stop ('requested'): the request is recorded
-- once (op RequestCancel) and the worker told at once (NOTIFY pgqueue_cancel, the lease id),
-- or by its next renewal; the job then ends as cancelled when its handler stops, and also when
-- its lease ends any other way but an ack (pgqueue.finish_cancel): it never runs again. A
-- handler that finishes first is acked: the cancel came too late, as its history shows.
CREATE OR REPLACE FUNCTION pgqueue.cancel(p_job_id bigint, p_stream text DEFAULT pgqueue.each_stream()) RETURNS text
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    v_now timestamptz := pgqueue.now_ms();
    j pgqueue.job;
    v_stream text := coalesce(p_stream, pgqueue.stream_of(p_job_id));
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
                PERFORM pgqueue.notify_cancel(j.lease_id);
            END IF;
            RETURN 'requested';
        END IF;
        DELETE FROM pgqueue.job WHERE stream = j.stream AND id = p_job_id;
        INSERT INTO pgqueue.op_log (stream, op, job_id, body)
        VALUES (j.stream, 'Cancel', p_job_id, jsonb_build_object('job_id', p_job_id, 'was', j.state));
        RETURN 'cancelled';
    END IF;
    v_stream := coalesce(p_stream, pgqueue.dead_stream_of(p_job_id));
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
                                                      p_stream text DEFAULT pgqueue.each_stream(),
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
        v_stream := coalesce(p_stream, pgqueue.stream_of(v_id));
        PERFORM 1 FROM pgqueue.job j
        WHERE j.stream = v_stream AND j.id = v_id AND (p_stream IS NULL OR j.stream = p_stream)
          AND (p_state IS NULL OR j.state = p_state) AND (p_kind IS NULL OR j.kind = p_kind)
        FOR UPDATE;
        IF NOT FOUND AND (p_state IS NULL OR p_state = 'dead') THEN
            v_stream := coalesce(p_stream, pgqueue.dead_stream_of(v_id));
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
                WHEN 'requeue' THEN PERFORM pgqueue.requeue_dead_letter(v_id, v_stream);
                WHEN 'release' THEN PERFORM pgqueue.release(v_id, false, v_stream);
                WHEN 'rewind' THEN PERFORM pgqueue.rewind(v_id, p_to_step, v_stream);
                WHEN 'restart' THEN PERFORM pgqueue.restart(v_id, v_stream);
                WHEN 'skip-step' THEN PERFORM pgqueue.skip_step(v_id, v_stream);
                WHEN 'accept-step-set' THEN PERFORM pgqueue.accept_step_set(v_id, v_stream);
                WHEN 'cancel' THEN v_cancel := pgqueue.cancel(v_id, v_stream);
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
-- @@ function pgqueue.apply_to_jobs
-- @@ after function pgqueue.apply_verb_to_jobs

-- The previous release's bulk call (pgqueue.apply_verb_to_jobs without the outcome): its
-- refused jobs only (a requested cancel counts as done). Kept while releases that call it may
-- run.
CREATE OR REPLACE FUNCTION pgqueue.apply_to_jobs(p_verb text, p_job_ids bigint[],
                                                 p_to_step text DEFAULT NULL,
                                                 p_stream text DEFAULT NULL,
                                                 p_state text DEFAULT NULL,
                                                 p_kind text DEFAULT NULL)
RETURNS TABLE (job_id bigint, refused text)
LANGUAGE sql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
    SELECT a.job_id, a.refused
    -- (no stream given: each_stream's, which on Citus refuses the call, as the verbs do)
    FROM pgqueue.apply_verb_to_jobs(p_verb, p_job_ids, p_to_step,
                                    coalesce(p_stream, pgqueue.each_stream()), p_state, p_kind) a
    WHERE a.outcome = 'refused'
$$;
-- @@ GRANT EXECUTE ON FUNCTION pgqueue.to_ms, pgqueue.from_ms, pgqueue.now_ms, pgqueue.pinned_now, pgqueu
-- @@ after GRANT SELECT ON ALL TABLES IN SCHEMA pgqueue TO pgqueue_reader;
GRANT EXECUTE ON FUNCTION pgqueue.to_ms, pgqueue.from_ms, pgqueue.now_ms, pgqueue.pinned_now, pgqueue.b64,
    pgqueue.unb64, pgqueue.op_body, pgqueue.fold_job_counts, pgqueue.replica_status,
    pgqueue.error_summary, pgqueue.each_stream
    TO pgqueue_reader;
