-- name: enqueue_jobs
-- Enqueue a batch into one stream (one round trip, one op per inserted job). Returns one id
-- per input in input order; an input whose dedup key a live job holds returns the holder's id.
-- The arrays travel in binary (the b placeholders): text arrays of bytea cost a hex encoding and a quoting
-- pass per element on both sides (1,000 jobs: 13.0 -> 10.8 ms per call).
SELECT id FROM pgqueue.enqueue(
    %(stream)s, %(payloads)b::bytea[], %(kinds)b::text[], %(priorities)b::int[],
    %(delays_ms)b::bigint[], %(not_befores)b::timestamptz[], %(dedup_keys)b::bytea[],
    %(max_attempts)b::int[], %(schema_versions)b::int[]) AS t(id)

-- name: enqueue_job
-- Enqueue one job (no arrays): its id, or the id of the live job holding its dedup key.
SELECT pgqueue.enqueue_one(%(stream)s::text, %(payload)b::bytea, %(kind)s::text,
    %(priority)s::int, %(delay_ms)s::bigint, %(not_before)s::timestamptz, %(dedup_key)s::bytea,
    %(max_attempts)s::int, %(schema_version)s::int) AS id
