-- name: oplog_tail
-- The newest ops, optionally of one stream and/or job (an Enqueue's whole body: op_body).
SELECT seq, stream, op, job_id, lease_id, pgqueue.op_body(o) AS body, xid::text AS xid, at
FROM pgqueue.op_log o
WHERE (%(stream)s::text IS NULL OR stream = %(stream)s::text)
  AND (%(job_id)s::bigint IS NULL OR job_id = %(job_id)s::bigint)
ORDER BY seq DESC
LIMIT %(limit)s

-- name: oplog_counts
-- How many ops of each kind the log holds.
SELECT op, count(*) AS count FROM pgqueue.op_log GROUP BY op ORDER BY op

-- name: oplog_committed_batch
-- The next ops after seq %(after)s whose writing transaction finished before this snapshot
-- began (so no later commit can appear below them), as op_log rows in jsonb, in seq order.
SELECT seq, to_jsonb(o) AS op
FROM pgqueue.op_log o
WHERE seq > %(after)s AND xid < pg_snapshot_xmin(pg_current_snapshot())
ORDER BY seq
LIMIT %(limit)s

-- name: oplog_visible_batch
-- The next ops after seq %(after)s that this snapshot sees committed, in seq order (a one-shot
-- replay or a replica's seed: later ops arrive by other means and duplicates are skipped).
SELECT seq, to_jsonb(o) AS op
FROM pgqueue.op_log o
WHERE seq > %(after)s
ORDER BY seq
LIMIT %(limit)s

-- name: oplog_ingest
-- Apply a batch of ops from another database's log (skipping seqs already applied).
SELECT pgqueue.ingest_ops(%(ops)s::jsonb) AS applied

-- name: advance_sequences
-- Move the job, lease and op-log sequences past every id in the op log (after a replay, or at
-- promotion), so new ids never collide with replayed ones.
SELECT setval(pg_get_serial_sequence('pgqueue.op_log', 'seq'),
              greatest(pg_sequence_last_value(pg_get_serial_sequence('pgqueue.op_log', 'seq')),
                       (SELECT coalesce(max(seq), 0) FROM pgqueue.op_log), 1)) AS seq,
       setval('pgqueue.job_id_seq',
              greatest((SELECT last_value FROM pgqueue.job_id_seq),
                       (SELECT coalesce(max(job_id), 0) FROM pgqueue.op_log), 1)) AS job_id,
       setval('pgqueue.lease_id_seq',
              greatest((SELECT last_value FROM pgqueue.lease_id_seq),
                       (SELECT coalesce(max(lease_id), 0) FROM pgqueue.op_log), 1)) AS lease_id
