-- name: lease_jobs
-- Lease up to %(limit)s jobs of a stream by priority DESC then id (due scheduled jobs are
-- promoted to pending first); one new lease id each. Read by position (Lease.from_lease_row):
-- keep the column order.
SELECT id, lease_id, stream, kind, payload, priority, attempts, max_attempts, enqueued_at,
       lease_expires_at, last_completed_step, cursor_step, cursor, checkpoint_updated_at,
       schema_version, step_set_hash,
       nullif(crashes_by_step, '{}'::jsonb) AS crashes_by_step  -- nothing to decode when none
FROM pgqueue.lease(%(stream)s, %(limit)s::int, %(visibility_ms)s::bigint, %(worker_node)s::int,
                   %(worker_instance)s::int)

-- name: renew_leases
-- Extend many leases and write their checkpoints in one UPDATE; returns those still current.
SELECT job_id, lease_id, expires_at
FROM pgqueue.renew(%(job_ids)b::bigint[], %(lease_ids)b::bigint[], %(visibility_ms)b::bigint[],
                   %(checkpoints)b::jsonb[])
