-- Undo 0011's tables: ready jobs are found through partial indexes of job again (built here
-- while job is locked against writes), the ready entries go, and the job counts' deltas are
-- one table again (the ring's deltas folded first).
SET LOCAL lock_timeout = '10s';
LOCK TABLE pgqueue.job IN ACCESS EXCLUSIVE MODE;
RESET lock_timeout;
CREATE INDEX job_pending_idx ON pgqueue.job (stream, priority DESC, id) WHERE state = 'pending';
CREATE INDEX job_pending_kind_idx ON pgqueue.job (stream, kind, priority DESC, id)
    WHERE state = 'pending';
DROP TABLE pgqueue.ready;

LOCK TABLE pgqueue.job_count_delta IN ACCESS EXCLUSIVE MODE;
INSERT INTO pgqueue.job_count AS c (stream, state, n)
SELECT stream, state, sum(delta) FROM pgqueue.job_count_delta GROUP BY stream, state
ORDER BY stream, state
ON CONFLICT (stream, state) DO UPDATE SET n = c.n + EXCLUDED.n;
DROP TABLE pgqueue.job_count_delta;
CREATE TABLE pgqueue.job_count_delta (
    stream text NOT NULL,
    state  text NOT NULL,
    delta  bigint NOT NULL
);
