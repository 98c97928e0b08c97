-- name: reclaim_expired
-- Return up to %(limit)s expired leases (of every stream) to pending, dead or quarantined.
SELECT pgqueue.reclaim_expired(%(limit)s::int) AS reclaimed
