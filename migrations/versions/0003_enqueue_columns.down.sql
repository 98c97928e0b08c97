-- Undo 0003: every Enqueue op written since gets its whole body back (nothing is lost; this
-- runs while 0003's op_body still exists), then the columns go. 0002's code follows.
UPDATE pgqueue.op_log o SET body = pgqueue.op_body(o)
WHERE o.op = 'Enqueue' AND o.payload IS NOT NULL;

CREATE INDEX op_log_lsn_idx ON pgqueue.op_log USING brin (lsn);

ALTER TABLE pgqueue.op_log
    DROP COLUMN kind, DROP COLUMN payload, DROP COLUMN priority, DROP COLUMN not_before,
    DROP COLUMN dedup_key, DROP COLUMN max_attempts, DROP COLUMN schema_version;
