-- replica: A database's role (leader or replica), the replica registry, seeding and status.

-- schema: tables ----------------------------------------------------------------------------
-- This database's role. A replica refuses queue writes (pgqueue.require_leader) but applies
-- its leader's ops. Local to each database: never in the op log.
CREATE TABLE pgqueue.node (
    id         boolean PRIMARY KEY DEFAULT true CHECK (id),
    role       text NOT NULL DEFAULT 'leader' CHECK (role IN ('leader', 'replica')),
    epoch      int NOT NULL DEFAULT 1,
    name       text,         -- this database's name as a replica
    leader     text,         -- a replica's leader (DSN without password)
    pruned_through bigint NOT NULL DEFAULT 0,  -- the highest op seq ever pruned here
    changed_at timestamptz NOT NULL DEFAULT now(),
    -- A replica seeded from the leader's state (its op log was pruned): the leader snapshot the
    -- state was copied in, and the leader's pruned_through then. An op whose transaction that
    -- snapshot saw committed is already in the copied state: it is logged, never applied again.
    seed_snapshot  pg_snapshot,
    seeded_through bigint NOT NULL DEFAULT 0,
    -- The highest op seq this database held when it was promoted. Those ops were written by
    -- another leader: their xid and lsn columns are that leader's, meaningless against this
    -- database's own snapshots and slots, and every one of them is committed.
    promoted_through bigint NOT NULL DEFAULT 0
);
INSERT INTO pgqueue.node DEFAULT VALUES;

-- The leader's registry of replicas (local; never in the op log).
CREATE TABLE pgqueue.replica (
    name          text PRIMARY KEY,
    method        text NOT NULL CHECK (method IN ('logical', 'follow')),
    slot_name     text,                      -- logical: the subscription's slot here
    dsn           text,                      -- the replica's DSN without password
    attached_at   timestamptz NOT NULL DEFAULT now(),
    confirmed_seq bigint NOT NULL DEFAULT 0, -- follow: every op at or below is applied there
    seen_at       timestamptz NOT NULL DEFAULT now()
);

-- A follower's progress, kept in the replica in the same transaction as the ops it applied:
-- every op at or below low_seq is applied (or will never commit); mark_seq/mark_xmax are the
-- op-log head a poll read and an xid assigned after it (see pgqueue/replicas/follow.py).
CREATE TABLE pgqueue.follow_state (
    name       text PRIMARY KEY,
    low_seq    bigint NOT NULL DEFAULT 0,
    mark_seq   bigint NOT NULL DEFAULT 0,
    mark_xmax  xid8,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- schema: functions -------------------------------------------------------------------------

-- Set this database's role. Promotion to leader bumps the epoch.
CREATE OR REPLACE FUNCTION pgqueue.set_role(p_role text, p_name text DEFAULT NULL, p_leader text DEFAULT NULL)
RETURNS pgqueue.node
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    n pgqueue.node;
    v_was text;
BEGIN
    -- Wait for every transition in flight (each read this table in require_leader, and holds
    -- its ACCESS SHARE lock) before the role changes, so none commits as a leader's write
    -- after a demotion; the ones that come later wait, then read the new role.
    LOCK TABLE pgqueue.node IN ACCESS EXCLUSIVE MODE;
    SELECT role INTO v_was FROM pgqueue.node;
    UPDATE pgqueue.node
    SET epoch = CASE WHEN p_role = 'leader' AND role <> 'leader' THEN epoch + 1 ELSE epoch END,
        role = p_role, name = coalesce(p_name, name),
        leader = CASE WHEN p_role = 'leader' THEN NULL ELSE p_leader END,
        seed_snapshot = CASE WHEN p_role = 'leader' THEN NULL ELSE seed_snapshot END,
        promoted_through = CASE WHEN p_role = 'leader' AND role <> 'leader'
                                THEN greatest(promoted_through,
                                              (SELECT coalesce(max(o.seq), 0) FROM pgqueue.op_log o))
                                ELSE promoted_through END,
        changed_at = now()
    RETURNING * INTO n;
    IF p_role = 'leader' AND v_was IS DISTINCT FROM 'leader' THEN
        -- where reclaim finds the leases the apply path copied (it writes no lease_expiry rows)
        INSERT INTO pgqueue.lease_expiry (slot, expires_at, job_ids)
        SELECT pgqueue.expiry_slot(j.lease_expires_at), j.lease_expires_at, array_agg(j.id ORDER BY j.id)
        FROM pgqueue.job j WHERE j.state = 'leased' GROUP BY j.lease_expires_at;
    END IF;
    RETURN n;
END
$$;

-- True when the op of transaction p_xid is already in a seeded replica's copied state.
CREATE OR REPLACE FUNCTION pgqueue.reflected(p_xid xid8) RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$ SELECT coalesce(pg_visible_in_snapshot(p_xid, n.seed_snapshot), false) FROM pgqueue.node n $$;

-- Seed a replica's table from rows of the leader's (jsonb, as to_jsonb gives them). Only the
-- queue-state tables and the op log; rows already present are an error (seed an empty replica).
CREATE OR REPLACE FUNCTION pgqueue.seed_rows(p_table text, p_rows jsonb) RETURNS int
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    v_n int;
BEGIN
    IF p_table NOT IN ('job', 'dead_letter', 'stream_config', 'kind_config', 'step_set',
                       'schedule', 'op_log') THEN
        RAISE EXCEPTION 'seed_rows: % is not a queue-state table', quote_literal(p_table)
            USING ERRCODE = '22023';
    END IF;
    EXECUTE format('INSERT INTO pgqueue.%I SELECT * FROM jsonb_populate_recordset(NULL::pgqueue.%I, $1)',
                   p_table, p_table) USING p_rows;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;

-- On a replica fed by logical replication: apply each op the subscription inserts into op_log,
-- unless its seq is already applied (ops arrive in commit order, not seq order, so never skip
-- by "seq <= last"). Only the apply worker runs with session_replication_role = replica, so
-- inserts by the follow reader or by hand are left to ingest_op. search_path is pinned: the
-- apply worker runs with an empty one.
CREATE OR REPLACE FUNCTION pgqueue.op_log_apply_trigger() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
BEGIN
    IF current_setting('session_replication_role') <> 'replica' THEN
        RETURN NEW;
    END IF;
    IF EXISTS (SELECT 1 FROM pgqueue.op_log WHERE seq = NEW.seq) THEN
        RETURN NULL;
    END IF;
    IF NOT pgqueue.reflected(NEW.xid) THEN
        PERFORM pgqueue.apply_op(NEW.op, NEW.stream, NEW.job_id, NEW.lease_id, pgqueue.op_body(NEW));
    END IF;
    RETURN NEW;
END
$$;

-- The trigger exists only on replicas (attach creates it, promote drops it), so the leader's
-- hot path never pays for it.
CREATE OR REPLACE FUNCTION pgqueue.enable_apply_trigger() RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
BEGIN
    DROP TRIGGER IF EXISTS op_log_apply ON pgqueue.op_log;
    CREATE TRIGGER op_log_apply BEFORE INSERT ON pgqueue.op_log
        FOR EACH ROW EXECUTE FUNCTION pgqueue.op_log_apply_trigger();
    ALTER TABLE pgqueue.op_log ENABLE ALWAYS TRIGGER op_log_apply;
END
$$;

CREATE OR REPLACE FUNCTION pgqueue.disable_apply_trigger() RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$ DROP TRIGGER IF EXISTS op_log_apply ON pgqueue.op_log $$;

-- Where each registered replica stands, in ops and seconds behind this leader. With p_upto,
-- only the ops up to that seq are examined (an index range, not the whole log): applied_seq is
-- then how far into that prefix the replica is proven to have applied, and the lag figures
-- count only the prefix. pgqueue.prune_op_log uses it for the prefix it may delete.
-- seen_at is when the leader last saw the replica alive: a logical replica whenever its slot
-- is active (here or in pgqueue.touch_replicas, every maintenance pass) or has confirmed a
-- position past an op, a follower when it confirms; status stores what it saw (outside a
-- read-only transaction). stale: not active and not seen for p_stale_after, by
-- pgqueue.now_ms() (which tests pin).
CREATE OR REPLACE FUNCTION pgqueue.replica_status(p_stale_after interval DEFAULT interval '1 day',
                                       p_wait interval DEFAULT interval '1 second',
                                       p_upto bigint DEFAULT NULL)
RETURNS TABLE (name text, method text, applied_seq bigint, lag_ops bigint, lag_seconds float8,
               active boolean, seen_at timestamptz, stale boolean)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
-- A logical replica's slot confirms WAL positions, not ops, and may confirm a position inside a
-- transaction that is still to be sent (a keepalive while the walsender waits for WAL), so an
-- op's insert LSN below the confirmed position does not prove the op applied. Two rules do:
--  * every transaction visible in a snapshot committed before the WAL insert position read
--    after it; once the slot confirms that position, all of them are applied (exact figures;
--    waits up to p_wait for the slot to get there);
--  * an op below the slot's restart_lsn belongs to a transaction that committed before the
--    confirmed position (the slot keeps the start of every later one), so it is applied.
-- Ops neither rule proves count as lag: the figures are exact or an upper bound, never low.
DECLARE
    v_promoted bigint := (SELECT n.promoted_through FROM pgqueue.node n);
    r pgqueue.replica;
    v_snap pg_snapshot;
    v_wal pg_lsn;
    v_confirmed pg_lsn;
    v_restart pg_lsn;
    v_active boolean;
    v_exact boolean;
    v_deadline timestamptz := clock_timestamp() + p_wait;
    v_now timestamptz := pgqueue.now_ms();
    v_writable boolean := NOT current_setting('transaction_read_only')::boolean;
BEGIN
    v_snap := pg_current_snapshot();
    v_wal := pg_current_wal_insert_lsn();
    FOR r IN SELECT * FROM pgqueue.replica ORDER BY replica.name LOOP
        name := r.name;
        method := r.method;
        IF r.method = 'logical' THEN
            LOOP
                SELECT s.confirmed_flush_lsn, s.restart_lsn, s.active
                INTO v_confirmed, v_restart, v_active
                FROM pg_replication_slots s WHERE s.slot_name = r.slot_name;
                v_exact := v_confirmed IS NOT NULL AND v_confirmed >= v_wal;
                EXIT WHEN v_exact OR NOT coalesce(v_active, false) OR clock_timestamp() >= v_deadline;
                PERFORM pg_sleep(0.005);
            END LOOP;
            active := coalesce(v_active, false);
            seen_at := CASE WHEN active THEN greatest(r.seen_at, v_now) ELSE r.seen_at END;
            IF NOT active AND v_confirmed IS NOT NULL THEN
                -- the slot is idle now, but the replica confirmed a WAL position at or past
                -- this op, so it was alive after the op's transaction began
                seen_at := greatest(seen_at, (SELECT o.at FROM pgqueue.op_log o
                                              WHERE o.lsn <= v_confirmed
                                              ORDER BY o.seq DESC LIMIT 1));
            END IF;
            SELECT count(*), extract(epoch FROM now() - min(o.at))::float8, min(o.seq) - 1
            INTO lag_ops, lag_seconds, applied_seq
            FROM pgqueue.op_log o
            WHERE o.seq <= coalesce(p_upto, 9223372036854775807)
              -- ops from before a promotion carry another leader's xid and lsn: proved only
              -- by the exact snapshot (they committed), never by this database's slot
              AND NOT ((v_exact AND (o.seq <= v_promoted OR pg_visible_in_snapshot(o.xid, v_snap)))
                       OR (v_restart IS NOT NULL AND o.seq > v_promoted AND o.lsn < v_restart));
            IF applied_seq IS NULL THEN
                -- everything examined is applied; when nothing is kept, whatever was pruned was
                SELECT coalesce(p_upto, max(o.seq), (SELECT pruned_through FROM pgqueue.node), 0)
                INTO applied_seq FROM pgqueue.op_log o;
            END IF;
        ELSE
            active := r.seen_at > v_now - interval '1 minute';
            seen_at := r.seen_at;
            applied_seq := r.confirmed_seq;
            SELECT count(*), extract(epoch FROM now() - min(o.at))::float8 INTO lag_ops, lag_seconds
            FROM pgqueue.op_log o
            WHERE o.seq > r.confirmed_seq AND o.seq <= coalesce(p_upto, 9223372036854775807);
        END IF;
        lag_seconds := coalesce(lag_seconds, 0);
        stale := NOT active AND seen_at < v_now - p_stale_after;
        IF v_writable AND seen_at > r.seen_at + interval '1 second' THEN
            -- remember it: a short disconnect later is measured from here, not from attach
            UPDATE pgqueue.replica x SET seen_at = replica_status.seen_at
            WHERE x.name = r.name AND x.seen_at < replica_status.seen_at;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;

-- The leader sees every logical replica whose slot is active now: its seen_at moves to now
-- (at most once per p_every, so a pass every second does not rewrite the rows every second).
-- A follower's seen_at moves when it confirms (replica_confirm). Returns the rows moved.
CREATE OR REPLACE FUNCTION pgqueue.touch_replicas(p_every interval DEFAULT interval '10 seconds')
RETURNS int
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    v_now timestamptz := pgqueue.now_ms();
    v_n int;
BEGIN
    UPDATE pgqueue.replica r SET seen_at = v_now
    FROM pg_replication_slots s
    WHERE r.method = 'logical' AND s.slot_name = r.slot_name AND s.active
      AND r.seen_at < v_now - p_every;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;

-- queries -----------------------------------------------------------------------------------

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
CREATE PUBLICATION pgqueue_oplog FOR TABLE pgqueue.op_log WITH (publish = 'insert', publish_via_partition_root = true)

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

-- name: replica_touch
-- Logical replicas whose slot is active now were seen now (a maintenance pass on the leader).
SELECT pgqueue.touch_replicas() AS touched

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
SELECT coalesce(pg_sequence_last_value(pg_get_serial_sequence('pgqueue.op_log', 'seq')::regclass), 0) AS seq

-- name: snapshot_bounds
-- This transaction's snapshot: every xid below xmin has finished.
SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS xmin

-- name: xid_after_head
-- An xid assigned now, after the follower read the op-log head: every transaction that drew a
-- seq at or below that head had its xid before, so below this one (a follower's mark). Not
-- pg_snapshot_xmax, the latest finished xid + 1: a running transaction may be above it.
SELECT pg_current_xact_id()::text AS xid

-- name: follow_state_get
SELECT name, low_seq, mark_seq, mark_xmax::text AS mark_xmax FROM pgqueue.follow_state
WHERE name = %(name)s

-- name: follow_state_put
INSERT INTO pgqueue.follow_state (name, low_seq, mark_seq, mark_xmax, updated_at)
VALUES (%(name)s, %(low_seq)s, %(mark_seq)s, %(mark_xmax)s::xid8, now())
ON CONFLICT (name) DO UPDATE SET low_seq = excluded.low_seq, mark_seq = excluded.mark_seq,
    mark_xmax = excluded.mark_xmax, updated_at = now()

-- name: follow_state_forget_mark
-- A follower (re)starting forgets the xid mark of its previous poll: that xid may be another
-- leader's (the follower now reads a promoted replica), meaningless against this one's
-- snapshots. Its low-water mark stays; the next poll takes a fresh mark (only later progress).
UPDATE pgqueue.follow_state SET mark_seq = 0, mark_xmax = NULL WHERE name = %(name)s

-- name: leader_started
-- When the server was started: a restart after a crash may hand out again op seqs and xids
-- of transactions that never committed (their WAL was not flushed), so a follower rewinds.
SELECT pg_postmaster_start_time()::text AS started

-- name: applied_head
-- The highest op seq this replica holds (applied or, seeded, logged).
SELECT coalesce(max(seq), 0) AS seq FROM pgqueue.op_log

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
       coalesce(pg_sequence_last_value(pg_get_serial_sequence('pgqueue.op_log', 'seq')::regclass), 0) AS seq

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
SELECT setval('pgqueue.job_id_seq'::regclass, greatest(%(job_id)s::bigint, 1)) AS job_id,
       setval('pgqueue.lease_id_seq'::regclass, greatest(%(lease_id)s::bigint, 1)) AS lease_id,
       setval(pg_get_serial_sequence('pgqueue.op_log', 'seq')::regclass, greatest(%(seq)s::bigint, 1)) AS seq,
       (SELECT count(*) FROM node) AS updated

-- name: seeded_through
-- How far the leader had pruned when this replica was seeded from its state (0: not seeded).
SELECT seeded_through FROM pgqueue.node

-- name: replica_is_empty
-- A replica that holds nothing yet (no jobs, dead letters, schedules or ops).
SELECT NOT EXISTS (SELECT 1 FROM pgqueue.job) AND NOT EXISTS (SELECT 1 FROM pgqueue.dead_letter)
       AND NOT EXISTS (SELECT 1 FROM pgqueue.schedule) AND NOT EXISTS (SELECT 1 FROM pgqueue.op_log)
       AS empty
