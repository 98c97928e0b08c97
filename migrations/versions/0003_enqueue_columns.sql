-- 0003: the Enqueue op's job fields are typed columns of the op row; pruning the op log reads
-- only the prefix it deletes (see the end of this file).
--
-- Building a 13-key jsonb body per enqueued job was the largest single cost of a batched
-- enqueue (measured, 1,000 jobs in one statement: job + op rows with the body 9.3 ms, with the
-- fields as columns 5.8 ms; jsonb_build_object costs about 0.15 us per key and row whatever the
-- value). An Enqueue op now stores the job's own fields (kind, payload, priority, not_before,
-- dedup_key, max_attempts, schema_version) in columns of the same names, and in its body only
-- what its whole call shares (enqueued_at_ms, attempts), built once per call, as Lease and Ack
-- already do. enqueue also takes a NULL array for an optional column (every job NULL there).
-- The op still carries every field: pgqueue.op_body(op_log) gives the whole body,
-- exactly as 0002 stored it, and is what apply, replay and the CLI read. Enqueue ops written
-- before 0003 keep their full body and no columns; op_body returns them unchanged.
--
-- Upgrade logical replicas before their leader: a subscriber must have every published column.

ALTER TABLE pgqueue.op_log
    ADD COLUMN kind           text,
    ADD COLUMN payload        bytea,
    ADD COLUMN priority       smallint,
    ADD COLUMN not_before     timestamptz,
    ADD COLUMN dedup_key      bytea,
    ADD COLUMN max_attempts   int,
    ADD COLUMN schema_version int;
COMMENT ON COLUMN pgqueue.op_log.payload IS
    'Enqueue ops (0003 on): the job''s payload; kind .. schema_version likewise. NULL for other ops; pgqueue.op_body(op_log) gives the whole body.';

-- The whole body of an op: an Enqueue op's columns put back as the keys 0002 stored (job_id,
-- stream, kind, payload, priority, state, enqueued_at_ms, not_before_ms, dedup_key, attempts,
-- max_attempts, schema_version, next_job_id); any other op's body as stored. The state is the
-- one enqueue chose: scheduled when not_before is later than enqueued_at.
CREATE FUNCTION pgqueue.op_body(o pgqueue.op_log) RETURNS jsonb
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

DROP FUNCTION pgqueue.enqueue_body(pgqueue.job);

-- No query reads op_log by lsn any more (replica_status tests o.lsn < restart_lsn inside a
-- NOT (... OR ...) over the whole log, which a BRIN index cannot serve), yet every op paid for
-- it: ~0.2 ms per 1,000 enqueued jobs.
DROP INDEX pgqueue.op_log_lsn_idx;

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

DROP FUNCTION pgqueue.ingest_op(bigint, text, text, bigint, bigint, jsonb, xid8, timestamptz, pg_lsn);

-- Ingest one op from another database's log (a whole op_log row): record it and apply it,
-- unless this database already holds that seq (delivering an op twice changes nothing) or its
-- transaction is already in a seeded state. Ops must arrive in the source's commit order; per
-- job that is seq order, because a transition holds the job's row lock when it appends its op.
CREATE FUNCTION pgqueue.ingest_op(o pgqueue.op_log) RETURNS boolean
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


-- ---------------------------------------------------------------------------------------------
-- Pruning reads only the prefix it deletes
-- ---------------------------------------------------------------------------------------------

DROP FUNCTION pgqueue.prune_op_log(interval, interval, int, interval);
DROP FUNCTION pgqueue.replica_status(interval, interval);

-- Where each registered replica stands, in ops and seconds behind this leader. With p_upto,
-- only the ops up to that seq are examined (an index range, not the whole log): applied_seq is
-- then how far into that prefix the replica is proven to have applied, and the lag figures
-- count only the prefix. pgqueue.prune_op_log uses it for the prefix it may delete.
CREATE FUNCTION pgqueue.replica_status(p_stale_after interval DEFAULT interval '1 day',
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

-- Delete the oldest ops: the prefix of the log, in seq order, whose ops are older than p_keep,
-- were written by a transaction that has finished, and are applied by every replica that is
-- not stale (replica_status's rules, which for a logical replica wait up to p_wait to be
-- exact); at most p_limit. Only that prefix and the op after it are read: a maintenance pass
-- with nothing old to prune costs one index probe (0002 scanned the whole log on every pass:
-- 47 ms at 450,000 ops, every second, growing with the week of ops it keeps). An old op
-- behind a younger one (a long transaction's) waits until that one is old too, so every op up
-- to pruned_through is gone (but for an op of a transaction that was still open when it was
-- pruned past, which takes a transaction older than p_keep; 0002 had the same gap).
CREATE FUNCTION pgqueue.prune_op_log(p_keep interval,
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
