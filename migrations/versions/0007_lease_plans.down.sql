-- Undo 0007's tables.

DROP INDEX pgqueue.job_pending_since_idx;
CREATE INDEX job_pending_since_idx ON pgqueue.job (stream, not_before) WHERE state = 'pending';
