-- pgqueue 0014: the tables' delta (state only).
--
-- Expired leases are found through pgqueue.lease_expiry, one row per lease or renewal call in
-- a ring of 32 partitions by expiry, truncated whole once past, instead of a reclaim pass that
-- read the entry of every job leased since the vacuum horizon was pinned (job_leased_idx).
--
-- In place, with the previous release's workers running: job is locked EXCLUSIVE (reads go
-- on; leases, renewals and acks wait) for the rest of the upgrade, so no lease is granted
-- between the rows made here for the leased jobs and the new code of pgqueue.lease and
-- pgqueue.renew, which writes them from then on. That is a few milliseconds: the leased jobs
-- are few. A session that holds job longer than 10 s makes the upgrade give up, changing
-- nothing; run it again. The previous release's code runs on this revision unchanged: it
-- reaches the tables through the functions, which this revision replaces. (A lease missed
-- all the same is still reclaimed: a maintenance runner's first pass, and one every few
-- minutes, reads every leased job.)

SET LOCAL lock_timeout = '10s';
LOCK TABLE pgqueue.job IN EXCLUSIVE MODE;
RESET lock_timeout;

CREATE TABLE pgqueue.lease_expiry (
    slot       smallint NOT NULL,
    expires_at timestamptz NOT NULL,
    job_ids    bigint[] NOT NULL
) PARTITION BY LIST (slot);
DO $$
BEGIN
    FOR s IN 0..31 LOOP
        EXECUTE format('CREATE TABLE pgqueue.%I PARTITION OF pgqueue.lease_expiry FOR VALUES IN (%s)',
                       'lease_expiry_' || s, s);
    END LOOP;
END
$$;
CREATE INDEX lease_expiry_at_idx ON pgqueue.lease_expiry (expires_at);

-- the leased jobs' rows (pgqueue.expiry_slot, which the code below defines, written out)
INSERT INTO pgqueue.lease_expiry (slot, expires_at, job_ids)
SELECT (floor(extract(epoch FROM least(j.lease_expires_at, now() + interval '120 seconds')) / 8)::bigint
        % 32)::smallint,
       j.lease_expires_at, array_agg(j.id ORDER BY j.id)
FROM pgqueue.job j WHERE j.state = 'leased' GROUP BY j.lease_expires_at;
