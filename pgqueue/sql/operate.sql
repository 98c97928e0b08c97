-- name: release_job
SELECT id FROM pgqueue.release(%(job_id)s, %(reset_crashes)s)

-- name: rewind_job
SELECT id FROM pgqueue.rewind(%(job_id)s, %(to_step)s)

-- name: restart_job
SELECT id FROM pgqueue.restart(%(job_id)s)

-- name: skip_step_job
SELECT id, last_completed_step FROM pgqueue.skip_step(%(job_id)s)

-- name: accept_step_set_job
SELECT id FROM pgqueue.accept_step_set(%(job_id)s)

-- name: cancel_job
SELECT pgqueue.cancel(%(job_id)s)
