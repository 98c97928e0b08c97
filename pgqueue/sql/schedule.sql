-- schedule: Cron schedules: upsert, the tick's advance, removal.

-- schema: tables ----------------------------------------------------------------------------
-- Cron schedules. next_run_at is the next fire time (UTC); cron is evaluated in Python with
-- croniter on wall-clock time in `timezone`. A tick's enqueue and the advance of next_run_at
-- commit together, which is what makes a tick fire exactly once.
-- last_fired_at is the latest fire time ever fired: the functions below keep next_run_at and
-- every newly fired time strictly after it, under the row lock, so a fire time fires at most
-- once ever (a clock behind, or a change that waited behind a tick, cannot move it back).
-- Not a CHECK constraint: an op log written before 0005 may hold a row that breaks the rule,
-- and a replay must still apply it.
CREATE TABLE pgqueue.schedule (
    stream           text NOT NULL,
    name             text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    cron             text NOT NULL,
    timezone         text NOT NULL,
    payload          bytea NOT NULL,
    kind             text,
    priority         smallint NOT NULL CHECK (priority BETWEEN 0 AND 255),
    max_attempts     int NOT NULL CHECK (max_attempts >= 0),
    catch_up         text NOT NULL CHECK (catch_up IN ('none', 'one', 'all')),
    misfire_grace_ms bigint NOT NULL CHECK (misfire_grace_ms >= 0),
    paused           boolean NOT NULL DEFAULT false,
    next_run_at      timestamptz NOT NULL,
    last_fired_at    timestamptz,
    updated_at       timestamptz NOT NULL,
    PRIMARY KEY (stream, name)
);
CREATE INDEX schedule_due_idx ON pgqueue.schedule (next_run_at) WHERE NOT paused;

-- schema: functions -------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION pgqueue.schedule_json(c pgqueue.schedule) RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT jsonb_build_object(
        'stream', c.stream, 'name', c.name, 'cron', c.cron, 'timezone', c.timezone,
        'payload', pgqueue.b64(c.payload), 'kind', c.kind, 'priority', c.priority,
        'max_attempts', c.max_attempts, 'catch_up', c.catch_up,
        'misfire_grace_ms', c.misfire_grace_ms, 'paused', c.paused,
        'next_run_at_ms', pgqueue.to_ms(c.next_run_at),
        'last_fired_at_ms', pgqueue.to_ms(c.last_fired_at),
        'updated_at_ms', pgqueue.to_ms(c.updated_at))
$$;

-- Create or change a schedule (the caller validated cron and zone and computed next_run_at).
-- Refused (PQ422) when next_run_at is not after the schedule's last fired time: the caller
-- computes it from max(the database's clock, last_fired_at) under the row lock.
CREATE OR REPLACE FUNCTION pgqueue.upsert_schedule(
    p_stream text, p_name text, p_cron text, p_timezone text, p_payload bytea, p_kind text,
    p_priority int, p_max_attempts int, p_catch_up text, p_misfire_grace_ms bigint,
    p_paused boolean, p_next_run_at timestamptz
) RETURNS pgqueue.schedule
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    c pgqueue.schedule;
    v_now timestamptz := pgqueue.now_ms();
BEGIN
    PERFORM pgqueue.require_leader();
    PERFORM pgqueue.check_stream(p_stream);
    PERFORM pgqueue.check_name(p_kind, 'kind');
    INSERT INTO pgqueue.schedule AS s (stream, name, cron, timezone, payload, kind, priority,
        max_attempts, catch_up, misfire_grace_ms, paused, next_run_at, updated_at)
    VALUES (p_stream, p_name, p_cron, p_timezone, p_payload, p_kind, p_priority, p_max_attempts,
        p_catch_up, p_misfire_grace_ms, p_paused, date_trunc('milliseconds', p_next_run_at), v_now)
    ON CONFLICT (stream, name) DO UPDATE SET
        cron = excluded.cron, timezone = excluded.timezone, payload = excluded.payload,
        kind = excluded.kind, priority = excluded.priority, max_attempts = excluded.max_attempts,
        catch_up = excluded.catch_up, misfire_grace_ms = excluded.misfire_grace_ms,
        paused = excluded.paused, next_run_at = excluded.next_run_at, updated_at = v_now
    RETURNING * INTO c;
    -- c is the row as updated under its lock, with the last fired time of the latest tick
    -- that committed before it: the raise undoes the change
    IF c.next_run_at <= c.last_fired_at THEN
        RAISE EXCEPTION 'schedule % of stream %: next_run_at % is not after its last fired time % (a fire time fires once)',
            p_name, p_stream, c.next_run_at, c.last_fired_at USING ERRCODE = 'PQ422';
    END IF;
    INSERT INTO pgqueue.op_log (stream, op, body)
    VALUES (p_stream, 'UpsertSchedule', pgqueue.schedule_json(c));
    RETURN c;
END
$$;

-- Advance a fired (or skipped) schedule; runs in the same transaction as its ticks' enqueues.
-- p_fired lists the fire times enqueued (ISO 8601 text, ascending) and p_last_fired_at is the
-- last of them (NULL when none fired). Under the row lock, each must be after the schedule's
-- last fired time, not before its next run and not after the database's clock, and the new
-- next_run_at after all of them; otherwise PQ422, and the tick's savepoint takes its enqueues
-- back with it. That is what makes a fire time fire at most once, ever. Only a due schedule
-- that is not paused advances: a worker's tick may not move one that is not its turn.
CREATE OR REPLACE FUNCTION pgqueue.advance_schedule(p_stream text, p_name text, p_next_run_at timestamptz,
                                         p_last_fired_at timestamptz, p_fired jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    c pgqueue.schedule;
    v_now timestamptz := pgqueue.now_ms();
    v_last timestamptz;
    v_at timestamptz;
BEGIN
    PERFORM pgqueue.require_leader();
    SELECT * INTO c FROM pgqueue.schedule WHERE stream = p_stream AND name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no schedule % in stream %', p_name, p_stream USING ERRCODE = 'PQ404';
    END IF;
    IF c.paused THEN
        RAISE EXCEPTION 'schedule % of stream % is paused: no tick advances it', p_name, p_stream
            USING ERRCODE = 'PQ422';
    END IF;
    IF c.next_run_at IS NULL OR c.next_run_at > v_now THEN
        RAISE EXCEPTION 'schedule % of stream % is not due (next run %, the database''s clock %)',
            p_name, p_stream, coalesce(c.next_run_at::text, 'none'), v_now USING ERRCODE = 'PQ422';
    END IF;
    v_last := c.last_fired_at;
    FOR v_at IN
        SELECT date_trunc('milliseconds', f.t::timestamptz)
        FROM jsonb_array_elements_text(coalesce(p_fired, '[]'::jsonb)) WITH ORDINALITY AS f(t, i)
        ORDER BY f.i
    LOOP
        IF v_at <= v_last THEN
            RAISE EXCEPTION 'schedule % of stream %: fire time % is not after %, fired before it (a fire time fires once)',
                p_name, p_stream, v_at, v_last USING ERRCODE = 'PQ422';
        END IF;
        IF v_at > v_now THEN
            RAISE EXCEPTION 'schedule % of stream %: fire time % is after the database''s clock %',
                p_name, p_stream, v_at, v_now USING ERRCODE = 'PQ422';
        END IF;
        IF v_at < c.next_run_at THEN
            RAISE EXCEPTION 'schedule % of stream %: fire time % is before its next run %',
                p_name, p_stream, v_at, c.next_run_at USING ERRCODE = 'PQ422';
        END IF;
        v_last := v_at;
    END LOOP;
    IF jsonb_array_length(coalesce(p_fired, '[]'::jsonb)) = 0 THEN
        v_at := NULL;    -- nothing fired
    ELSE
        v_at := v_last;
    END IF;
    IF date_trunc('milliseconds', p_last_fired_at) IS DISTINCT FROM v_at THEN
        RAISE EXCEPTION 'schedule % of stream %: last_fired_at % is not the last of the fired times %',
            p_name, p_stream, p_last_fired_at, p_fired USING ERRCODE = 'PQ422';
    END IF;
    IF date_trunc('milliseconds', p_next_run_at) <= v_last THEN
        RAISE EXCEPTION 'schedule % of stream %: next_run_at % is not after its last fired time % (a fire time fires once)',
            p_name, p_stream, p_next_run_at, v_last USING ERRCODE = 'PQ422';
    END IF;
    UPDATE pgqueue.schedule
    SET next_run_at = date_trunc('milliseconds', p_next_run_at), last_fired_at = v_last
    WHERE stream = p_stream AND name = p_name
    RETURNING * INTO c;
    INSERT INTO pgqueue.op_log (stream, op, body)
    VALUES (p_stream, 'UpdateScheduleNextRun', jsonb_build_object(
        'stream', c.stream, 'name', c.name, 'next_run_at_ms', pgqueue.to_ms(c.next_run_at),
        'last_fired_at_ms', pgqueue.to_ms(c.last_fired_at), 'fired', p_fired));
END
$$;

-- A schedule row under lock (NULL row when none), so a change and a concurrent tick serialise;
-- the lock is the caller's transaction's.
CREATE OR REPLACE FUNCTION pgqueue.lock_schedule(p_stream text, p_name text)
RETURNS SETOF pgqueue.schedule
LANGUAGE sql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
    SELECT * FROM pgqueue.schedule WHERE stream = p_stream AND name = p_name FOR UPDATE
$$;

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

CREATE OR REPLACE FUNCTION pgqueue.remove_schedule(p_stream text, p_name text) RETURNS void
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
BEGIN
    PERFORM pgqueue.require_leader();
    DELETE FROM pgqueue.schedule WHERE stream = p_stream AND name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no schedule % in stream %', p_name, p_stream USING ERRCODE = 'PQ404';
    END IF;
    INSERT INTO pgqueue.op_log (stream, op, body)
    VALUES (p_stream, 'RemoveSchedule', jsonb_build_object('stream', p_stream, 'name', p_name));
END
$$;

-- queries -----------------------------------------------------------------------------------

-- name: schedule_upsert
SELECT * FROM pgqueue.upsert_schedule(%(stream)s::text, %(name)s::text, %(cron)s::text,
    %(timezone)s::text, %(payload)s::bytea, %(kind)s::text, %(priority)s::int,
    %(max_attempts)s::int, %(catch_up)s::text, %(misfire_grace_ms)s::bigint, %(paused)s::boolean,
    %(next_run_at)s::timestamptz)

-- name: schedule_get
SELECT * FROM pgqueue.schedule WHERE stream = %(stream)s AND name = %(name)s

-- name: schedule_lock
-- The schedule row under lock, so a change and a concurrent tick serialise.
SELECT * FROM pgqueue.lock_schedule(%(stream)s::text, %(name)s::text)

-- name: schedules_list
-- One stream's schedules (every stream's when %(stream)s is NULL), by stream and name.
SELECT * FROM pgqueue.schedule WHERE %(stream)s::text IS NULL OR stream = %(stream)s::text
ORDER BY stream, name

-- name: schedules_claim_due
-- Due schedules of every stream, claimed with SKIP LOCKED: a concurrent scheduler skips
-- them, and once this transaction commits their next_run_at is in the future.
SELECT * FROM pgqueue.claim_due_schedules(%(now)s::timestamptz, %(limit)s::int)

-- name: schedules_claim_due_of
-- The same for one stream's schedules (on Citus, where the scheduler goes stream by stream).
SELECT * FROM pgqueue.claim_due_schedules(%(now)s::timestamptz, %(limit)s::int, %(stream)s::text)

-- name: schedule_due_streams
-- The streams with a due schedule (on Citus, each then claimed on its node).
SELECT DISTINCT stream FROM pgqueue.schedule
WHERE NOT paused AND next_run_at <= least(%(now)s::timestamptz, pgqueue.now_ms())

-- name: schedule_advance
SELECT pgqueue.advance_schedule(%(stream)s::text, %(name)s::text, %(next_run_at)s::timestamptz,
                                %(last_fired_at)s::timestamptz, %(fired)s::jsonb)

-- name: schedule_remove
SELECT pgqueue.remove_schedule(%(stream)s::text, %(name)s::text)

-- name: pin_clock
-- Pin pgqueue.now_ms() for the rest of this transaction (a controllable clock for passes).
SELECT set_config('pgqueue.now', %(now)s, true) AS now

-- name: schedule_clock
-- The database's clock for this transaction (pinned by pin_clock or SET pgqueue.now): every
-- schedule decision reads it, never the host's clock.
SELECT pgqueue.now_ms() AS now

-- name: schedule_streams_by_name
-- The streams that hold a schedule named %(name)s (names are unique per stream only).
SELECT stream FROM pgqueue.schedule WHERE name = %(name)s ORDER BY stream
