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
