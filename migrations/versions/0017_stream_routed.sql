-- pgqueue 0017: the tables' delta (state only).
--
-- Every statement of a transition names the stream it is about, so that on Citus (issue 27)
-- each runs on the one node holding that stream. The worker's calls (ack, renew, nack,
-- return_leases, mark_undecodable, end_cancelled, upcast, start_rated) take the stream their
-- lease came from as a last argument, p_stream DEFAULT NULL; a caller that names none (psql,
-- the previous release's workers during an upgrade) gets each of its jobs' own. Triggers read
-- their transition tables into arrays before writing (a shard's trigger cannot INSERT ...
-- SELECT from one). Lease ids are drawn before the lease's UPDATE.
--
-- A row of lease_expiry names its jobs' stream (NULL in rows written before). The job table's
-- trigger lock (which the code's CREATE OR REPLACE TRIGGER takes) is taken first: a lease of
-- the previous release holds the job table and then writes lease_expiry, so taking
-- lease_expiry first deadlocked with it. Waiting longer than 10 s for it (a long report) makes
-- the upgrade give up, changing nothing; run it again then.
SET LOCAL lock_timeout = '10s';
LOCK TABLE pgqueue.job, pgqueue.dead_letter IN SHARE ROW EXCLUSIVE MODE;
RESET lock_timeout;
ALTER TABLE pgqueue.lease_expiry ADD COLUMN stream text;
-- Which layout the schema has (an enqueue notifies waiting workers only on one server:
-- pgqueue.notify_ready): a table of its own, which no transition of the previous release
-- holds a lock on.
CREATE TABLE pgqueue.layout (
    one  boolean PRIMARY KEY DEFAULT true CHECK (one),
    name text NOT NULL DEFAULT 'single' CHECK (name IN ('single', 'citus'))
);
INSERT INTO pgqueue.layout DEFAULT VALUES;
