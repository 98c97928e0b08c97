-- operate: Operator verbs on one job, and stream and kind settings; each an op.

-- schema: functions -------------------------------------------------------------------------

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

-- What an operator's verb on one job returns: the job and where it stands now, in few enough
-- columns to read in psql (`SELECT * FROM pgqueue.release(42)`), not the whole job row.
CREATE OR REPLACE FUNCTION pgqueue.job_change(j pgqueue.job)
RETURNS TABLE (id bigint, stream text, kind text, state text, attempts int,
               last_completed_step text, cursor_step text)
LANGUAGE sql IMMUTABLE
AS $$ SELECT j.id, j.stream, j.kind, j.state, j.attempts, j.last_completed_step, j.cursor_step $$;

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

-- Tell the worker holding p_lease_id that its job's cancel was requested. Not on a Citus
-- cluster (see pgqueue.notify_ready): there the client notifies on the coordinator's session,
-- where workers listen, and a worker that missed it learns at its next renewal.
CREATE OR REPLACE FUNCTION pgqueue.notify_cancel(p_lease_id bigint) RETURNS void
LANGUAGE sql VOLATILE
AS $$ SELECT pg_notify('pgqueue_cancel', p_lease_id::text) FROM pgqueue.layout WHERE name = 'single' $$;

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
        RAISE EXCEPTION 'no job %', p_job_id || pgqueue.in_stream(p_stream) USING ERRCODE = 'PQ404';
    END IF;
    INSERT INTO pgqueue.op_log (stream, op, job_id, body)
    VALUES (v_stream, 'Cancel', p_job_id, jsonb_build_object('job_id', p_job_id, 'was', 'dead'));
    RETURN 'cancelled';
END
$$;

-- Per-stream settings, logged like any other state change.
CREATE OR REPLACE FUNCTION pgqueue.configure_stream(
    p_stream text, p_retry_base_ms bigint DEFAULT NULL, p_retry_cap_ms bigint DEFAULT NULL,
    p_quarantine_after int DEFAULT NULL, p_max_payload_bytes bigint DEFAULT NULL
) RETURNS pgqueue.stream_config
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    c pgqueue.stream_config;
BEGIN
    PERFORM pgqueue.require_leader();
    PERFORM pgqueue.check_stream(p_stream);
    IF p_max_payload_bytes IS NOT NULL AND p_max_payload_bytes NOT BETWEEN 1 AND 67108864 THEN
        RAISE EXCEPTION 'max_payload_bytes must be 1 to 67108864 (64 MiB), got %',
            p_max_payload_bytes USING ERRCODE = '22023';
    END IF;
    INSERT INTO pgqueue.stream_config AS s (stream, retry_base_ms, retry_cap_ms, quarantine_after,
                                            max_payload_bytes)
    VALUES (p_stream, coalesce(p_retry_base_ms, 1000), coalesce(p_retry_cap_ms, 3600000),
            coalesce(p_quarantine_after, 3), coalesce(p_max_payload_bytes, 16777216))
    ON CONFLICT (stream) DO UPDATE SET
        retry_base_ms = coalesce(p_retry_base_ms, s.retry_base_ms),
        retry_cap_ms = coalesce(p_retry_cap_ms, s.retry_cap_ms),
        quarantine_after = coalesce(p_quarantine_after, s.quarantine_after),
        max_payload_bytes = coalesce(p_max_payload_bytes, s.max_payload_bytes)
    RETURNING * INTO c;
    INSERT INTO pgqueue.op_log (stream, op, body)
    VALUES (p_stream, 'ConfigureStream', to_jsonb(c));
    RETURN c;
END
$$;

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

-- The one writer of kind_config (configure_kind_settings and the op's apply): the row as given, or
-- none when it sets nothing.
CREATE OR REPLACE FUNCTION pgqueue.save_kind_config(p pgqueue.kind_config) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF num_nonnulls(p.quarantine_after, p.max_concurrency, p.rate_count, p.rate_ms,
                    p.max_per_key) = 0 THEN
        DELETE FROM pgqueue.kind_config WHERE stream = p.stream AND kind = p.kind;
        RETURN;
    END IF;
    -- (the columns named: Citus routes a row by a stream it can see, not by p.*)
    INSERT INTO pgqueue.kind_config AS k (stream, kind, quarantine_after, max_concurrency,
                                          rate_count, rate_ms, max_per_key)
    VALUES (p.stream, p.kind, p.quarantine_after, p.max_concurrency, p.rate_count, p.rate_ms,
            p.max_per_key)
    ON CONFLICT (stream, kind) DO UPDATE
    SET quarantine_after = excluded.quarantine_after, max_concurrency = excluded.max_concurrency,
        rate_count = excluded.rate_count, rate_ms = excluded.rate_ms,
        max_per_key = excluded.max_per_key;
END
$$;

-- The previous release's call (its workers register quarantine_after=N): sets that alone.
CREATE OR REPLACE FUNCTION pgqueue.configure_kind(p_stream text, p_kind text, p_quarantine_after int)
RETURNS boolean
LANGUAGE sql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
    SELECT pgqueue.configure_kind_settings(p_stream, p_kind,
                                  jsonb_build_object('quarantine_after', p_quarantine_after))
$$;

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

-- queries -----------------------------------------------------------------------------------

-- name: job_whereabouts
-- A job's stream (live, else dead) and its lease when leased with no cancel requested yet:
-- what the operator verbs name when they call (on Citus, the stream's node runs them), and
-- whether a cancel has a worker to tell.
SELECT coalesce((SELECT stream FROM pgqueue.job WHERE id = %(job_id)s::bigint),
                (SELECT stream FROM pgqueue.dead_letter WHERE id = %(job_id)s::bigint)) AS stream,
       (SELECT lease_id FROM pgqueue.job
        WHERE id = %(job_id)s::bigint AND state = 'leased' COLLATE "POSIX"
          AND cancel_requested_at IS NULL) AS lease_id

-- name: jobs_streams
-- Each job's stream (live or dead), for a bulk verb given ids without a stream: on Citus it
-- sends each stream's jobs to the stream's node. An id of no job is left out.
SELECT id, stream FROM pgqueue.job WHERE id = ANY(%(job_ids)s::bigint[])
UNION ALL
SELECT id, stream FROM pgqueue.dead_letter WHERE id = ANY(%(job_ids)s::bigint[])

-- name: cancel_requested_leases
-- On Citus, after cancels were requested: the leases of those jobs now, to tell their workers.
SELECT lease_id FROM pgqueue.job
WHERE stream = %(stream)s::text AND id = ANY(%(job_ids)s::bigint[])
  AND state = 'leased' COLLATE "POSIX" AND cancel_requested_at IS NOT NULL

-- name: notify_cancels_here
-- ...and the workers holding them told from here, the coordinator, where they listen (a
-- statement of its own: one reading the leases would run on the stream's node).
SELECT pg_notify('pgqueue_cancel', l::text) FROM unnest(%(lease_ids)s::bigint[]) AS l

-- name: release_job
SELECT id FROM pgqueue.release(%(job_id)s::bigint, %(reset_crashes)s::boolean, %(stream)s::text)

-- name: rewind_job
SELECT id FROM pgqueue.rewind(%(job_id)s::bigint, %(to_step)s::text, %(stream)s::text)

-- name: restart_job
SELECT id FROM pgqueue.restart(%(job_id)s::bigint, %(stream)s::text)

-- name: skip_step_job
SELECT id, last_completed_step FROM pgqueue.skip_step(%(job_id)s::bigint, %(stream)s::text)

-- name: accept_step_set_job
SELECT id FROM pgqueue.accept_step_set(%(job_id)s::bigint, %(stream)s::text)

-- name: cancel_job
-- Cancel a job: 'cancelled' (removed now), or 'requested' (leased: its worker stops it).
SELECT pgqueue.cancel(%(job_id)s::bigint, %(stream)s::text) AS outcome

-- name: configure_stream
-- Per-stream retry backoff and quarantine threshold (NULL keeps the current value).
SELECT * FROM pgqueue.configure_stream(%(stream)s::text, %(retry_base_ms)s::bigint, %(retry_cap_ms)s::bigint,
                                       %(quarantine_after)s::int, %(max_payload_bytes)s::bigint)

-- name: apply_verb_to_jobs
-- One operator verb on each of %(job_ids)s still matching the filter; the jobs it did not fit,
-- with why, and the leased jobs a cancel asked to stop.
SELECT job_id, outcome, refused
FROM pgqueue.apply_verb_to_jobs(%(verb)s::text, %(job_ids)s::bigint[], %(to_step)s::text,
                                %(stream)s::text, %(state)s::text, %(kind)s::text)

-- name: apply_verb_to_jobs_any_stream
-- apply_verb_to_jobs without a stream filter: the argument left to its default, since a NULL
-- stream crashes Citus 14.0's coordinator (pgqueue.each_stream).
SELECT job_id, outcome, refused
FROM pgqueue.apply_verb_to_jobs(p_verb => %(verb)s::text, p_job_ids => %(job_ids)s::bigint[],
                                p_to_step => %(to_step)s::text, p_state => %(state)s::text,
                                p_kind => %(kind)s::text)

-- name: state_verbs
-- The verbs that jobs in a state allow, in the CLI's order (pgqueue.verb_states): what a bulk
-- action over jobs of that state may offer.
SELECT ARRAY(SELECT t.verb
             FROM unnest(ARRAY['requeue', 'release', 'rewind', 'restart', 'skip-step',
                               'accept-step-set', 'cancel']) WITH ORDINALITY AS t(verb, n)
             WHERE %(state)s::text = ANY (pgqueue.verb_states(t.verb))
             ORDER BY t.n) AS verbs

-- name: job_verbs
-- The verbs a job allows (pgqueue.job_verbs): what its page offers and `jobs show` lists.
SELECT pgqueue.job_verbs(%(state)s::text, %(reason)s::text, %(step_job)s::boolean) AS verbs
