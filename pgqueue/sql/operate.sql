-- name: release_job
SELECT id FROM pgqueue.release(%(job_id)s::bigint, %(reset_crashes)s::boolean)

-- name: rewind_job
SELECT id FROM pgqueue.rewind(%(job_id)s::bigint, %(to_step)s::text)

-- name: restart_job
SELECT id FROM pgqueue.restart(%(job_id)s::bigint)

-- name: skip_step_job
SELECT id, last_completed_step FROM pgqueue.skip_step(%(job_id)s::bigint)

-- name: accept_step_set_job
SELECT id FROM pgqueue.accept_step_set(%(job_id)s::bigint)

-- name: cancel_job
SELECT pgqueue.cancel(%(job_id)s::bigint)
