-- name: try_maintenance_lock
-- Elect one maintenance runner per database: a session-level advisory lock, released when the
-- holder's connection ends (so a dead runner is replaced by the next pass elsewhere).
SELECT pg_try_advisory_lock(hashtext('pgqueue.maintenance')) AS elected

-- name: prune_workers
-- Forget workers that stopped heartbeating long ago.
DELETE FROM pgqueue.worker WHERE heartbeat_at < now() - %(older_than)s * interval '1 second'
