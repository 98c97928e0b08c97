-- pgqueue 0012: the tables' delta (state only).
--
-- The op log moves onto a ring of 32 partitions (see pgqueue.op_log in pgqueue/sql/oplog.sql),
-- so that its retention truncates whole partitions instead of deleting old ops row by row. The
-- existing log becomes one partition as it is, no op copied: the one its seqs name, op_log_0
-- (seqs below 2^32). 0012_op_log_ring.before.sql proved that with a validated constraint before
-- this transaction, while writers went on; the short stop is then this: op_log locked ACCESS
-- EXCLUSIVE (waiting at most 10 s, and giving up unchanged behind a longer reader of the log),
-- renamed, attached to the new partitioned table without a scan, the other 31 partitions made
-- (milliseconds, whatever the log's size). The sequence moves on to the next partition, so the
-- old log is left whole and truncated at once when its retention has passed. The previous
-- release's code runs on this revision unchanged: its functions name pgqueue.op_log, which is
-- the new table once they are planned again.

-- The locks first, in the order the transitions take them: the job (and its dead letter),
-- then its op. The code reload after this delta re-creates the counting triggers on job and
-- dead_letter (SHARE ROW EXCLUSIVE); asked for only then, while this transaction held the
-- op log, a running transition holding a job and waiting for the op log deadlocked with it.
SET LOCAL lock_timeout = '10s';
LOCK TABLE pgqueue.job, pgqueue.dead_letter IN SHARE ROW EXCLUSIVE MODE;
LOCK TABLE pgqueue.op_log IN ACCESS EXCLUSIVE MODE;
RESET lock_timeout;

-- Which partition the old log becomes: the one its ops' seqs name (all of them one; 0 unless
-- the log was downgraded from this revision after its ring moved on), proved by a constraint
-- that 0012's before-step validated while writers went on, or here, under the lock, when it
-- could not. The new parent names its NOT NULL constraints as a fresh install does.
DO $$
DECLARE
    lo bigint;
    hi bigint;
    v_next bigint;
    v_slot int;
    v_check text;
BEGIN
    SELECT min(seq) >> 32, max(seq) >> 32 INTO lo, hi FROM pgqueue.op_log;
    IF lo <> hi THEN
        RAISE EXCEPTION 'pgqueue 0012: the op log''s seqs run from % to %, across more than one partition of the new ring; prune the older ones first (pgqueue oplog prune --keep 0 removes every op the replicas confirmed)',
            (SELECT min(seq) FROM pgqueue.op_log), (SELECT max(seq) FROM pgqueue.op_log)
            USING ERRCODE = '55000';
    END IF;
    SELECT CASE WHEN s.is_called THEN s.last_value + 1 ELSE s.last_value END INTO v_next
    FROM pgqueue.op_log_seq_seq s;
    v_slot := coalesce(hi, v_next >> 32) % 32;
    v_check := format('CHECK ((((seq >> 32) %% 32::bigint) IS NOT NULL) AND (((seq >> 32) %% 32::bigint) = %s::bigint))', v_slot);
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                   WHERE conrelid = 'pgqueue.op_log'::regclass AND conname = 'op_log_ring_slot'
                     AND convalidated AND pg_get_constraintdef(oid) = v_check) THEN
        ALTER TABLE pgqueue.op_log DROP CONSTRAINT IF EXISTS op_log_ring_slot;
        EXECUTE format('ALTER TABLE pgqueue.op_log ADD CONSTRAINT op_log_ring_slot %s', v_check);
    END IF;
    EXECUTE format('ALTER TABLE pgqueue.op_log RENAME TO %I', 'op_log_' || v_slot);
    EXECUTE format('ALTER TABLE pgqueue.%I RENAME CONSTRAINT op_log_pkey TO %I',
                   'op_log_' || v_slot, 'op_log_' || v_slot || '_pkey');
    EXECUTE format('ALTER INDEX pgqueue.op_log_job_idx RENAME TO %I', 'op_log_' || v_slot || '_job_id_idx');
    EXECUTE format('ALTER INDEX pgqueue.op_log_at_idx RENAME TO %I', 'op_log_' || v_slot || '_at_idx');
    EXECUTE format('ALTER INDEX pgqueue.op_log_request_idx RENAME TO %I', 'op_log_' || v_slot || '_request_idx');
    -- new ops go to the next partition: the old log is left whole, for its retention
    PERFORM setval('pgqueue.op_log_seq_seq', ((greatest(hi, v_next >> 32) + 1) << 32) - 1, true);
    PERFORM set_config('pgqueue.upgrade_slot', v_slot::text, true);
END
$$;

CREATE TABLE pgqueue.op_log (
    seq      bigint CONSTRAINT op_log_seq_not_null NOT NULL
             DEFAULT CASE WHEN pg_current_xact_id() IS NOT NULL
                          THEN nextval('pgqueue.op_log_seq_seq') END,
    stream   text CONSTRAINT op_log_stream_not_null NOT NULL,
    op       text CONSTRAINT op_log_op_not_null NOT NULL,
    job_id   bigint,
    lease_id bigint,
    body     jsonb CONSTRAINT op_log_body_not_null NOT NULL,
    xid      xid8 CONSTRAINT op_log_xid_not_null NOT NULL DEFAULT pg_current_xact_id(),
    at       timestamptz CONSTRAINT op_log_at_not_null NOT NULL DEFAULT now(),
    lsn      pg_lsn CONSTRAINT op_log_lsn_not_null NOT NULL DEFAULT pg_current_wal_insert_lsn(),
    kind           text,
    payload        bytea,
    priority       smallint,
    not_before     timestamptz,
    dedup_key      bytea,
    max_attempts   int,
    schema_version int,
    request        uuid
) PARTITION BY LIST (((seq >> 32) % 32));
COMMENT ON COLUMN pgqueue.op_log.payload IS
    'Enqueue ops (0003 on): the job''s payload; kind .. schema_version likewise. NULL for other ops; pgqueue.op_body(op_log) gives the whole body.';
CREATE INDEX op_log_job_idx ON pgqueue.op_log (job_id);
CREATE INDEX op_log_at_idx ON pgqueue.op_log USING brin (at);
ALTER SEQUENCE pgqueue.op_log_seq_seq OWNED BY pgqueue.op_log.seq;
-- The old log joins as its partition without a scan (the constraint implies the bound), its
-- indexes of job_id and at becoming the new ones' partitions; then the ring's other slots.
DO $$
DECLARE
    v_slot int := current_setting('pgqueue.upgrade_slot')::int;
    v_old text := 'op_log_' || v_slot;
BEGIN
    EXECUTE format('COMMENT ON COLUMN pgqueue.%I.payload IS NULL', v_old);
    EXECUTE format('ALTER TABLE pgqueue.op_log ATTACH PARTITION pgqueue.%I FOR VALUES IN (%s)',
                   v_old, v_slot);
    EXECUTE format('ALTER TABLE pgqueue.%I DROP CONSTRAINT op_log_ring_slot', v_old);
    IF EXISTS (SELECT 1 FROM pg_trigger t
               WHERE t.tgname = 'op_log_apply' AND t.tgrelid = ('pgqueue.' || v_old)::regclass) THEN
        -- a logical replica's apply trigger (pgqueue.enable_apply_trigger) moves to the new
        -- table, which gives it to every partition
        EXECUTE format('DROP TRIGGER op_log_apply ON pgqueue.%I', v_old);
        CREATE TRIGGER op_log_apply BEFORE INSERT ON pgqueue.op_log
            FOR EACH ROW EXECUTE FUNCTION pgqueue.op_log_apply_trigger();
        ALTER TABLE pgqueue.op_log ENABLE ALWAYS TRIGGER op_log_apply;
    END IF;
    FOR s IN 0..31 LOOP
        CONTINUE WHEN s = v_slot;
        EXECUTE format('CREATE TABLE pgqueue.%I PARTITION OF pgqueue.op_log FOR VALUES IN (%s)',
                       'op_log_' || s, s);
        EXECUTE format('ALTER TABLE pgqueue.%I ADD CONSTRAINT %I PRIMARY KEY (seq)',
                       'op_log_' || s, 'op_log_' || s || '_pkey');
        EXECUTE format('CREATE UNIQUE INDEX %I ON pgqueue.%I (request) WHERE request IS NOT NULL',
                       'op_log_' || s || '_request_idx', 'op_log_' || s);
    END LOOP;
END
$$;

CREATE TABLE pgqueue.op_log_ring (
    slot       smallint PRIMARY KEY CHECK (slot BETWEEN 0 AND 31),
    opened_at  timestamptz,
    closed_at  timestamptz,
    closed_xid xid8
);
INSERT INTO pgqueue.op_log_ring (slot) SELECT generate_series(0, 31);

CREATE TABLE pgqueue.op_log_policy (
    one       boolean PRIMARY KEY DEFAULT true CHECK (one),
    retention interval NOT NULL DEFAULT interval '1 day'
        CHECK (retention >= interval '1 second')
);
INSERT INTO pgqueue.op_log_policy DEFAULT VALUES;

-- A leader's publication publishes the new table, its partitions' rows as its own (the
-- subscriber's op_log has the same ring).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_publication WHERE pubname = 'pgqueue_oplog') THEN
        ALTER PUBLICATION pgqueue_oplog SET TABLE pgqueue.op_log;
        ALTER PUBLICATION pgqueue_oplog SET (publish_via_partition_root = true);
    END IF;
END
$$;
