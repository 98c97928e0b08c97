-- name: job_by_id
-- One job in any set, dead letters included.
SELECT * FROM pgqueue.jobs WHERE id = %(job_id)s

-- name: jobs_list
-- Jobs, newest first, optionally of one stream and/or state.
SELECT * FROM pgqueue.jobs
WHERE (%(stream)s::text IS NULL OR stream = %(stream)s::text)
  AND (%(state)s::text IS NULL OR state = %(state)s::text)
ORDER BY id DESC
LIMIT %(limit)s

-- name: stats
-- Jobs by stream and state; for ready jobs, the age of the oldest (since it became leasable).
SELECT stream, state, count(*) AS count,
       extract(epoch FROM now() - min(not_before) FILTER (WHERE state = 'pending'))::float8
           AS oldest_age_seconds
FROM pgqueue.jobs
GROUP BY stream, state
ORDER BY stream, state
