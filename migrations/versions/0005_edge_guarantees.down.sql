-- Undo 0005's tables.

-- 11.2 request tokens
DROP INDEX pgqueue.op_log_request_idx;
ALTER TABLE pgqueue.op_log DROP COLUMN request;

-- 11.3 payload limits
ALTER TABLE pgqueue.stream_config DROP COLUMN max_payload_bytes;
