-- oplog: The op log and the one apply path that turns an op into state (replay, replicas).

-- schema: tables ----------------------------------------------------------------------------
-- The append-only op log: one op per job per transition, written in the transition's
-- transaction. seq is assigned at insert (not commit); xid lets a reader take only rows whose
-- transaction is below the snapshot's xmin. Replicas and replays insert rows with the leader's
-- seq, xid and at, so the log itself is identical everywhere.
--
-- An Enqueue op keeps the job's own fields (kind .. schema_version) in typed columns and in its
-- body only what its whole call shares (enqueued_at_ms, attempts): building a 13-key jsonb per
-- job was the largest single cost of a batched enqueue (1,000 jobs in one statement: 9.3 ms
-- with the body, 5.8 ms with columns). pgqueue.op_body(op_log) gives the whole body back.
-- Enqueue ops written before revision 0003 keep their full body and NULL columns.
-- The column order is the order revisions added them in (a logical subscriber matches columns
-- by name, but SELECT * and the catalog test see positions).
--
-- seq is drawn only once the writing transaction has an xid (the CASE evaluates
-- pg_current_xact_id() first): a follow reader's mark (follow.py) relies on every transaction
-- that holds a seq having had its xid before the seq was drawn. An identity column could not
-- say so (its default is nextval alone: an INSERT that was the transaction's first write drew
-- the seq while it had no xid yet). A plain sequence owned by the column, since 0005.
CREATE SEQUENCE pgqueue.op_log_seq_seq;
-- The log lives on a ring of 32 partitions, op_log_0 .. op_log_31, so that its retention
-- removes history by truncating whole partitions: a DELETE of old ops left a dead row per op,
-- and while anything held the vacuum horizon back (a long transaction, a report, a logical
-- slot) none of them could be removed. An op's partition follows from its seq alone,
-- (seq >> 32) % 32, so a replica or a replay that inserts the leader's seq puts it in the
-- same partition, and every partition always exists. The maintenance pass
-- (pgqueue.recycle_op_log) moves the sequence on to the next multiple of 2^32 once the current
-- partition is older than a 24th of the retention, and truncates a partition once all of it is
-- older than the retention, committed, and applied by every replica: seq has gaps there, as
-- after a rollback. Nothing is indexed on the parent but job_id and at: a primary key (or a
-- unique index) on a table partitioned by an expression is refused, so each partition has its
-- own; since seq decides the partition, unique per partition is unique in the log.
CREATE TABLE pgqueue.op_log (
    seq      bigint NOT NULL
             DEFAULT CASE WHEN pg_current_xact_id() IS NOT NULL
                          THEN nextval('pgqueue.op_log_seq_seq') END,
    stream   text NOT NULL,
    op       text NOT NULL,
    job_id   bigint,
    lease_id bigint,
    body     jsonb NOT NULL,
    xid      xid8 NOT NULL DEFAULT pg_current_xact_id(),
    at       timestamptz NOT NULL DEFAULT now(),
    -- WAL insert position, to tell which ops a logical replica's slot has confirmed
    lsn      pg_lsn NOT NULL DEFAULT pg_current_wal_insert_lsn(),
    kind           text,
    payload        bytea,
    priority       smallint,
    not_before     timestamptz,
    dedup_key      bytea,
    max_attempts   int,
    schema_version int,
    -- The request token of the enqueue or lease call that wrote this op, on the first op of
    -- the call only: a call re-sent after its reply was lost finds it and returns what the
    -- first attempt did instead of doing it twice (pgqueue.request_begin). It travels to
    -- replicas with the row, so a retry on a promoted replica finds it too.
    request        uuid
) PARTITION BY LIST (((seq >> 32) % 32));
ALTER SEQUENCE pgqueue.op_log_seq_seq OWNED BY pgqueue.op_log.seq;
COMMENT ON COLUMN pgqueue.op_log.payload IS
    'Enqueue ops (0003 on): the job''s payload; kind .. schema_version likewise. NULL for other ops; pgqueue.op_body(op_log) gives the whole body.';
CREATE INDEX op_log_job_idx ON pgqueue.op_log (job_id);
-- No index on lsn: no query reads op_log by it, and every op paid ~0.2 ms per 1,000 for one.
CREATE INDEX op_log_at_idx ON pgqueue.op_log USING brin (at);
-- Each partition: its primary key, and one entry per enqueue or lease call (not per job) in a
-- unique index of request tokens: a re-sent call whose first attempt is still running waits
-- here for it, and fails if it committed (then it returns what that attempt did); looked up
-- only by a re-sent call. Unique per partition: a first attempt that arrives only after its
-- re-send committed, with a rotation of the ring in between, is not caught (request_begin's
-- lock catches every other order).
DO $$
BEGIN
    FOR s IN 0..31 LOOP
        EXECUTE format('CREATE TABLE pgqueue.%I PARTITION OF pgqueue.op_log FOR VALUES IN (%s)',
                       'op_log_' || s, s);
        EXECUTE format('ALTER TABLE pgqueue.%I ADD CONSTRAINT %I PRIMARY KEY (seq)',
                       'op_log_' || s, 'op_log_' || s || '_pkey');
        EXECUTE format('CREATE UNIQUE INDEX %I ON pgqueue.%I (request) WHERE request IS NOT NULL',
                       'op_log_' || s || '_request_idx', 'op_log_' || s);
    END LOOP;
END
$$;

-- The ring's partitions: when the current one was first written to, and when one was left
-- (the sequence moved past it) with a transaction id drawn after that, above every xid that
-- wrote to it (a seq is drawn only once its transaction has an xid). Local to each database:
-- a replica's ring is filled by its leader's seqs and recycled by nobody until it is promoted.
-- stream: '' on one server; on a Citus cluster each shard group of op_log keeps a ring of its
-- own, under the group's key (citus_shard_keys), on the group's node (0019): there every node
-- draws its own seqs, so each node's partitions are left and emptied at their own times.
CREATE TABLE pgqueue.op_log_ring (
    slot       smallint CHECK (slot BETWEEN 0 AND 31),
    opened_at  timestamptz,
    closed_at  timestamptz,
    closed_xid xid8,
    stream     text NOT NULL DEFAULT '',
    PRIMARY KEY (stream, slot)
);
INSERT INTO pgqueue.op_log_ring (slot) SELECT generate_series(0, 31);

-- How long the maintenance passes keep ops (pgqueue.recycle_op_log): a day by default (what
-- that costs at 1,000 jobs/s: README); pgqueue.set_op_log_retention sets it. One row, local to
-- each database, in a table of its own: a new table is all the upgrade to it locks.
CREATE TABLE pgqueue.op_log_policy (
    one       boolean PRIMARY KEY DEFAULT true CHECK (one),
    -- How long ops are kept: a partition of the log wholly older is truncated (and only once
    -- every replica applied it).
    retention interval NOT NULL DEFAULT interval '1 day'
        CHECK (retention >= interval '1 second')
);
INSERT INTO pgqueue.op_log_policy DEFAULT VALUES;

-- schema: functions -------------------------------------------------------------------------

-- The whole body of an op: an Enqueue op's columns put back as the keys 0002 stored (job_id,
-- stream, kind, payload, priority, state, enqueued_at_ms, not_before_ms, dedup_key, attempts,
-- max_attempts, schema_version, next_job_id); any other op's body as stored. The state is the
-- one enqueue chose: scheduled when not_before is later than enqueued_at.
-- (o anyelement: an op_log row, or on a Citus worker a row of one of op_log's shards, which a
-- query sent to the shards reads as the shard's row type, op_log_102050: the same columns.)
CREATE OR REPLACE FUNCTION pgqueue.op_body(o anyelement) RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN o.op = 'Enqueue' AND o.payload IS NOT NULL THEN
        o.body || jsonb_build_object(
            'job_id', o.job_id, 'stream', o.stream, 'kind', o.kind,
            'payload', pgqueue.b64(o.payload), 'priority', o.priority,
            'state', CASE WHEN pgqueue.to_ms(o.not_before) > (o.body ->> 'enqueued_at_ms')::bigint
                          THEN 'scheduled' ELSE 'pending' END,
            'not_before_ms', pgqueue.to_ms(o.not_before), 'dedup_key', pgqueue.b64(o.dedup_key),
            'max_attempts', o.max_attempts, 'schema_version', o.schema_version,
            'next_job_id', o.job_id + 1)
    ELSE o.body END
$$;

-- Apply one op's effect to the state tables. Ops carry resulting values, never increments.
CREATE OR REPLACE FUNCTION pgqueue.apply_op(p_op text, p_stream text, p_job_id bigint, p_lease_id bigint,
                                            b jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
BEGIN
    CASE p_op
    WHEN 'Enqueue' THEN
        -- max_attempts is null in an op of a job whose producer did not set it (0005 on)
        INSERT INTO pgqueue.job (id, stream, kind, payload, priority, state, not_before,
                                 enqueued_at, dedup_key, attempts, max_attempts, schema_version,
                                 max_attempts_given, trace_context, concurrency_key,
                                 timeout_ms)
        VALUES (p_job_id, b ->> 'stream', b ->> 'kind', pgqueue.unb64(b ->> 'payload'),
                (b ->> 'priority')::smallint, b ->> 'state',
                pgqueue.from_ms((b ->> 'not_before_ms')::bigint),
                pgqueue.from_ms((b ->> 'enqueued_at_ms')::bigint),
                pgqueue.unb64(b ->> 'dedup_key'), (b ->> 'attempts')::int,
                coalesce((b ->> 'max_attempts')::int, 25), (b ->> 'schema_version')::int,
                (b ->> 'max_attempts') IS NOT NULL, b -> 'trace', b ->> 'concurrency_key',
                (b ->> 'timeout_ms')::int)
        ON CONFLICT (id) DO NOTHING;
    WHEN 'Lease' THEN
        UPDATE pgqueue.job
        SET state = 'leased', lease_id = p_lease_id, worker_node = (b ->> 'worker_node')::int,
            worker_instance = (b ->> 'worker_instance')::int,
            lease_expires_at = pgqueue.from_ms((b ->> 'expires_at_ms')::bigint),
            lease_started = coalesce((b ->> 'started')::boolean, true)
        WHERE stream = p_stream AND id = p_job_id;
    WHEN 'Renew' THEN
        UPDATE pgqueue.job
        SET lease_expires_at = pgqueue.from_ms((b ->> 'expires_at_ms')::bigint),
            last_completed_step = b #>> '{checkpoint,last_completed_step}',
            cursor_step = b #>> '{checkpoint,cursor_step}',
            cursor = pgqueue.unb64(b #>> '{checkpoint,cursor}'),
            checkpoint_updated_at = pgqueue.from_ms((b #>> '{checkpoint,updated_at_ms}')::bigint),
            schema_version = (b #>> '{checkpoint,schema_version}')::int,
            step_set_hash = b #>> '{checkpoint,step_set_hash}',
            lease_started = coalesce((b ->> 'started')::boolean, lease_started)
        WHERE stream = p_stream AND id = p_job_id AND lease_id = p_lease_id;
    WHEN 'Ack' THEN
        DELETE FROM pgqueue.job WHERE stream = p_stream AND id = p_job_id;
    WHEN 'Promote' THEN
        UPDATE pgqueue.job SET state = 'pending'
        WHERE stream = p_stream AND id = p_job_id AND state = 'scheduled' COLLATE "POSIX";
    WHEN 'Nack', 'Reclaim' THEN
        IF b ->> 'state' = 'dead' THEN
            UPDATE pgqueue.job SET max_attempts = (b ->> 'max_attempts')::int WHERE stream = p_stream AND id = p_job_id;
            PERFORM pgqueue.bury(p_stream, p_job_id, (b ->> 'attempts')::int, b ->> 'last_error',
                                 pgqueue.from_ms((b ->> 'at_ms')::bigint), b -> 'crashes_by_step',
                                 b ->> 'error_summary');
        ELSE
            UPDATE pgqueue.job
            SET state = b ->> 'state', attempts = (b ->> 'attempts')::int,
                max_attempts = (b ->> 'max_attempts')::int,
                last_error = b ->> 'last_error', error_summary = b ->> 'error_summary',
                state_reason = b ->> 'state_reason',
                state_detail = nullif(b -> 'state_detail', 'null'::jsonb),
                not_before = pgqueue.from_ms((b ->> 'not_before_ms')::bigint),
                crashes_by_step = b -> 'crashes_by_step',
                unstarted_reclaims = coalesce((b ->> 'unstarted_reclaims')::int, unstarted_reclaims),
                lease_id = NULL, worker_node = NULL, worker_instance = NULL, lease_expires_at = NULL
            WHERE stream = p_stream AND id = p_job_id;
        END IF;
    WHEN 'RequeueDeadLetter' THEN
        WITH d AS (DELETE FROM pgqueue.dead_letter WHERE stream = p_stream AND id = p_job_id RETURNING *)
        INSERT INTO pgqueue.job (id, stream, kind, payload, priority, state, not_before, enqueued_at,
            dedup_key, attempts, max_attempts, last_error, last_completed_step, cursor_step, cursor,
            checkpoint_updated_at, schema_version, step_set_hash, crashes_by_step,
            max_attempts_given, concurrency_key, error_summary, timeout_ms)
        SELECT d.id, d.stream, d.kind, d.payload, d.priority, b ->> 'state',
            pgqueue.from_ms((b ->> 'not_before_ms')::bigint), d.enqueued_at, d.dedup_key,
            (b ->> 'attempts')::int, d.max_attempts, d.last_error, d.last_completed_step,
            d.cursor_step, d.cursor, d.checkpoint_updated_at, d.schema_version, d.step_set_hash,
            d.crashes_by_step, d.max_attempts_given, d.concurrency_key, d.error_summary,
            d.timeout_ms
        FROM d;
    WHEN 'ReturnLease', 'MarkUndecodable', 'Upcast', 'Release', 'Rewind', 'Restart', 'SkipStep',
         'AcceptStepSet' THEN
        PERFORM pgqueue.apply_job_state(p_stream, p_job_id, b);
    WHEN 'RequestCancel' THEN
        UPDATE pgqueue.job SET cancel_requested_at = pgqueue.from_ms((b ->> 'at_ms')::bigint)
        WHERE stream = p_stream AND id = p_job_id;
    WHEN 'Cancel' THEN
        DELETE FROM pgqueue.job WHERE stream = p_stream AND id = p_job_id;
        DELETE FROM pgqueue.dead_letter WHERE stream = p_stream AND id = p_job_id;
    WHEN 'RegisterStepSet' THEN
        INSERT INTO pgqueue.step_set (hash, kind, steps, created_at)
        VALUES (b ->> 'hash', b ->> 'kind', b -> 'steps', pgqueue.from_ms((b ->> 'created_at_ms')::bigint))
        ON CONFLICT (hash) DO NOTHING;
    WHEN 'ConfigureKind' THEN  -- the kind's whole settings (older ops: quarantine_after alone)
        PERFORM pgqueue.save_kind_config(jsonb_populate_record(NULL::pgqueue.kind_config, b));
    WHEN 'UpsertSchedule' THEN
        INSERT INTO pgqueue.schedule AS s (stream, name, cron, timezone, payload, kind, priority,
            max_attempts, catch_up, misfire_grace_ms, paused, next_run_at, last_fired_at, updated_at)
        VALUES (b ->> 'stream', b ->> 'name', b ->> 'cron', b ->> 'timezone',
            pgqueue.unb64(b ->> 'payload'), b ->> 'kind', (b ->> 'priority')::smallint,
            (b ->> 'max_attempts')::int, b ->> 'catch_up', (b ->> 'misfire_grace_ms')::bigint,
            (b ->> 'paused')::boolean, pgqueue.from_ms((b ->> 'next_run_at_ms')::bigint),
            pgqueue.from_ms((b ->> 'last_fired_at_ms')::bigint),
            pgqueue.from_ms((b ->> 'updated_at_ms')::bigint))
        ON CONFLICT (stream, name) DO UPDATE SET
            cron = excluded.cron, timezone = excluded.timezone, payload = excluded.payload,
            kind = excluded.kind, priority = excluded.priority,
            max_attempts = excluded.max_attempts, catch_up = excluded.catch_up,
            misfire_grace_ms = excluded.misfire_grace_ms, paused = excluded.paused,
            next_run_at = excluded.next_run_at, last_fired_at = excluded.last_fired_at,
            updated_at = excluded.updated_at;
    WHEN 'UpdateScheduleNextRun' THEN
        UPDATE pgqueue.schedule
        SET next_run_at = pgqueue.from_ms((b ->> 'next_run_at_ms')::bigint),
            last_fired_at = pgqueue.from_ms((b ->> 'last_fired_at_ms')::bigint)
        WHERE stream = b ->> 'stream' AND name = b ->> 'name';
    WHEN 'RemoveSchedule' THEN
        DELETE FROM pgqueue.schedule WHERE stream = b ->> 'stream' AND name = b ->> 'name';
    WHEN 'ConfigureStream' THEN
        -- ops written before revision 0005 carry no max_payload_bytes: the default then
        INSERT INTO pgqueue.stream_config AS s (stream, retry_base_ms, retry_cap_ms,
                                                quarantine_after, max_payload_bytes)
        SELECT r.stream, r.retry_base_ms, r.retry_cap_ms, r.quarantine_after,
               coalesce(r.max_payload_bytes, 16777216)
        FROM jsonb_populate_record(NULL::pgqueue.stream_config, b) r
        ON CONFLICT (stream) DO UPDATE SET
            retry_base_ms = excluded.retry_base_ms, retry_cap_ms = excluded.retry_cap_ms,
            quarantine_after = excluded.quarantine_after,
            max_payload_bytes = excluded.max_payload_bytes;
    ELSE
        RAISE EXCEPTION 'apply_op: unknown op %', p_op USING ERRCODE = '22023';
    END CASE;
END
$$;

-- Ingest one op from another database's log (a whole op_log row): record it and apply it,
-- unless this database already holds that seq (delivering an op twice changes nothing) or its
-- transaction is already in a seeded state. Ops must arrive in the source's commit order; per
-- job that is seq order, because a transition holds the job's row lock when it appends its op.
CREATE OR REPLACE FUNCTION pgqueue.ingest_op(o pgqueue.op_log) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
BEGIN
    -- no conflict target: the primary keys are the partitions' (seq decides the partition)
    INSERT INTO pgqueue.op_log SELECT o.*
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF NOT pgqueue.reflected(o.xid) THEN
        PERFORM pgqueue.apply_op(o.op, o.stream, o.job_id, o.lease_id, pgqueue.op_body(o));
    END IF;
    RETURN true;
END
$$;

-- Ingest a batch of ops (a jsonb array of op_log rows, as to_jsonb gives them) in array order.
-- Returns how many were new.
CREATE OR REPLACE FUNCTION pgqueue.ingest_ops(p_ops jsonb) RETURNS int
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    o pgqueue.op_log;
    v_new int := 0;
BEGIN
    FOR o IN SELECT * FROM jsonb_populate_recordset(NULL::pgqueue.op_log, p_ops) LOOP
        IF pgqueue.ingest_op(o) THEN
            v_new := v_new + 1;
        END IF;
    END LOOP;
    RETURN v_new;
END
$$;

-- The start of a call that carries a request token (enqueue, enqueue_one, lease). Every such
-- call first takes the token's transaction lock, so a call re-sent after its reply was lost
-- waits here until its first attempt has ended; a re-sent one then gets the seq and
-- transaction of the op its first attempt committed (NULLs when none did: it runs as a first
-- attempt). The unique index on op_log.request stays the backstop: a first attempt that
-- reaches the server only after its re-send committed fails there instead of applying twice.
CREATE OR REPLACE FUNCTION pgqueue.request_begin(p_stream text, p_request uuid, p_resent boolean,
                                                 OUT seq bigint, OUT xid xid8)
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('pgqueue.request'), hashtext(p_request::text));
    IF p_resent THEN
        SELECT o.seq, o.xid INTO seq, xid FROM pgqueue.op_log o
        WHERE o.stream = p_stream AND o.request = p_request;
    END IF;
END
$$;

-- The next ops after p_after as op_log rows in jsonb, in seq order: at most p_limit, and no
-- more once about 64 MiB of payloads and bodies are in (always at least one), so that a batch
-- of large jobs never outgrows one jsonb value (1 GB) on its way to ingest_ops. With
-- p_committed_only, only ops whose transaction finished before this snapshot began (the
-- follow reader: no later commit can appear below them). A short batch is not the end of the
-- log; an empty one is.
CREATE OR REPLACE FUNCTION pgqueue.op_log_batch(p_after bigint, p_limit int,
                                                p_committed_only boolean)
RETURNS TABLE (seq bigint, op jsonb)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pgqueue, pg_temp  -- the owner's session calls it (README, Roles)
AS $$
    WITH sized AS (
        SELECT o.seq, coalesce(octet_length(o.payload), 0) + octet_length(o.body::text) AS size
        FROM pgqueue.op_log o
        WHERE o.seq > p_after
          AND (NOT p_committed_only
               -- ops from before this database's promotion: committed, another leader's xid
               OR o.seq <= (SELECT n.promoted_through FROM pgqueue.node n)
               OR o.xid < pg_snapshot_xmin(pg_current_snapshot()))
        ORDER BY o.seq
        LIMIT p_limit
    ), kept AS (
        SELECT w.seq FROM (
            SELECT sized.seq, coalesce(sum(sized.size) OVER (
                       ORDER BY sized.seq ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)
                   AS before
            FROM sized) w
        WHERE w.before <= 67108864
    )
    SELECT o.seq, to_jsonb(o) FROM pgqueue.op_log o JOIN kept k ON k.seq = o.seq ORDER BY o.seq
$$;

-- queries -----------------------------------------------------------------------------------

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
SELECT seq, op FROM pgqueue.op_log_batch(%(after)s, %(limit)s, true)

-- name: oplog_visible_batch
-- The next ops after seq %(after)s that this snapshot sees committed, in seq order (a one-shot
-- replay or a replica's seed: later ops arrive by other means and duplicates are skipped).
SELECT seq, op FROM pgqueue.op_log_batch(%(after)s, %(limit)s, false)

-- name: oplog_ingest
-- Apply a batch of ops from another database's log (skipping seqs already applied).
SELECT pgqueue.ingest_ops(%(ops)s::jsonb) AS applied

-- name: advance_sequences
-- Move the job, lease and op-log sequences past every id this database holds (after a replay,
-- or at promotion), so new ids never collide: job ids in the op log, the job table and the
-- dead letters; lease ids in the op log and held in job.lease_id; op seqs in the log and up to
-- what was ever pruned here or seeded past. A replica seeded from a pruned leader's state, or
-- restored without its sequences, holds ids no op it kept shows. Reads max(id) of both job
-- tables by their primary keys; job.lease_id has no index (nothing a renewal writes is
-- indexed): one scan of the job table, at promotion.
SELECT setval(pg_get_serial_sequence('pgqueue.op_log', 'seq')::regclass,
              greatest(pg_sequence_last_value(pg_get_serial_sequence('pgqueue.op_log', 'seq')::regclass),
                       (SELECT coalesce(max(seq), 0) FROM pgqueue.op_log),
                       (SELECT greatest(pruned_through, seeded_through) FROM pgqueue.node),
                       1)) AS seq,
       setval('pgqueue.job_id_seq'::regclass,
              greatest((SELECT last_value FROM pgqueue.job_id_seq),
                       (SELECT coalesce(max(job_id), 0) FROM pgqueue.op_log),
                       (SELECT coalesce(max(id), 0) FROM pgqueue.job),
                       (SELECT coalesce(max(id), 0) FROM pgqueue.dead_letter), 1)) AS job_id,
       setval('pgqueue.lease_id_seq'::regclass,
              greatest((SELECT last_value FROM pgqueue.lease_id_seq),
                       (SELECT coalesce(max(lease_id), 0) FROM pgqueue.op_log),
                       (SELECT coalesce(max(lease_id), 0) FROM pgqueue.job), 1)) AS lease_id
