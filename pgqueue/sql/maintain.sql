-- name: try_maintenance_lock
-- Elect one maintenance runner per database: a session-level advisory lock, released when the
-- holder's connection ends (so a dead runner is replaced by the next pass elsewhere).
SELECT pg_try_advisory_lock(hashtext('pgqueue.maintenance')) AS elected

-- name: prune_workers
-- Forget workers that stopped heartbeating long ago.
DELETE FROM pgqueue.worker WHERE heartbeat_at < now() - %(older_than)s * interval '1 second'

-- name: job_dead_tuples
-- Dead row versions in the hot job table (from the statistics collector; about a second old).
SELECT n_live_tup AS live, n_dead_tup AS dead,
       extract(epoch FROM now() - greatest(last_vacuum, last_autovacuum))::float8 AS since_vacuum
FROM pg_stat_user_tables WHERE schemaname = 'pgqueue' AND relname = 'job'
