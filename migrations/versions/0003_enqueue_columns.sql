-- pgqueue 0003: an Enqueue op keeps the job's own fields in typed op_log columns and in its
-- jsonb body only what its whole call shares; pgqueue.op_body(op_log) gives the whole body.
-- Enqueue ops written before 0003 keep their full body and NULL columns.
--
-- Upgrade logical replicas before their leader: a subscriber must have every published column.

ALTER TABLE pgqueue.op_log
    ADD COLUMN kind           text,
    ADD COLUMN payload        bytea,
    ADD COLUMN priority       smallint,
    ADD COLUMN not_before     timestamptz,
    ADD COLUMN dedup_key      bytea,
    ADD COLUMN max_attempts   int,
    ADD COLUMN schema_version int;
COMMENT ON COLUMN pgqueue.op_log.payload IS
    'Enqueue ops (0003 on): the job''s payload; kind .. schema_version likewise. NULL for other ops; pgqueue.op_body(op_log) gives the whole body.';

-- No query reads op_log by lsn, yet every op paid ~0.2 ms per 1,000 for the index.
DROP INDEX pgqueue.op_log_lsn_idx;
