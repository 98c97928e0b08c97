-- name: ack_jobs
-- Ack many leases at once; returns the job ids whose lease was still current.
SELECT id FROM pgqueue.ack(%(job_ids)b::bigint[], %(lease_ids)b::bigint[]) AS t(id)

-- name: nack_job
-- One failure: back to pending after a backoff, or to the dead letters. No row: lease lost.
SELECT dead FROM pgqueue.nack(%(job_id)s::bigint, %(lease_id)s::bigint, %(error)s::text,
                          %(retry_in_ms)s::bigint, %(max_attempts)s::int)
