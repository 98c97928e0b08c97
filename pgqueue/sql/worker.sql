-- worker: Registered worker processes.

-- schema: tables ----------------------------------------------------------------------------
-- Registered worker processes (liveness only, local to this database; not replicated).
CREATE TABLE pgqueue.worker (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    node         int NOT NULL,
    host         text NOT NULL,
    pid          int NOT NULL,
    streams      text[] NOT NULL,
    concurrency  int NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    -- The kinds its App handles, with each handler's settings (a list of objects: kind, type,
    -- async, steps, max_attempts, visibility_timeout, timeout and the kind limits it names);
    -- NULL for a worker of a release before 0020. What the dashboard's Kinds page lists.
    kinds        jsonb
);

-- schema: functions -------------------------------------------------------------------------
-- The registry's writes, so a worker's role reaches the table only through them (the registry
-- is liveness, not queue state: no op).

-- A worker process announces itself; its id is the worker_instance of its leases.
CREATE OR REPLACE FUNCTION pgqueue.register_worker(p_node int, p_host text, p_pid int,
                                                   p_streams text[], p_concurrency int)
RETURNS bigint
LANGUAGE sql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
    INSERT INTO pgqueue.worker (node, host, pid, streams, concurrency)
    VALUES (p_node, p_host, p_pid, p_streams, p_concurrency)
    RETURNING id
$$;

-- The kinds a registered worker handles, with its handlers' settings (pgqueue.worker.kinds).
CREATE OR REPLACE FUNCTION pgqueue.register_worker_kinds(p_id bigint, p_kinds jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
BEGIN
    IF jsonb_typeof(p_kinds) IS DISTINCT FROM 'array' THEN
        RAISE EXCEPTION 'register_worker_kinds: kinds must be a JSON array, got %',
            coalesce(jsonb_typeof(p_kinds), 'NULL') USING ERRCODE = '22023';
    END IF;
    UPDATE pgqueue.worker SET kinds = p_kinds WHERE id = p_id;
END
$$;

-- A heartbeat; NULL when the worker is no longer registered (pruned after a long silence).
CREATE OR REPLACE FUNCTION pgqueue.heartbeat_worker(p_id bigint) RETURNS bigint
LANGUAGE sql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
    UPDATE pgqueue.worker SET heartbeat_at = now() WHERE id = p_id RETURNING id
$$;

CREATE OR REPLACE FUNCTION pgqueue.deregister_worker(p_id bigint) RETURNS void
LANGUAGE sql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
    DELETE FROM pgqueue.worker WHERE id = p_id
$$;

-- Forget workers that stopped heartbeating more than p_older_than seconds ago (a minute at
-- least: live workers heartbeat every few seconds, and none is forgotten while it does).
CREATE OR REPLACE FUNCTION pgqueue.prune_workers(p_older_than float8) RETURNS int
LANGUAGE sql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
    WITH gone AS (DELETE FROM pgqueue.worker
                  WHERE heartbeat_at < now() - greatest(p_older_than, 60) * interval '1 second'
                  RETURNING 1)
    SELECT count(*)::int FROM gone
$$;

-- queries -----------------------------------------------------------------------------------

-- name: register_worker
-- A worker process announces itself; its id is the worker_instance of its leases.
SELECT pgqueue.register_worker(%(node)s::int, %(host)s::text, %(pid)s::int,
                               %(streams)s::text[], %(concurrency)s::int) AS id

-- name: register_worker_kinds
SELECT pgqueue.register_worker_kinds(%(id)s::bigint, %(kinds)s::jsonb)

-- name: worker_kinds
-- The kinds the live workers handle (a heartbeat within %(stale_after)s seconds), each with
-- the workers handling it, per stream the worker works on, and its handler's settings as
-- the first of them registered them.
SELECT s.stream, k.value ->> 'kind' AS kind,
       (array_agg(k.value ORDER BY w.id))[1] AS handler,
       array_agg(jsonb_build_object('id', w.id, 'node', w.node, 'host', w.host, 'pid', w.pid)
                 ORDER BY w.id) AS workers
FROM pgqueue.worker w
CROSS JOIN LATERAL jsonb_array_elements(coalesce(w.kinds, '[]'::jsonb)) k
CROSS JOIN LATERAL unnest(w.streams) s(stream)
WHERE w.heartbeat_at > now() - %(stale_after)s * interval '1 second'
GROUP BY s.stream, k.value ->> 'kind'
ORDER BY s.stream, kind

-- name: heartbeat_worker
SELECT id FROM pgqueue.heartbeat_worker(%(id)s::bigint) AS t(id) WHERE id IS NOT NULL

-- name: deregister_worker
SELECT pgqueue.deregister_worker(%(id)s::bigint)

-- name: list_workers
-- Registered workers with the number of leases each holds right now, and how long ago each
-- last heartbeat was by the database's clock (the heartbeats' own), not the reader's.
-- The leases counted first, by holder (on Citus, where the workers' table is the
-- coordinator's own, a correlated count over the jobs is not planned).
WITH held AS MATERIALIZED (
    SELECT j.worker_node, j.worker_instance, count(*) AS leases FROM pgqueue.job j
    WHERE j.state = 'leased'
    GROUP BY j.worker_node, j.worker_instance
)
SELECT w.id, w.node, w.host, w.pid, w.streams, w.concurrency, w.started_at, w.heartbeat_at,
       -- (at least 0: a heartbeat committed after this statement's transaction began, before
       -- its snapshot, is newer than now())
       greatest(0, extract(epoch FROM now() - w.heartbeat_at))::float8 AS heartbeat_age_seconds,
       coalesce(h.leases, 0) AS leases
FROM pgqueue.worker w
LEFT JOIN held h ON h.worker_node = w.node AND h.worker_instance = w.id
ORDER BY w.id

-- name: register_step_set
SELECT pgqueue.register_step_set(%(hash)s::text, %(kind)s::text, %(steps)s::jsonb) AS inserted

-- name: step_set_by_hash
SELECT hash, kind, steps FROM pgqueue.step_set WHERE hash = %(hash)s

-- name: configure_kind
-- Set the kind settings named in %(settings)s (a JSON null clears one), leave the others.
SELECT pgqueue.configure_kind_settings(%(stream)s::text, %(kind)s::text, %(settings)s::jsonb) AS changed

-- name: kinds_list
-- The kinds with settings, of one stream (every stream's when %(stream)s is NULL).
SELECT stream, kind, quarantine_after, max_concurrency, rate_count, rate_ms, max_per_key
FROM pgqueue.kind_config
WHERE %(stream)s::text IS NULL OR stream = %(stream)s::text
ORDER BY stream, kind

-- name: return_leases
-- Give leases back without costing an attempt (graceful shutdown); returns the jobs let go of
-- and the state each went to (pending; cancelled when a cancel was requested). All of
-- %(stream)s (the caller groups its leases by stream).
SELECT id, state FROM pgqueue.return_leases(%(job_ids)b::bigint[], %(lease_ids)b::bigint[],
                                            %(stream)s::text)

-- name: mark_undecodable
-- Park the job as undecodable: 'undecodable', 'cancelled' (a cancel was requested); NULL:
-- the lease was lost.
SELECT pgqueue.mark_undecodable(%(job_id)s::bigint, %(lease_id)s::bigint, %(reason)s::text,
                                %(detail)s::jsonb, %(stream)s::text) AS marked

-- name: upcast_job
SELECT pgqueue.upcast(%(job_id)s::bigint, %(lease_id)s::bigint, %(payload)s::bytea,
                      %(schema_version)s::int, %(stream)s::text) AS done
