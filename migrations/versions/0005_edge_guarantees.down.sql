-- Undo 0005's tables.

-- 11.2 request tokens
DROP INDEX pgqueue.op_log_request_idx;
ALTER TABLE pgqueue.op_log DROP COLUMN request;

-- 11.3 payload limits
ALTER TABLE pgqueue.stream_config DROP COLUMN max_payload_bytes;

-- 11.4 max_attempts
ALTER TABLE pgqueue.dead_letter DROP COLUMN max_attempts_given;
ALTER TABLE pgqueue.job DROP COLUMN max_attempts_given;

-- promoted_through
ALTER TABLE pgqueue.node DROP COLUMN promoted_through;
