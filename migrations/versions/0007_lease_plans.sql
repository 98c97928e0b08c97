-- pgqueue 0007: the tables' delta (state only).

-- The oldest-ready index only a query naming `not_before > '-infinity'` may use, so no lease
-- plan takes it while the job table has no statistics (pgqueue/sql/observe.sql).
DROP INDEX pgqueue.job_pending_since_idx;
CREATE INDEX job_pending_since_idx ON pgqueue.job (stream, not_before)
    WHERE state = 'pending' AND not_before > '-infinity';
