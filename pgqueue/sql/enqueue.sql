-- name: enqueue_jobs
-- Enqueue a batch into one stream (one round trip, one op per inserted job). Returns one id
-- per input in input order; an input whose dedup key a live job holds returns the holder's id.
SELECT id FROM pgqueue.enqueue(
    %(stream)s, %(payloads)s::bytea[], %(kinds)s::text[], %(priorities)s::int[],
    %(delays_ms)s::bigint[], %(not_befores)s::timestamptz[], %(dedup_keys)s::bytea[],
    %(max_attempts)s::int[], %(schema_versions)s::int[]) AS t(id)

-- name: enqueue_job
-- Enqueue one job (no arrays): its id, or the id of the live job holding its dedup key.
SELECT pgqueue.enqueue_one(%(stream)s::text, %(payload)s::bytea, %(kind)s::text,
    %(priority)s::int, %(delay_ms)s::bigint, %(not_before)s::timestamptz, %(dedup_key)s::bytea,
    %(max_attempts)s::int, %(schema_version)s::int) AS id
