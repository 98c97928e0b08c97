-- name: node_get
-- This database's role, epoch and (for a replica) its leader.
SELECT role, epoch, name, leader, changed_at FROM pgqueue.node

-- name: node_lock
-- The role row under lock: a follower's apply and a promotion serialise on it.
SELECT role, epoch, name, leader FROM pgqueue.node FOR UPDATE

-- name: node_set_role
SELECT role, epoch, name, leader FROM pgqueue.set_role(%(role)s::text, %(name)s::text, %(leader)s::text)

-- name: wal_level
SELECT current_setting('wal_level') AS wal_level

-- name: publication_exists
SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = %(name)s) AS exists

-- name: create_publication
-- Logical replication of the op log: inserts only (the log is append-only; pruning is local).
CREATE PUBLICATION pgqueue_oplog FOR TABLE pgqueue.op_log WITH (publish = 'insert')

-- name: enable_apply_trigger
SELECT pgqueue.enable_apply_trigger()

-- name: disable_apply_trigger
SELECT pgqueue.disable_apply_trigger()

-- name: subscription_of
SELECT subname, subslotname, subenabled FROM pg_subscription
WHERE subname = %(name)s AND subdbid = (SELECT oid FROM pg_database WHERE datname = current_database())

-- name: drop_slot
SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
WHERE slot_name = %(slot)s AND NOT active

-- name: replica_register
INSERT INTO pgqueue.replica (name, method, slot_name, dsn)
VALUES (%(name)s, %(method)s, %(slot)s, %(dsn)s)
ON CONFLICT (name) DO UPDATE SET method = excluded.method, slot_name = excluded.slot_name,
    dsn = excluded.dsn, attached_at = now(), seen_at = now()

-- name: replica_unregister
DELETE FROM pgqueue.replica WHERE name = %(name)s RETURNING slot_name

-- name: replica_confirm
-- A follower reports that every op at or below %(seq)s is applied on it.
UPDATE pgqueue.replica SET confirmed_seq = greatest(confirmed_seq, %(seq)s), seen_at = now()
WHERE name = %(name)s RETURNING name

-- name: replica_status
SELECT name, method, applied_seq, lag_ops, lag_seconds, active, seen_at, stale
FROM pgqueue.replica_status(%(stale_after)s * interval '1 second', %(wait)s * interval '1 second')

-- name: oplog_prune
SELECT pgqueue.prune_op_log(%(keep)s * interval '1 second', %(stale_after)s * interval '1 second',
                            %(limit)s::int, %(wait)s * interval '1 second') AS pruned

-- name: oplog_head
-- The op-log sequence's last value (read before a follower's snapshot; not transactional).
SELECT coalesce(pg_sequence_last_value(pg_get_serial_sequence('pgqueue.op_log', 'seq')), 0) AS seq

-- name: snapshot_bounds
-- This transaction's snapshot: every xid below xmin has finished; xmax is the next xid.
SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS xmin,
       pg_snapshot_xmax(pg_current_snapshot())::text AS xmax

-- name: follow_state_get
SELECT name, low_seq, mark_seq, mark_xmax::text AS mark_xmax FROM pgqueue.follow_state
WHERE name = %(name)s

-- name: follow_state_put
INSERT INTO pgqueue.follow_state (name, low_seq, mark_seq, mark_xmax, updated_at)
VALUES (%(name)s, %(low_seq)s, %(mark_seq)s, %(mark_xmax)s::xid8, now())
ON CONFLICT (name) DO UPDATE SET low_seq = excluded.low_seq, mark_seq = excluded.mark_seq,
    mark_xmax = excluded.mark_xmax, updated_at = now()

-- name: oplog_span
-- The op log's extent: a replica has caught up when it holds every seq in the leader's span.
SELECT coalesce(min(seq), 0) AS min_seq, coalesce(max(seq), 0) AS max_seq, count(*) AS ops
FROM pgqueue.op_log

-- name: oplog_count_between
SELECT count(*) AS ops FROM pgqueue.op_log WHERE seq BETWEEN %(lo)s AND %(hi)s

-- name: pruned_through
-- The highest op seq this database ever pruned (a follower below it has a gap).
SELECT pruned_through FROM pgqueue.node

-- name: lock_op_log
-- Pause writers (verify): every transition appends to op_log, so this blocks them until commit.
LOCK TABLE pgqueue.op_log IN EXCLUSIVE MODE

-- name: table_digests
-- One digest per state table, ordered by key, for comparing two databases.
SELECT 'job' AS tbl, count(*) AS n, md5(coalesce(string_agg(t::text, '|' ORDER BY t.id), '')) AS digest
FROM pgqueue.job t
UNION ALL
SELECT 'dead_letter', count(*), md5(coalesce(string_agg(t::text, '|' ORDER BY t.id), ''))
FROM pgqueue.dead_letter t
UNION ALL
SELECT 'stream_config', count(*), md5(coalesce(string_agg(t::text, '|' ORDER BY t.stream), ''))
FROM pgqueue.stream_config t
UNION ALL
SELECT 'kind_config', count(*), md5(coalesce(string_agg(t::text, '|' ORDER BY t.stream, t.kind), ''))
FROM pgqueue.kind_config t
UNION ALL
SELECT 'step_set', count(*), md5(coalesce(string_agg(t::text, '|' ORDER BY t.hash), ''))
FROM pgqueue.step_set t
UNION ALL
SELECT 'schedule', count(*), md5(coalesce(string_agg(t::text, '|' ORDER BY t.stream, t.name), ''))
FROM pgqueue.schedule t
UNION ALL
SELECT 'op_log', count(*), md5(coalesce(string_agg(t::text, '|' ORDER BY t.seq), ''))
FROM pgqueue.op_log t WHERE t.seq >= %(min_seq)s  -- the leader may have pruned older ops

-- name: row_digests
-- Per-row digests of the live and dead job tables, to name the rows that differ.
SELECT 'job' AS tbl, t.id, md5(t::text) AS digest FROM pgqueue.job t
UNION ALL
SELECT 'dead_letter', t.id, md5(t::text) FROM pgqueue.dead_letter t

-- name: seed_bounds
-- Opens the leader snapshot a replica is seeded from (run first in a REPEATABLE READ
-- transaction): the snapshot itself, how far the op log was pruned, and the sequences' last
-- values (read after the snapshot, so at least every id it holds).
SELECT pg_current_snapshot()::text AS snapshot,
       (SELECT pruned_through FROM pgqueue.node) AS pruned_through,
       (SELECT last_value FROM pgqueue.job_id_seq) AS job_id,
       (SELECT last_value FROM pgqueue.lease_id_seq) AS lease_id,
       coalesce(pg_sequence_last_value(pg_get_serial_sequence('pgqueue.op_log', 'seq')), 0) AS seq

-- name: seed_small_tables
-- The small queue-state tables whole, one jsonb array each.
SELECT 'stream_config' AS tbl, coalesce(jsonb_agg(to_jsonb(t)), '[]') AS rows FROM pgqueue.stream_config t
UNION ALL
SELECT 'kind_config', coalesce(jsonb_agg(to_jsonb(t)), '[]') FROM pgqueue.kind_config t
UNION ALL
SELECT 'step_set', coalesce(jsonb_agg(to_jsonb(t)), '[]') FROM pgqueue.step_set t
UNION ALL
SELECT 'schedule', coalesce(jsonb_agg(to_jsonb(t)), '[]') FROM pgqueue.schedule t

-- name: seed_job_page
-- The next jobs after id %(after)s, as jsonb rows.
SELECT id AS key, to_jsonb(t) AS row FROM pgqueue.job t
WHERE id > %(after)s ORDER BY id LIMIT %(limit)s

-- name: seed_dead_letter_page
-- The next dead letters after id %(after)s, as jsonb rows.
SELECT id AS key, to_jsonb(t) AS row FROM pgqueue.dead_letter t
WHERE id > %(after)s ORDER BY id LIMIT %(limit)s

-- name: seed_insert
-- Insert seeded rows into one of the replica's queue-state tables (or its op log, unapplied).
SELECT pgqueue.seed_rows(%(table)s::text, %(rows)s::jsonb) AS n

-- name: seed_finish
-- Record the seed on the replica and move its sequences to the leader's.
WITH node AS (
    UPDATE pgqueue.node SET seed_snapshot = %(snapshot)s::pg_snapshot,
                            seeded_through = %(pruned_through)s::bigint
    RETURNING 1
)
SELECT setval('pgqueue.job_id_seq', greatest(%(job_id)s::bigint, 1)) AS job_id,
       setval('pgqueue.lease_id_seq', greatest(%(lease_id)s::bigint, 1)) AS lease_id,
       setval(pg_get_serial_sequence('pgqueue.op_log', 'seq'), greatest(%(seq)s::bigint, 1)) AS seq,
       (SELECT count(*) FROM node) AS updated

-- name: seeded_through
-- How far the leader had pruned when this replica was seeded from its state (0: not seeded).
SELECT seeded_through FROM pgqueue.node

-- name: replica_is_empty
-- A replica that holds nothing yet (no jobs, dead letters, schedules or ops).
SELECT NOT EXISTS (SELECT 1 FROM pgqueue.job) AND NOT EXISTS (SELECT 1 FROM pgqueue.dead_letter)
       AND NOT EXISTS (SELECT 1 FROM pgqueue.schedule) AND NOT EXISTS (SELECT 1 FROM pgqueue.op_log)
       AS empty
