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

-- name: job_preview_by_id
-- One job in any set like job_by_id, its payload cut to the first %(preview)s bytes in the
-- database (substring reads only those bytes of a TOASTed value; octet_length reads none),
-- so a 200 MiB job is shown without sending 200 MiB. The columns are pgqueue.jobs'.
SELECT id, stream, kind, state, substring(payload FROM 1 FOR %(preview)s) AS payload,
       octet_length(payload) AS payload_size, priority, attempts, max_attempts, not_before,
       enqueued_at, dedup_key, last_error, state_reason, state_detail, lease_id, worker_node,
       worker_instance, lease_expires_at, died_at, last_completed_step, cursor_step, cursor,
       checkpoint_updated_at, schema_version, step_set_hash, crashes_by_step
FROM pgqueue.jobs WHERE id = %(job_id)s

-- name: jobs_preview_list
-- jobs_list with each payload cut to its first %(preview)s bytes (as job_preview_by_id).
SELECT id, stream, kind, state, substring(payload FROM 1 FOR %(preview)s) AS payload,
       octet_length(payload) AS payload_size, priority, attempts, max_attempts, not_before,
       enqueued_at, dedup_key, last_error, state_reason, state_detail, lease_id, worker_node,
       worker_instance, lease_expires_at, died_at, last_completed_step, cursor_step, cursor,
       checkpoint_updated_at, schema_version, step_set_hash, crashes_by_step
FROM pgqueue.jobs
WHERE (%(stream)s::text IS NULL OR stream = %(stream)s::text)
  AND (%(state)s::text IS NULL OR state = %(state)s::text)
ORDER BY id DESC
LIMIT %(limit)s

-- name: dead_letters_preview
-- dead_letters (most recently died first) with each payload cut to its first %(preview)s bytes.
SELECT id, stream, kind, state, substring(payload FROM 1 FOR %(preview)s) AS payload,
       octet_length(payload) AS payload_size, priority, attempts, max_attempts, not_before,
       enqueued_at, dedup_key, last_error, state_reason, state_detail, lease_id, worker_node,
       worker_instance, lease_expires_at, died_at, last_completed_step, cursor_step, cursor,
       checkpoint_updated_at, schema_version, step_set_hash, crashes_by_step
FROM pgqueue.jobs WHERE state = 'dead' AND stream = %(stream)s
ORDER BY died_at DESC, id DESC LIMIT %(limit)s

-- name: oplog_tail_preview
-- oplog_tail with any payload in a body cut to its first %(preview)s bytes (payload_size: its
-- whole length). An Enqueue op's body is built as pgqueue.op_body builds it, from the cut
-- payload: op_body would base64 the whole payload first (and past ~190 MiB the result no
-- longer fits in a jsonb). Bodies that hold a payload themselves (Enqueue ops before 0003,
-- Upcast, UpsertSchedule) are cut after decoding. The newest ops are chosen first, so only
-- they are read.
SELECT o.seq, o.stream, o.op, o.job_id, o.lease_id, o.xid::text AS xid, o.at,
       CASE
           WHEN o.op = 'Enqueue' AND o.payload IS NOT NULL THEN o.body || jsonb_build_object(
               'job_id', o.job_id, 'stream', o.stream, 'kind', o.kind,
               'payload', pgqueue.b64(substring(o.payload FROM 1 FOR %(preview)s)),
               'priority', o.priority,
               'state', CASE WHEN pgqueue.to_ms(o.not_before) > (o.body ->> 'enqueued_at_ms')::bigint
                             THEN 'scheduled' ELSE 'pending' END,
               'not_before_ms', pgqueue.to_ms(o.not_before), 'dedup_key', pgqueue.b64(o.dedup_key),
               'max_attempts', o.max_attempts, 'schema_version', o.schema_version,
               'next_job_id', o.job_id + 1)
           WHEN b.payload IS NOT NULL AND octet_length(b.payload) > %(preview)s THEN
               jsonb_set(o.body, '{payload}',
                         to_jsonb(pgqueue.b64(substring(b.payload FROM 1 FOR %(preview)s))))
           ELSE o.body
       END AS body,
       coalesce(octet_length(o.payload), octet_length(b.payload)) AS payload_size
FROM (SELECT * FROM pgqueue.op_log
      WHERE (%(stream)s::text IS NULL OR stream = %(stream)s::text)
        AND (%(job_id)s::bigint IS NULL OR job_id = %(job_id)s::bigint)
      ORDER BY seq DESC
      LIMIT %(limit)s) o
CROSS JOIN LATERAL (
    SELECT CASE WHEN o.op = 'Enqueue' AND o.payload IS NOT NULL THEN NULL
                WHEN jsonb_typeof(o.body -> 'payload') = 'string'
                THEN pgqueue.unb64(o.body ->> 'payload') END AS payload) b
ORDER BY o.seq DESC

-- name: read_snapshot
-- The first statement of a read-only transaction whose reads must agree (a job's history: its
-- row and its ops from one snapshot).
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY
