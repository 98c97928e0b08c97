-- GENERATED FILE: do not edit. What pgqueue schema revision 0002 changed in the functions and
-- views, object by object, against the code of revision 0001 (frozen by
-- `python -m pgqueue_migrations.new` when revision 0003 was started). Each entry is headed
-- by the object it defines and the one it follows, then its whole text (or `removed`); the
-- code of 0002 is every frozen file up to it applied in order (migrations/frozen.py). Loaded
-- when a database is upgraded to 0002 or downgraded to it; the current definitions live in
-- pgqueue/sql/.

-- @@ function pgqueue.ack
-- @@ after function pgqueue.accept_step_set

CREATE OR REPLACE FUNCTION pgqueue.ack(p_job_ids bigint[], p_lease_ids bigint[])
 RETURNS SETOF bigint
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM pgqueue.require_leader();
    RETURN QUERY
    -- Rows are locked in id order first, so two statements over overlapping jobs (a batched
    -- ack and a renewal round of the same worker) wait for each other instead of deadlocking.
    WITH locked AS MATERIALIZED (
        SELECT j.id FROM pgqueue.job j
        JOIN unnest(p_job_ids, p_lease_ids) AS t(job_id, lease_id)
          ON j.id = t.job_id AND j.lease_id = t.lease_id
        WHERE j.state = 'leased'
        ORDER BY j.id
        FOR UPDATE OF j
    ), gone AS (
        DELETE FROM pgqueue.job j USING locked l WHERE j.id = l.id
        RETURNING j.id, j.lease_id, j.stream
    ), logged AS (
        INSERT INTO pgqueue.op_log (stream, op, job_id, lease_id, body)
        SELECT g.stream, 'Ack', g.id, g.lease_id, '{}'::jsonb  -- job and lease: the row's columns
        FROM gone g ORDER BY g.id
    )
    SELECT g.id FROM gone g;
END
$function$;
-- @@ function pgqueue.checkpoint_json
-- @@ after function pgqueue.check_stream

CREATE OR REPLACE FUNCTION pgqueue.checkpoint_json(j pgqueue.job)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
AS $function$
    SELECT jsonb_build_object(
        'last_completed_step', j.last_completed_step,
        'cursor_step', j.cursor_step,
        'cursor', pgqueue.b64(j.cursor),
        'updated_at_ms', pgqueue.to_ms(j.checkpoint_updated_at),
        'schema_version', j.schema_version,
        'step_set_hash', j.step_set_hash,
        'crashes_by_step', j.crashes_by_step)
$function$;
-- @@ function pgqueue.enqueue
-- @@ after function pgqueue.enable_apply_trigger

CREATE OR REPLACE FUNCTION pgqueue.enqueue(p_stream text, p_payloads bytea[], p_kinds text[], p_priorities integer[], p_delays_ms bigint[], p_not_befores timestamp with time zone[], p_dedup_keys bytea[], p_max_attempts integer[], p_schema_versions integer[])
 RETURNS SETOF bigint
 LANGUAGE plpgsql
AS $function$
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
    i          int;
BEGIN
    PERFORM pgqueue.require_leader();
    PERFORM pgqueue.check_stream(p_stream);
    IF cardinality(p_kinds) <> v_n OR cardinality(p_priorities) <> v_n
       OR cardinality(p_delays_ms) <> v_n OR cardinality(p_not_befores) <> v_n
       OR cardinality(p_dedup_keys) <> v_n OR cardinality(p_max_attempts) <> v_n
       OR cardinality(p_schema_versions) <> v_n THEN
        RAISE EXCEPTION 'enqueue: all arrays must have % elements', v_n USING ERRCODE = '22023';
    END IF;
    IF v_n = 0 THEN
        RETURN;
    END IF;
    IF cardinality(array_remove(p_dedup_keys, NULL)) = 0 THEN
        -- No dedup keys (the common batch): no conflicts to arbitrate, so a plain INSERT in
        -- input order (measured: 1,000 jobs 14.3 -> see the commit) and the ids as drawn.
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
            RETURNING *
        ), logged AS (
            INSERT INTO pgqueue.op_log (stream, op, job_id, body)
            SELECT ins.stream, 'Enqueue', ins.id, pgqueue.enqueue_body(ins::pgqueue.job)
            FROM ins ORDER BY ins.id
        )
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
            INSERT INTO pgqueue.op_log (stream, op, job_id, body)
            SELECT ins.stream, 'Enqueue', ins.id, pgqueue.enqueue_body(ins::pgqueue.job)
            FROM ins ORDER BY ins.id
            RETURNING job_id, (body ->> 'state') = 'pending' AS ready
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
$function$;
-- @@ function pgqueue.enqueue_body
-- @@ after function pgqueue.enqueue

CREATE OR REPLACE FUNCTION pgqueue.enqueue_body(j pgqueue.job)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
AS $function$
    SELECT jsonb_build_object(
        'job_id', j.id, 'stream', j.stream, 'kind', j.kind, 'payload', pgqueue.b64(j.payload),
        'priority', j.priority, 'state', j.state, 'enqueued_at_ms', pgqueue.to_ms(j.enqueued_at),
        'not_before_ms', pgqueue.to_ms(j.not_before), 'dedup_key', pgqueue.b64(j.dedup_key),
        'attempts', j.attempts, 'max_attempts', j.max_attempts,
        'schema_version', j.schema_version, 'next_job_id', j.id + 1)
$function$;
-- @@ function pgqueue.from_ms
-- @@ after function pgqueue.enqueue_one

CREATE OR REPLACE FUNCTION pgqueue.from_ms(ms bigint)
 RETURNS timestamp with time zone
 LANGUAGE sql
 STABLE PARALLEL SAFE
AS $function$ SELECT 'epoch'::timestamptz + ms * interval '1 millisecond' $function$;
-- @@ function pgqueue.ingest_op
-- @@ after function pgqueue.from_ms

CREATE OR REPLACE FUNCTION pgqueue.ingest_op(p_seq bigint, p_stream text, p_op text, p_job_id bigint, p_lease_id bigint, p_body jsonb, p_xid xid8, p_at timestamp with time zone, p_lsn pg_lsn)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgqueue'
AS $function$
BEGIN
    INSERT INTO pgqueue.op_log (seq, stream, op, job_id, lease_id, body, xid, at, lsn)
    VALUES (p_seq, p_stream, p_op, p_job_id, p_lease_id, p_body, p_xid, p_at, p_lsn)
    ON CONFLICT (seq) DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF NOT pgqueue.reflected(p_xid) THEN
        PERFORM pgqueue.apply_op(p_op, p_job_id, p_lease_id, p_body);
    END IF;
    RETURN true;
END
$function$;
-- @@ function pgqueue.job_state_json
-- @@ after function pgqueue.ingest_ops

CREATE OR REPLACE FUNCTION pgqueue.job_state_json(j pgqueue.job)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
AS $function$
    SELECT jsonb_build_object(
        'job_id', j.id, 'state', j.state, 'attempts', j.attempts, 'max_attempts', j.max_attempts,
        'not_before_ms', pgqueue.to_ms(j.not_before), 'last_error', j.last_error,
        'state_reason', j.state_reason, 'state_detail', j.state_detail,
        'checkpoint', pgqueue.checkpoint_json(j))
$function$;
-- @@ function pgqueue.lease
-- @@ after function pgqueue.job_state_json

CREATE OR REPLACE FUNCTION pgqueue.lease(p_stream text, p_limit integer, p_visibility_ms bigint, p_worker_node integer, p_worker_instance integer)
 RETURNS SETOF pgqueue.job
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_now timestamptz := pgqueue.now_ms();
    v_exp timestamptz := v_now + p_visibility_ms * interval '1 millisecond';
    -- The same for every job of the call (job and lease ids are the op row's own columns), so
    -- it is built once, not per row: the op-log share of a lease of 500 fell by ~40 %.
    v_body jsonb := jsonb_build_object('worker_node', p_worker_node,
                                       'worker_instance', p_worker_instance,
                                       'expires_at_ms', pgqueue.to_ms(v_exp));
BEGIN
    PERFORM pgqueue.require_leader();
    IF p_limit < 1 OR p_visibility_ms < 0 THEN
        RAISE EXCEPTION 'lease: limit must be >= 1 and visibility >= 0' USING ERRCODE = '22023';
    END IF;
    PERFORM pgqueue.promote_due(p_stream);
    RETURN QUERY
    WITH pick AS MATERIALIZED (
        SELECT id FROM pgqueue.job
        WHERE stream = p_stream AND state = 'pending'
        ORDER BY priority DESC, id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ), leased AS (
        UPDATE pgqueue.job j
        SET state = 'leased', lease_id = nextval('pgqueue.lease_id_seq'),
            worker_node = p_worker_node, worker_instance = p_worker_instance,
            lease_expires_at = v_exp
        FROM pick WHERE j.id = pick.id
        RETURNING j.*
    ), logged AS (
        INSERT INTO pgqueue.op_log (stream, op, job_id, lease_id, body)
        SELECT l.stream, 'Lease', l.id, l.lease_id, v_body
        FROM leased l ORDER BY l.id
    )
    SELECT * FROM leased ORDER BY priority DESC, id;
END
$function$;
-- @@ function pgqueue.op_log_apply_trigger
-- @@ after function pgqueue.now_ms

CREATE OR REPLACE FUNCTION pgqueue.op_log_apply_trigger()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgqueue'
AS $function$
BEGIN
    IF current_setting('session_replication_role') <> 'replica' THEN
        RETURN NEW;
    END IF;
    IF EXISTS (SELECT 1 FROM pgqueue.op_log WHERE seq = NEW.seq) THEN
        RETURN NULL;
    END IF;
    IF NOT pgqueue.reflected(NEW.xid) THEN
        PERFORM pgqueue.apply_op(NEW.op, NEW.job_id, NEW.lease_id, NEW.body);
    END IF;
    RETURN NEW;
END
$function$;
-- @@ function pgqueue.outcome_json
-- @@ after function pgqueue.operator_job

CREATE OR REPLACE FUNCTION pgqueue.outcome_json(j pgqueue.job, p_state text, p_at timestamp with time zone)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
AS $function$
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
        'at_ms', pgqueue.to_ms(p_at))
$function$;
-- @@ function pgqueue.prune_op_log
-- @@ after function pgqueue.promote_due

CREATE OR REPLACE FUNCTION pgqueue.prune_op_log(p_keep interval, p_stale_after interval DEFAULT '1 day'::interval, p_limit integer DEFAULT 10000, p_wait interval DEFAULT '00:00:01'::interval)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_seq bigint;
    v_n int;
BEGIN
    SELECT min(s.applied_seq) INTO v_seq
    FROM pgqueue.replica_status(p_stale_after, p_wait) s WHERE NOT s.stale;
    WITH doomed AS (
        SELECT o.seq FROM pgqueue.op_log o
        WHERE o.at < now() - p_keep
          AND (v_seq IS NULL OR o.seq <= v_seq)
          AND o.xid < pg_snapshot_xmin(pg_current_snapshot())
        ORDER BY o.seq
        LIMIT p_limit
    )
    , gone AS (DELETE FROM pgqueue.op_log o USING doomed WHERE o.seq = doomed.seq RETURNING o.seq)
    SELECT count(*), max(seq) INTO v_n, v_seq FROM gone;
    IF v_n > 0 THEN
        UPDATE pgqueue.node SET pruned_through = greatest(pruned_through, v_seq);
    END IF;
    RETURN v_n;
END
$function$;
-- @@ function pgqueue.reflected
-- @@ after function pgqueue.reclaim_expired

CREATE OR REPLACE FUNCTION pgqueue.reflected(p_xid xid8)
 RETURNS boolean
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pgqueue'
AS $function$ SELECT coalesce(pg_visible_in_snapshot(p_xid, n.seed_snapshot), false) FROM pgqueue.node n $function$;
-- @@ function pgqueue.renew
-- @@ after function pgqueue.remove_schedule

CREATE OR REPLACE FUNCTION pgqueue.renew(p_job_ids bigint[], p_lease_ids bigint[], p_visibility_ms bigint[], p_checkpoints jsonb[])
 RETURNS TABLE(job_id bigint, lease_id bigint, expires_at timestamp with time zone)
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_now timestamptz := pgqueue.now_ms();
BEGIN
    PERFORM pgqueue.require_leader();
    RETURN QUERY
    -- Rows are locked in id order first (see ack): no deadlock with a concurrent batched ack.
    WITH input AS (
        SELECT * FROM unnest(p_job_ids, p_lease_ids, p_visibility_ms, p_checkpoints)
            AS t(job_id, lease_id, visibility_ms, cp)
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
            checkpoint_updated_at = CASE WHEN i.cp IS NULL THEN j.checkpoint_updated_at ELSE v_now END
        FROM input i, locked l
        WHERE j.id = l.id AND j.id = i.job_id AND j.lease_id = i.lease_id AND j.state = 'leased'
        RETURNING j.*
    ), logged AS (
        INSERT INTO pgqueue.op_log (stream, op, job_id, lease_id, body)
        SELECT r.stream, 'Renew', r.id, r.lease_id, jsonb_build_object(
            'job_id', r.id, 'lease_id', r.lease_id,
            'expires_at_ms', pgqueue.to_ms(r.lease_expires_at),
            'checkpoint', pgqueue.checkpoint_json(r))
        FROM renewed r ORDER BY r.id
    )
    SELECT r.id, r.lease_id, r.lease_expires_at FROM renewed r;
END
$function$;
-- @@ function pgqueue.replica_status
-- @@ after function pgqueue.renew

CREATE OR REPLACE FUNCTION pgqueue.replica_status(p_stale_after interval DEFAULT '1 day'::interval, p_wait interval DEFAULT '00:00:01'::interval)
 RETURNS TABLE(name text, method text, applied_seq bigint, lag_ops bigint, lag_seconds double precision, active boolean, seen_at timestamp with time zone, stale boolean)
 LANGUAGE plpgsql
AS $function$
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
            WHERE NOT ((v_exact AND pg_visible_in_snapshot(o.xid, v_snap))
                       OR (v_restart IS NOT NULL AND o.lsn < v_restart));
            IF applied_seq IS NULL THEN
                -- everything kept is applied; when nothing is kept, whatever was pruned was
                SELECT coalesce(max(o.seq), (SELECT pruned_through FROM pgqueue.node), 0)
                INTO applied_seq FROM pgqueue.op_log o;
            END IF;
        ELSE
            active := r.seen_at > now() - interval '1 minute';
            seen_at := r.seen_at;
            applied_seq := r.confirmed_seq;
            SELECT count(*), extract(epoch FROM now() - min(o.at))::float8 INTO lag_ops, lag_seconds
            FROM pgqueue.op_log o WHERE o.seq > r.confirmed_seq;
        END IF;
        lag_seconds := coalesce(lag_seconds, 0);
        stale := NOT active AND seen_at < now() - p_stale_after;
        RETURN NEXT;
    END LOOP;
END
$function$;
-- @@ function pgqueue.schedule_json
-- @@ after function pgqueue.save_job

CREATE OR REPLACE FUNCTION pgqueue.schedule_json(c pgqueue.schedule)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
AS $function$
    SELECT jsonb_build_object(
        'stream', c.stream, 'name', c.name, 'cron', c.cron, 'timezone', c.timezone,
        'payload', pgqueue.b64(c.payload), 'kind', c.kind, 'priority', c.priority,
        'max_attempts', c.max_attempts, 'catch_up', c.catch_up,
        'misfire_grace_ms', c.misfire_grace_ms, 'paused', c.paused,
        'next_run_at_ms', pgqueue.to_ms(c.next_run_at),
        'last_fired_at_ms', pgqueue.to_ms(c.last_fired_at),
        'updated_at_ms', pgqueue.to_ms(c.updated_at))
$function$;
-- @@ function pgqueue.seed_rows
-- @@ after function pgqueue.schedule_json

CREATE OR REPLACE FUNCTION pgqueue.seed_rows(p_table text, p_rows jsonb)
 RETURNS integer
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgqueue'
AS $function$
DECLARE
    v_n int;
BEGIN
    IF p_table NOT IN ('job', 'dead_letter', 'stream_config', 'kind_config', 'step_set',
                       'schedule', 'op_log') THEN
        RAISE EXCEPTION 'seed_rows: % is not a queue-state table', quote_literal(p_table)
            USING ERRCODE = '22023';
    END IF;
    EXECUTE format('INSERT INTO pgqueue.%I SELECT * FROM jsonb_populate_recordset(NULL::pgqueue.%I, $1)',
                   p_table, p_table) USING p_rows;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$function$;
-- @@ function pgqueue.set_role
-- @@ after function pgqueue.seed_rows

CREATE OR REPLACE FUNCTION pgqueue.set_role(p_role text, p_name text DEFAULT NULL::text, p_leader text DEFAULT NULL::text)
 RETURNS pgqueue.node
 LANGUAGE plpgsql
AS $function$
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
        changed_at = now()
    RETURNING * INTO n;
    RETURN n;
END
$function$;
-- @@ function pgqueue.to_ms
-- @@ after function pgqueue.step_names

CREATE OR REPLACE FUNCTION pgqueue.to_ms(ts timestamp with time zone)
 RETURNS bigint
 LANGUAGE sql
 STABLE PARALLEL SAFE
AS $function$ SELECT (extract(epoch FROM ts) * 1000)::bigint $function$;
