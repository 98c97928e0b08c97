-- schedule: Cron schedules: upsert, the tick's advance, removal.

-- schema: tables ----------------------------------------------------------------------------
-- Cron schedules. next_run_at is the next fire time (UTC); cron is evaluated in Python with
-- croniter on wall-clock time in `timezone`. A tick's enqueue and the advance of next_run_at
-- commit together, which is what makes a tick fire exactly once.
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
CREATE OR REPLACE FUNCTION pgqueue.upsert_schedule(
    p_stream text, p_name text, p_cron text, p_timezone text, p_payload bytea, p_kind text,
    p_priority int, p_max_attempts int, p_catch_up text, p_misfire_grace_ms bigint,
    p_paused boolean, p_next_run_at timestamptz
) RETURNS pgqueue.schedule
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    c pgqueue.schedule;
    v_now timestamptz := pgqueue.now_ms();
BEGIN
    PERFORM pgqueue.require_leader();
    PERFORM pgqueue.check_stream(p_stream);
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
    INSERT INTO pgqueue.op_log (stream, op, body)
    VALUES (p_stream, 'UpsertSchedule', pgqueue.schedule_json(c));
    RETURN c;
END
$$;

-- Advance a fired (or skipped) schedule; runs in the same transaction as its ticks' enqueues.
CREATE OR REPLACE FUNCTION pgqueue.advance_schedule(p_stream text, p_name text, p_next_run_at timestamptz,
                                         p_last_fired_at timestamptz, p_fired jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    c pgqueue.schedule;
BEGIN
    PERFORM pgqueue.require_leader();
    UPDATE pgqueue.schedule
    SET next_run_at = date_trunc('milliseconds', p_next_run_at),
        last_fired_at = coalesce(date_trunc('milliseconds', p_last_fired_at), last_fired_at)
    WHERE stream = p_stream AND name = p_name
    RETURNING * INTO c;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no schedule % in stream %', p_name, p_stream USING ERRCODE = 'PQ404';
    END IF;
    INSERT INTO pgqueue.op_log (stream, op, body)
    VALUES (p_stream, 'UpdateScheduleNextRun', jsonb_build_object(
        'stream', c.stream, 'name', c.name, 'next_run_at_ms', pgqueue.to_ms(c.next_run_at),
        'last_fired_at_ms', pgqueue.to_ms(c.last_fired_at), 'fired', p_fired));
END
$$;

CREATE OR REPLACE FUNCTION pgqueue.remove_schedule(p_stream text, p_name text) RETURNS void
LANGUAGE plpgsql VOLATILE
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
SELECT * FROM pgqueue.schedule WHERE stream = %(stream)s AND name = %(name)s FOR UPDATE

-- name: schedules_list
SELECT * FROM pgqueue.schedule WHERE stream = %(stream)s ORDER BY name

-- name: schedules_claim_due
-- Due schedules of every stream, claimed with SKIP LOCKED: a concurrent scheduler skips
-- them, and once this transaction commits their next_run_at is in the future.
SELECT * FROM pgqueue.schedule
WHERE NOT paused AND next_run_at <= %(now)s
ORDER BY next_run_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: schedule_advance
SELECT pgqueue.advance_schedule(%(stream)s::text, %(name)s::text, %(next_run_at)s::timestamptz,
                                %(last_fired_at)s::timestamptz, %(fired)s::jsonb)

-- name: schedule_remove
SELECT pgqueue.remove_schedule(%(stream)s::text, %(name)s::text)

-- name: pin_clock
-- Pin pgqueue.now_ms() for the rest of this transaction (a controllable clock for passes).
SELECT set_config('pgqueue.now', %(now)s, true) AS now
