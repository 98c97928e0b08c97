-- pgqueue 0005: the tables' delta (state only).

-- 11.2 request tokens: the first op of an enqueue or lease call carries the call's token.
ALTER TABLE pgqueue.op_log ADD COLUMN request uuid;
CREATE UNIQUE INDEX op_log_request_idx ON pgqueue.op_log (request) WHERE request IS NOT NULL;

-- 11.3 payload limits: per stream, 16 MiB by default, at most 64 MiB.
ALTER TABLE pgqueue.stream_config ADD COLUMN max_payload_bytes bigint NOT NULL DEFAULT 16777216
    CHECK (max_payload_bytes BETWEEN 1 AND 67108864);

-- 11.4 max_attempts: whether the producer set it (a handler's applies only when it did not).
ALTER TABLE pgqueue.job ADD COLUMN max_attempts_given boolean NOT NULL DEFAULT true;
ALTER TABLE pgqueue.dead_letter ADD COLUMN max_attempts_given boolean NOT NULL DEFAULT true;

-- soak finding: a promoted database's older ops carry another leader's xid and lsn.
ALTER TABLE pgqueue.node ADD COLUMN promoted_through bigint NOT NULL DEFAULT 0;
