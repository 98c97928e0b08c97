-- Undo 0012's tables: the op log is one table again. Its ops are copied back in seq order
-- while the log is locked against writers (about 1 s per million ops), and its sequence goes
-- on from the last of them. The retention setting and the ring's bookkeeping go.
SET LOCAL lock_timeout = '10s';
LOCK TABLE pgqueue.op_log IN ACCESS EXCLUSIVE MODE;
RESET lock_timeout;
CREATE TABLE pgqueue.op_log_flat (LIKE pgqueue.op_log INCLUDING DEFAULTS INCLUDING COMMENTS);
INSERT INTO pgqueue.op_log_flat SELECT * FROM pgqueue.op_log ORDER BY seq;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
               WHERE t.tgname = 'op_log_apply' AND c.relname = 'op_log'
                 AND c.relnamespace = 'pgqueue'::regnamespace) THEN
        CREATE TRIGGER op_log_apply BEFORE INSERT ON pgqueue.op_log_flat
            FOR EACH ROW EXECUTE FUNCTION pgqueue.op_log_apply_trigger();
        ALTER TABLE pgqueue.op_log_flat ENABLE ALWAYS TRIGGER op_log_apply;
    END IF;
END
$$;
ALTER SEQUENCE pgqueue.op_log_seq_seq OWNED BY NONE;
-- the two functions of an op_log row (0011's code makes them again, of the new table)
DROP FUNCTION pgqueue.op_body(pgqueue.op_log), pgqueue.ingest_op(pgqueue.op_log);
DROP TABLE pgqueue.op_log;
ALTER TABLE pgqueue.op_log_flat RENAME TO op_log;
ALTER TABLE pgqueue.op_log ADD CONSTRAINT op_log_pkey PRIMARY KEY (seq);
ALTER SEQUENCE pgqueue.op_log_seq_seq OWNED BY pgqueue.op_log.seq;
CREATE INDEX op_log_job_idx ON pgqueue.op_log (job_id);
CREATE INDEX op_log_at_idx ON pgqueue.op_log USING brin (at);
CREATE UNIQUE INDEX op_log_request_idx ON pgqueue.op_log (request) WHERE request IS NOT NULL;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_publication WHERE pubname = 'pgqueue_oplog') THEN
        ALTER PUBLICATION pgqueue_oplog SET (publish_via_partition_root = false);
        ALTER PUBLICATION pgqueue_oplog SET TABLE pgqueue.op_log;
    END IF;
END
$$;
SELECT setval('pgqueue.op_log_seq_seq', greatest(
    (SELECT coalesce(max(seq), 0) FROM pgqueue.op_log),
    pg_sequence_last_value('pgqueue.op_log_seq_seq'), 1));
DROP TABLE pgqueue.op_log_ring;
DROP TABLE pgqueue.op_log_policy;
