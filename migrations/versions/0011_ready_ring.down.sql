-- Undo 0011's tables: ready jobs are found through partial indexes of job again (built here
-- while job is locked against writes), and the ready entries go.
SET LOCAL lock_timeout = '10s';
LOCK TABLE pgqueue.job IN ACCESS EXCLUSIVE MODE;
RESET lock_timeout;
CREATE INDEX job_pending_idx ON pgqueue.job (stream, priority DESC, id) WHERE state = 'pending';
CREATE INDEX job_pending_kind_idx ON pgqueue.job (stream, kind, priority DESC, id)
    WHERE state = 'pending';
DROP TABLE pgqueue.ready;
