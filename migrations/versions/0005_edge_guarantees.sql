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

-- soak finding: an op's seq is drawn only once its transaction has an xid (see op_log in
-- pgqueue/sql/oplog.sql). The identity becomes a plain sequence of the same name, owned by the
-- column, that goes on where the identity's stopped.
CREATE SEQUENCE pgqueue.op_log_seq_next;
SELECT setval('pgqueue.op_log_seq_next', s.last_value, s.is_called)
FROM (SELECT coalesce(pg_sequence_last_value('pgqueue.op_log_seq_seq'), 1) AS last_value,
             pg_sequence_last_value('pgqueue.op_log_seq_seq') IS NOT NULL AS is_called) s;
ALTER TABLE pgqueue.op_log ALTER COLUMN seq DROP IDENTITY;
ALTER SEQUENCE pgqueue.op_log_seq_next RENAME TO op_log_seq_seq;
ALTER TABLE pgqueue.op_log ALTER COLUMN seq
    SET DEFAULT CASE WHEN pg_current_xact_id() IS NOT NULL
                     THEN nextval('pgqueue.op_log_seq_seq') END;
ALTER SEQUENCE pgqueue.op_log_seq_seq OWNED BY pgqueue.op_log.seq;

-- 11.8 prefetch: reclaim charges nothing to a lease whose handler never started.
ALTER TABLE pgqueue.job ADD COLUMN lease_started boolean NOT NULL DEFAULT true;
ALTER TABLE pgqueue.job ADD COLUMN unstarted_reclaims int NOT NULL DEFAULT 0;

-- 13 metrics: job counts kept by the writes (pgqueue/sql/observe.sql). The tables start with
-- the counts of the jobs there are, taken while writers wait (the triggers that keep them
-- are created with the code, in this transaction), so no write falls between the two.
CREATE TABLE pgqueue.job_count (
    stream text NOT NULL,
    state  text NOT NULL,
    n      bigint NOT NULL,
    PRIMARY KEY (stream, state)
);
CREATE TABLE pgqueue.job_count_delta (
    stream text NOT NULL,
    state  text NOT NULL,
    delta  bigint NOT NULL
);
CREATE INDEX job_pending_since_idx ON pgqueue.job (stream, not_before) WHERE state = 'pending';
LOCK TABLE pgqueue.job, pgqueue.dead_letter IN SHARE ROW EXCLUSIVE MODE;
INSERT INTO pgqueue.job_count (stream, state, n)
SELECT stream, state, count(*) FROM pgqueue.job GROUP BY stream, state
UNION ALL
SELECT stream, 'dead', count(*) FROM pgqueue.dead_letter GROUP BY stream;

-- 13 traces: the producer's trace context, carried by the job (and its Enqueue op's body).
ALTER TABLE pgqueue.job ADD COLUMN trace_context jsonb;

-- 14 dashboard: keyset pages of a stream's jobs in one state (pgqueue/sql/core.sql); it
-- covers the parked jobs the index it replaces served, and scheduled ones.
DROP INDEX pgqueue.job_parked_idx;
CREATE INDEX job_listed_idx ON pgqueue.job (stream, state, id)
    WHERE state IN ('scheduled', 'quarantined', 'undecodable');

-- 15 limits: a kind's limits beside its quarantine threshold, which may now be unset
-- (pgqueue/sql/core.sql).
ALTER TABLE pgqueue.kind_config ALTER COLUMN quarantine_after DROP NOT NULL;
ALTER TABLE pgqueue.kind_config
    ADD COLUMN max_concurrency int CHECK (max_concurrency >= 1),
    ADD COLUMN rate_count int CHECK (rate_count >= 1),
    ADD COLUMN rate_ms bigint CHECK (rate_ms >= 1),
    ADD COLUMN max_per_key int CHECK (max_per_key >= 1),
    ADD CHECK ((rate_count IS NULL) = (rate_ms IS NULL));
-- the rate limit's window: leases of a rate-limited kind per bucket of time
CREATE TABLE pgqueue.kind_lease (
    stream text NOT NULL,
    kind   text NOT NULL,
    bucket bigint NOT NULL,  -- epoch ms of the bucket's start
    until  bigint NOT NULL,  -- and of its end
    n      int NOT NULL,
    PRIMARY KEY (stream, kind, bucket)
);
CREATE INDEX job_pending_kind_idx ON pgqueue.job (stream, kind, priority DESC, id)
    WHERE state = 'pending';
-- the key a kind's max_per_key counts
ALTER TABLE pgqueue.job ADD COLUMN concurrency_key text
    CHECK (length(concurrency_key) BETWEEN 1 AND 200);
ALTER TABLE pgqueue.dead_letter ADD COLUMN concurrency_key text;
DROP INDEX pgqueue.job_leased_idx;
CREATE INDEX job_leased_idx ON pgqueue.job (stream, kind, concurrency_key, id)
    WHERE state = 'leased';

-- 15 cancelling a running job: when an operator asked to cancel a job a worker holds. The
-- cancel, nack, mark_undecodable and return_leases transitions now return what they did: a function's result type cannot be
-- replaced, so the older ones go here and the code loaded after this delta makes the new.
ALTER TABLE pgqueue.job ADD COLUMN cancel_requested_at timestamptz;
DROP FUNCTION pgqueue.cancel(bigint);
DROP FUNCTION pgqueue.nack(bigint, bigint, text, bigint, int);
DROP FUNCTION pgqueue.mark_undecodable(bigint, bigint, text, jsonb);
DROP FUNCTION pgqueue.return_leases(bigint[], bigint[]);
