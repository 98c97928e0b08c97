-- GENERATED FILE: do not edit. What pgqueue schema revision 0016 changed in the functions and
-- views, object by object, against the code of revision 0015 (frozen by
-- `python -m pgqueue_migrations.new` when revision 0017 was started). Each entry is headed
-- by the object it defines and the one it follows, then its whole text (or `removed`); the
-- code of 0016 is every frozen file up to it applied in order (migrations/frozen.py). Loaded
-- when a database is upgraded to 0016 or downgraded to it; the current definitions live in
-- pgqueue/sql/.

-- @@ function pgqueue.take_ready_range
-- @@ after function pgqueue.promote_due

-- Take out the first p_limit ready entries of a stream in lease order with a priority from
-- p_low to p_high and, within it, a job id above p_after_id, that no other lease holds (SKIP
-- LOCKED); their job ids (once each) in lease order. One range of ready_order_idx: with
-- p_low = p_high the scan starts at (stream, priority, p_after_id).
-- Only entries no lease has touched (xmax 0) are tried: an entry another lease holds (its
-- transaction not committed yet, its commit's flush included) is passed over on its xmax,
-- without trying its tuple lock and its holder's transaction lock in the shared lock table,
-- which SKIP LOCKED does for each. Every lease after a position steps over what the other
-- leasers took since its last one: with 64 leasers, hundreds of entries per lease, and the
-- lock manager's LWLock was a lease's third wait (bench/pressure.py, README). An entry whose
-- lease rolled back keeps that lease's xmax: the next lease from the start (LeasePosition's
-- look every second, or any lease without a position) takes it, as any entry behind the
-- position.
CREATE OR REPLACE FUNCTION pgqueue.take_ready_range(p_stream text, p_limit int, p_low smallint,
                                                    p_high smallint, p_after_id bigint)
RETURNS bigint[]
LANGUAGE sql VOLATILE
AS $$
    WITH taken AS (
        SELECT r.slot, r.ctid AS at FROM pgqueue.ready r
        WHERE r.stream = p_stream AND r.priority >= p_low AND r.priority <= p_high
          AND r.job_id > p_after_id AND r.xmax = '0'::xid
        ORDER BY r.priority DESC, r.job_id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ), gone AS (
        DELETE FROM pgqueue.ready r USING taken t WHERE r.slot = t.slot AND r.ctid = t.at
        RETURNING r.job_id, r.priority
    )
    SELECT coalesce(array_agg(g.job_id ORDER BY g.priority DESC, g.job_id), '{}')
    FROM (SELECT DISTINCT gone.job_id, gone.priority FROM gone) g
$$;
