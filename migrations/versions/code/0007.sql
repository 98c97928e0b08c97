-- GENERATED FILE: do not edit. What pgqueue schema revision 0007 changed in the functions and
-- views, object by object, against the code of revision 0006 (frozen by
-- `python -m pgqueue_migrations.new` when revision 0008 was started). Each entry is headed
-- by the object it defines and the one it follows, then its whole text (or `removed`); the
-- code of 0007 is every frozen file up to it applied in order (migrations/frozen.py). Loaded
-- when a database is upgraded to 0007 or downgraded to it; the current definitions live in
-- pgqueue/sql/.

-- @@ function pgqueue.ready_ahead
-- @@ after function pgqueue.rate_window_add

-- A kind's ready jobs in lease order that stand ahead of (p_pri, p_id) in it (priority
-- above p_pri, or equal and id below p_id; every one when p_pri is NULL), at most p_limit
-- (NULL: no limit). Two index ranges of job_pending_kind_idx, one after the other, so a
-- backlog of the kind behind the bound is never read (as one OR'ed filter it was: each lease
-- read the kind's whole backlog).
CREATE OR REPLACE FUNCTION pgqueue.ready_ahead(p_stream text, p_kind text, p_pri smallint,
                                               p_id bigint, p_limit int)
RETURNS TABLE (id bigint, priority smallint, concurrency_key text)
LANGUAGE sql STABLE
AS $$
    (SELECT j.id, j.priority, j.concurrency_key FROM pgqueue.job j
     WHERE j.stream = p_stream AND j.state = 'pending' AND j.kind = p_kind
       AND j.priority > coalesce(p_pri::int, -32769)
     ORDER BY j.kind, j.priority DESC, j.id
     LIMIT p_limit)
    UNION ALL
    (SELECT j.id, j.priority, j.concurrency_key FROM pgqueue.job j
     WHERE j.stream = p_stream AND j.state = 'pending' AND j.kind = p_kind
       AND j.priority = p_pri AND j.id < p_id
     ORDER BY j.kind, j.priority DESC, j.id
     LIMIT p_limit)
$$;
-- @@ function pgqueue.pick_within_limits
-- @@ after function pgqueue.ready_ahead

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
                                                      p_stream text DEFAULT NULL,
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
            outcome := 'refused';
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
                WHEN 'cancel' THEN v_cancel := pgqueue.cancel(v_id);
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
    FROM pgqueue.apply_verb_to_jobs(p_verb, p_job_ids, p_to_step, p_stream, p_state, p_kind) a
    WHERE a.outcome = 'refused'
$$;
-- @@ GRANT EXECUTE ON FUNCTION pgqueue.release, pgqueue.rewind, pgqueue.restart, pgqueue.skip_step, pgque
-- @@ after GRANT EXECUTE ON FUNCTION pgqueue.lease, pgqueue.renew, pgqueue.start_rated, pgqueue.ack, pgqueue.na

-- operator
GRANT EXECUTE ON FUNCTION pgqueue.release, pgqueue.rewind, pgqueue.restart, pgqueue.skip_step,
    pgqueue.accept_step_set, pgqueue.cancel, pgqueue.requeue_dead_letter, pgqueue.apply_to_jobs,
    pgqueue.apply_verb_to_jobs,
    pgqueue.configure_stream, pgqueue.upsert_schedule, pgqueue.remove_schedule,
    pgqueue.lock_schedule, pgqueue.prune_op_log
    TO pgqueue_operator;
