-- pgqueue 0005: the tables' delta (state only).

-- 11.2 request tokens: the first op of an enqueue or lease call carries the call's token.
ALTER TABLE pgqueue.op_log ADD COLUMN request uuid;
CREATE INDEX op_log_request_idx ON pgqueue.op_log (request) WHERE request IS NOT NULL;
