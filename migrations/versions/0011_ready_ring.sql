-- pgqueue 0011: the tables' delta (state only).
--
-- Ready jobs are found through pgqueue.ready, entries in a ring of 8 partitions that are
-- truncated whole once they hold no ready job, instead of two partial indexes of job whose
-- entries of leased and acked jobs every lease stepped over while the vacuum horizon was held
-- back (a long transaction, a report under REPEATABLE READ, a logical slot).
--
-- In place, with the previous release's workers and producers running, after a short stop:
-- job is locked ACCESS EXCLUSIVE first (dropping its two indexes needs that lock, and taking
-- it before anything else leaves no lock for a running lease to deadlock on), for the rest of
-- the upgrade, so no job is written between the entries made here for the pending jobs and
-- the triggers of the new code, which keep them from then on. Writers and readers of job wait
-- meanwhile: about 0.3 s per 100,000 pending jobs, the INSERT below. A session that holds job
-- longer than 10 s (a long report) makes the upgrade give up, changing nothing, rather than
-- stop the queue behind it; run it again when the report is done. The previous release's code
-- runs on this revision unchanged: it reaches the job tables through the functions, which
-- this revision replaces.

SET LOCAL lock_timeout = '10s';
LOCK TABLE pgqueue.job IN ACCESS EXCLUSIVE MODE;
RESET lock_timeout;

CREATE TABLE pgqueue.ready (
    slot     smallint NOT NULL,
    stream   text NOT NULL,
    priority smallint NOT NULL,
    job_id   bigint NOT NULL,
    kind     text
) PARTITION BY LIST (slot);
CREATE TABLE pgqueue.ready_0 PARTITION OF pgqueue.ready FOR VALUES IN (0);
CREATE TABLE pgqueue.ready_1 PARTITION OF pgqueue.ready FOR VALUES IN (1);
CREATE TABLE pgqueue.ready_2 PARTITION OF pgqueue.ready FOR VALUES IN (2);
CREATE TABLE pgqueue.ready_3 PARTITION OF pgqueue.ready FOR VALUES IN (3);
CREATE TABLE pgqueue.ready_4 PARTITION OF pgqueue.ready FOR VALUES IN (4);
CREATE TABLE pgqueue.ready_5 PARTITION OF pgqueue.ready FOR VALUES IN (5);
CREATE TABLE pgqueue.ready_6 PARTITION OF pgqueue.ready FOR VALUES IN (6);
CREATE TABLE pgqueue.ready_7 PARTITION OF pgqueue.ready FOR VALUES IN (7);
CREATE INDEX ready_order_idx ON pgqueue.ready (stream, priority DESC, job_id);
CREATE INDEX ready_kind_idx ON pgqueue.ready (stream, kind, priority DESC, job_id);

-- the pending jobs' entries, all in the first partition (any will do: recycling moves up to
-- 1,000 ready jobs' entries on, and a larger backlog drains from where it is)
INSERT INTO pgqueue.ready (slot, stream, priority, job_id, kind)
SELECT 0, stream, priority, id, kind FROM pgqueue.job WHERE state = 'pending';

DROP INDEX pgqueue.job_pending_idx;
DROP INDEX pgqueue.job_pending_kind_idx;

-- The job counts' deltas go to a ring of partitions, one per 4-second period, folded and
-- truncated whole (pgqueue.fold_job_counts), instead of rows deleted by each fold. The deltas so far are
-- folded here, under the lock (a transition that wrote one before it and waits for job now
-- fails as a deadlock and is retried by its caller: an operator's requeue of a dead letter
-- racing the upgrade is the one that can).
LOCK TABLE pgqueue.job_count_delta IN ACCESS EXCLUSIVE MODE;
INSERT INTO pgqueue.job_count AS c (stream, state, n)
SELECT stream, state, sum(delta) FROM pgqueue.job_count_delta GROUP BY stream, state
ORDER BY stream, state
ON CONFLICT (stream, state) DO UPDATE SET n = c.n + EXCLUDED.n;
DROP TABLE pgqueue.job_count_delta;
CREATE TABLE pgqueue.job_count_delta (
    slot   smallint NOT NULL,
    stream text NOT NULL,
    state  text NOT NULL,
    delta  bigint NOT NULL
) PARTITION BY LIST (slot);
CREATE TABLE pgqueue.job_count_delta_0 PARTITION OF pgqueue.job_count_delta FOR VALUES IN (0);
CREATE TABLE pgqueue.job_count_delta_1 PARTITION OF pgqueue.job_count_delta FOR VALUES IN (1);
CREATE TABLE pgqueue.job_count_delta_2 PARTITION OF pgqueue.job_count_delta FOR VALUES IN (2);
CREATE TABLE pgqueue.job_count_delta_3 PARTITION OF pgqueue.job_count_delta FOR VALUES IN (3);
CREATE TABLE pgqueue.job_count_delta_4 PARTITION OF pgqueue.job_count_delta FOR VALUES IN (4);
CREATE TABLE pgqueue.job_count_delta_5 PARTITION OF pgqueue.job_count_delta FOR VALUES IN (5);
CREATE TABLE pgqueue.job_count_delta_6 PARTITION OF pgqueue.job_count_delta FOR VALUES IN (6);
CREATE TABLE pgqueue.job_count_delta_7 PARTITION OF pgqueue.job_count_delta FOR VALUES IN (7);
