-- observe: what the queue holds, read cheaply: job counts kept by the writes themselves, the
-- readers' named queries (jobs, stats, history, previews) and the metrics' gauges.

-- schema: tables ----------------------------------------------------------------------------
-- Jobs by stream and state, kept without a scan of the job table (whose size grows with the
-- queue): every statement that inserts, updates or deletes jobs or dead letters appends its
-- net change per (stream, state) to job_count_delta (an insert: writers never wait on each
-- other), and fold_job_counts() adds the deltas into job_count now and then (maintenance, and
-- a metrics scrape). A count is job_count's plus the deltas not folded yet. The deltas go to
-- the partition of the period they are written in (pgqueue.ring_slot), and a past period's
-- partition is folded and truncated whole: deleting folded deltas left a dead row each, which
-- a held vacuum horizon kept for every fold and count to read (43,000 of them after a minute).
CREATE TABLE pgqueue.job_count (
    stream text NOT NULL,
    state  text NOT NULL,
    n      bigint NOT NULL,
    PRIMARY KEY (stream, state)
);
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
-- The oldest ready job of a stream in one index probe (pgqueue_oldest_pending_age_seconds).
-- Only a query that says `not_before > '-infinity'` may use it: a lease never does, so no
-- lease plan can take it (with the job table not analyzed yet, e.g. right after a first burst
-- of jobs, the planner chose it for the lease's ordered scan and sorted every ready job: a
-- lease of 100 out of 10,000 ready took 4 ms instead of 0.4).
CREATE INDEX job_pending_since_idx ON pgqueue.job (stream, not_before)
    WHERE state = 'pending' AND not_before > '-infinity';

-- schema: functions -------------------------------------------------------------------------

-- The statement triggers behind job_count_delta and pgqueue.ready: the rows a statement
-- removed count -1 in their (stream, state), the rows it wrote +1, nothing is written for no
-- net change (a renewal); a job that became pending (or changed its priority or kind while
-- pending) gets an entry in pgqueue.ready, and one that stopped being pending loses its entry
-- (but not once a plain lease in the transaction removed the entries it took: pgqueue.lease
-- sets pgqueue.ready_taken for the rest of it; an entry a later statement leaves behind is
-- harmless, dropped by the lease that takes it). They run on every path that writes jobs,
-- replicas' apply included (ENABLE ALWAYS), so every pending job has its entry wherever it is.
CREATE OR REPLACE FUNCTION pgqueue.count_jobs() RETURNS trigger
LANGUAGE plpgsql
AS $$
-- The transition tables are read into arrays first, and the rows written from those: on
-- Citus this trigger fires on a shard, where an INSERT into a distributed table cannot read
-- a transition table ("could not find named tuplestore").
DECLARE
    c_stream text[];  -- job_count_delta: per (stream, state), the net change
    c_state text[];
    c_delta bigint[];
    e_stream text[];  -- ready entries to add
    e_priority smallint[];
    e_id bigint[];
    e_kind text[];
    d_stream text[];  -- ready entries to drop
    d_priority smallint[];
    d_id bigint[];
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT array_agg(c.stream), array_agg(c.state), array_agg(c.n)
        INTO c_stream, c_state, c_delta
        FROM (SELECT stream, state, count(*) AS n FROM new_rows GROUP BY stream, state) c;
        SELECT array_agg(n.stream), array_agg(n.priority), array_agg(n.id), array_agg(n.kind)
        INTO e_stream, e_priority, e_id, e_kind
        FROM new_rows n WHERE n.state = 'pending';
    ELSIF TG_OP = 'DELETE' THEN
        SELECT array_agg(c.stream), array_agg(c.state), array_agg(c.n)
        INTO c_stream, c_state, c_delta
        FROM (SELECT stream, state, -count(*) AS n FROM old_rows GROUP BY stream, state) c;
        SELECT array_agg(o.stream), array_agg(o.priority), array_agg(o.id)
        INTO d_stream, d_priority, d_id
        FROM old_rows o WHERE o.state = 'pending';
    ELSE
        SELECT array_agg(c.stream), array_agg(c.state), array_agg(c.n)
        INTO c_stream, c_state, c_delta
        FROM (SELECT stream, state, sum(d) AS n FROM (
                  SELECT stream, state, 1 AS d FROM new_rows
                  UNION ALL SELECT stream, state, -1 FROM old_rows) u
              GROUP BY stream, state HAVING sum(d) <> 0) c;
        IF EXISTS (SELECT 1 FROM old_rows o WHERE o.state = 'pending')
           AND current_setting('pgqueue.ready_taken', true) IS DISTINCT FROM 'on' THEN
            SELECT array_agg(o.stream), array_agg(o.priority), array_agg(o.id)
            INTO d_stream, d_priority, d_id
            FROM old_rows o JOIN new_rows n ON n.id = o.id
            WHERE o.state = 'pending' AND (n.state <> 'pending' OR n.priority <> o.priority
                                           OR n.kind IS DISTINCT FROM o.kind);
        END IF;
        IF EXISTS (SELECT 1 FROM new_rows n WHERE n.state = 'pending') THEN
            SELECT array_agg(n.stream), array_agg(n.priority), array_agg(n.id), array_agg(n.kind)
            INTO e_stream, e_priority, e_id, e_kind
            FROM new_rows n JOIN old_rows o ON o.id = n.id
            WHERE n.state = 'pending' AND (o.state <> 'pending' OR n.priority <> o.priority
                                           OR n.kind IS DISTINCT FROM o.kind);
        END IF;
    END IF;
    IF c_stream IS NOT NULL THEN
        INSERT INTO pgqueue.job_count_delta (slot, stream, state, delta)
        SELECT pgqueue.ring_slot(), c.stream, c.state, c.delta
        FROM unnest(c_stream, c_state, c_delta) AS c(stream, state, delta);
    END IF;
    IF d_id IS NOT NULL THEN
        PERFORM pgqueue.ready_drop(d_stream, d_priority, d_id);
    END IF;
    IF e_id IS NOT NULL THEN
        INSERT INTO pgqueue.ready (slot, stream, priority, job_id, kind)
        SELECT pgqueue.ring_slot(), e.stream, e.priority, e.id, e.kind
        FROM unnest(e_stream, e_priority, e_id, e_kind) AS e(stream, priority, id, kind);
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION pgqueue.count_dead_letters() RETURNS trigger
LANGUAGE plpgsql
AS $$
-- As count_jobs: the transition table read into arrays first.
DECLARE
    c_stream text[];
    c_delta bigint[];
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT array_agg(c.stream), array_agg(c.n) INTO c_stream, c_delta
        FROM (SELECT stream, count(*) AS n FROM new_rows GROUP BY stream) c;
    ELSIF TG_OP = 'DELETE' THEN
        SELECT array_agg(c.stream), array_agg(c.n) INTO c_stream, c_delta
        FROM (SELECT stream, -count(*) AS n FROM old_rows GROUP BY stream) c;
    END IF;
    IF c_stream IS NOT NULL THEN
        INSERT INTO pgqueue.job_count_delta (slot, stream, state, delta)
        SELECT pgqueue.ring_slot(), c.stream, 'dead', c.delta
        FROM unnest(c_stream, c_delta) AS c(stream, delta);
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER job_count_insert AFTER INSERT ON pgqueue.job
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION pgqueue.count_jobs();
CREATE OR REPLACE TRIGGER job_count_update AFTER UPDATE ON pgqueue.job
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgqueue.count_jobs();
CREATE OR REPLACE TRIGGER job_count_delete AFTER DELETE ON pgqueue.job
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION pgqueue.count_jobs();
CREATE OR REPLACE TRIGGER dead_letter_count_insert AFTER INSERT ON pgqueue.dead_letter
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
    EXECUTE FUNCTION pgqueue.count_dead_letters();
CREATE OR REPLACE TRIGGER dead_letter_count_delete AFTER DELETE ON pgqueue.dead_letter
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT
    EXECUTE FUNCTION pgqueue.count_dead_letters();
ALTER TABLE pgqueue.job ENABLE ALWAYS TRIGGER job_count_insert;
ALTER TABLE pgqueue.job ENABLE ALWAYS TRIGGER job_count_update;
ALTER TABLE pgqueue.job ENABLE ALWAYS TRIGGER job_count_delete;
ALTER TABLE pgqueue.dead_letter ENABLE ALWAYS TRIGGER dead_letter_count_insert;
ALTER TABLE pgqueue.dead_letter ENABLE ALWAYS TRIGGER dead_letter_count_delete;

-- Add the deltas of past periods into job_count and truncate their partitions (the last
-- period's, this one's and the next's are still being written), all in one lock request
-- (pgqueue.lock_for_truncate, never queued for) and one TRUNCATE; when another session holds
-- one of them (a fold running elsewhere, a count being read) they are left for the next call.
-- Counts read job_count plus every delta left, so they are exact whenever this runs. Returns
-- how many delta rows it folded. On Citus, p_stream names a shard group: the call runs on its
-- node and folds that group's shards (pgqueue.shard_of, pgqueue.recycle_rings); on one
-- server it is left out (pgqueue.each_stream: the whole tables).
CREATE OR REPLACE FUNCTION pgqueue.fold_job_counts(p_stream text DEFAULT pgqueue.each_stream())
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    v_slots smallint[];
    v_parts regclass[];
    v_n bigint;
BEGIN
    v_slots := ARRAY(SELECT s FROM unnest(pgqueue.ring_past_slots()) s
                     WHERE pg_relation_size(pgqueue.shard_of('job_count_delta_' || s, p_stream)) > 0
                     ORDER BY s);
    v_parts := ARRAY(SELECT pgqueue.shard_of('job_count_delta_' || s, p_stream)
                     FROM unnest(v_slots) s);
    IF cardinality(v_parts) = 0 OR NOT pgqueue.lock_for_truncate(v_parts, 5) THEN
        RETURN 0;
    END IF;
    EXECUTE format(
        'WITH d AS (SELECT c.stream, c.state, c.delta FROM %s c WHERE c.slot = ANY($1)), '
        'folded AS ('
        '    INSERT INTO %s AS c (stream, state, n) '
        '    SELECT d.stream, d.state, sum(d.delta) FROM d GROUP BY d.stream, d.state '
        '    ORDER BY d.stream, d.state '  -- one lock order: concurrent folds never deadlock
        '    ON CONFLICT (stream, state) DO UPDATE SET n = c.n + EXCLUDED.n '
        '    RETURNING 1) '
        'SELECT count(*) FROM d',
        pgqueue.shard_of('job_count_delta', p_stream), pgqueue.shard_of('job_count', p_stream))
    INTO v_n USING v_slots;
    EXECUTE 'TRUNCATE ' || (SELECT string_agg(format('%s', p), ', ') FROM unnest(v_parts) p);
    RETURN v_n;
END
$$;

-- fragment: job_preview
-- A job as pgqueue.jobs has it (JobInfo reads these columns by name, pgqueue/shapes.py), its
-- payload cut to the first %(preview)s bytes in the database (substring reads only those
-- bytes of a TOASTed value; octet_length reads none) and the whole payload's size, so a
-- 200 MiB job is shown without sending 200 MiB.
id, stream, kind, state, substring(payload FROM 1 FOR %(preview)s) AS payload,
octet_length(payload) AS payload_size, priority, attempts, max_attempts, not_before,
enqueued_at, dedup_key, last_error, state_reason, state_detail, lease_id, worker_node,
worker_instance, lease_expires_at, died_at, last_completed_step, cursor_step, cursor,
checkpoint_updated_at, schema_version, step_set_hash, crashes_by_step, concurrency_key,
cancel_requested_at, error_summary, timeout_ms

-- fragment: jobs_by_ready
-- pgqueue.jobs twice, each row marked by_ready: every job (read by the primary keys, the
-- view's two branches merged by id), and a stream's ready jobs through their entries in
-- pgqueue.ready (for a stream whose ready jobs are few among many). A query keeps one branch
-- with `by_ready = %(by_ready)s` and the planner prunes the other by its constant; the first
-- branch has no WHERE of its own (one that had was planned apart, and every job sorted).
(SELECT *, false AS by_ready FROM pgqueue.jobs
 UNION ALL
 SELECT *, true FROM pgqueue.jobs
 WHERE id IN (SELECT r.job_id FROM pgqueue.ready r WHERE r.stream = %(stream)s::text))

-- name: job_by_id
-- One job in any set, dead letters included.
SELECT * FROM pgqueue.jobs WHERE id = %(job_id)s

-- name: jobs_list
-- Jobs, newest first, optionally of one stream, state and/or kind.
SELECT * FROM pgqueue.jobs
WHERE (%(stream)s::text IS NULL OR stream = %(stream)s::text)
  AND (%(state)s::text IS NULL OR state = %(state)s::text)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
ORDER BY id DESC
LIMIT %(limit)s

-- name: known_streams
-- Every stream this database knows: one that has or had jobs (the kept counts), settings,
-- schedules, or a live worker on it. Small tables only; what "no such stream" is said from.
SELECT c.stream FROM pgqueue.job_count c
UNION SELECT d.stream FROM pgqueue.job_count_delta d
UNION SELECT s.stream FROM pgqueue.stream_config s
UNION SELECT h.stream FROM pgqueue.schedule h
UNION SELECT unnest(w.streams) FROM pgqueue.worker w
ORDER BY 1

-- name: stats
-- Jobs by stream and state; for ready jobs, the age of the oldest (since it became leasable).
SELECT stream, state, count(*) AS count,
       extract(epoch FROM now() - min(not_before) FILTER (WHERE state = 'pending'))::float8
           AS oldest_age_seconds
FROM pgqueue.jobs
GROUP BY stream, state
ORDER BY stream, state

-- name: job_preview_by_id
-- One job in any set like job_by_id, its payload cut to the first %(preview)s bytes.
SELECT {{job_preview}}
FROM pgqueue.jobs WHERE id = %(job_id)s

-- name: jobs_preview_list
-- jobs_list with each payload cut to its first %(preview)s bytes (as job_preview_by_id).
SELECT {{job_preview}}
FROM pgqueue.jobs
WHERE (%(stream)s::text IS NULL OR stream = %(stream)s::text)
  AND (%(state)s::text IS NULL OR state = %(state)s::text)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
ORDER BY id DESC
LIMIT %(limit)s

-- name: jobs_page
-- A page for people (the dashboard): jobs newest first, of one stream, state and kind where
-- given, with ids below %(after)s (keyset paging: the thousandth page costs what the first
-- does), each payload cut to its first %(preview)s bytes. The primary keys serve it (the
-- view's two branches merged by id, read backwards); a stream and a state few jobs are in by
-- job_listed_idx, job_leased_idx or dead_letter_stream_idx. A state rules out the other
-- table's branch. A kind is a filter on the rows read: a rare one takes longer to find.
-- A stream's ready jobs few among many (pending_is_rare, by_ready) are read through their
-- entries in pgqueue.ready instead (jobs_by_ready).
-- planned per call: the filters given decide the index (a cached plan would not)
SELECT {{job_preview}}
FROM {{jobs_by_ready}} jobs
WHERE by_ready = %(by_ready)s::boolean
  AND (%(stream)s::text IS NULL OR stream = %(stream)s::text)
  AND (%(state)s::text IS NULL OR state = %(state)s::text)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
  AND (%(after)s::bigint IS NULL OR id < %(after)s::bigint)
  AND (%(through)s::bigint IS NULL OR id <= %(through)s::bigint)
ORDER BY id DESC
LIMIT %(limit)s

-- name: jobs_page_of_kind
-- jobs_page with a kind, looking at no more than the %(window)s newest jobs of the rest of the
-- filter (below %(after)s): no index holds the kind (one would cost every enqueue), so a
-- kind few jobs have is found by reading jobs, and this bounds how many one page reads. Each
-- row carries the window's oldest id and size; the caller goes on below it when the window was
-- full. A row with a NULL id: no job of the kind in the window.
-- planned per call: the filters given decide the index (a cached plan would not)
WITH win AS MATERIALIZED (
    SELECT min(id) AS floor, count(*) AS size
    FROM (SELECT id FROM {{jobs_by_ready}} jobs
          WHERE by_ready = %(by_ready)s::boolean
            AND (%(stream)s::text IS NULL OR stream = %(stream)s::text)
            AND (%(state)s::text IS NULL OR state = %(state)s::text)
            AND (%(after)s::bigint IS NULL OR id < %(after)s::bigint)
          ORDER BY id DESC
          LIMIT %(window)s) w),
j AS MATERIALIZED (  -- not LATERAL: Citus joins no distributed subquery laterally
    SELECT {{job_preview}}
    FROM {{jobs_by_ready}} jobs
    WHERE by_ready = %(by_ready)s::boolean
      AND (%(stream)s::text IS NULL OR stream = %(stream)s::text)
      AND (%(state)s::text IS NULL OR state = %(state)s::text)
      AND kind = %(kind)s::text
      AND (%(after)s::bigint IS NULL OR id < %(after)s::bigint)
      AND id >= (SELECT floor FROM win)
    ORDER BY id DESC
    LIMIT %(limit)s)
SELECT win.floor AS window_floor, win.size AS window_size, j.*
FROM win LEFT JOIN j ON true
ORDER BY j.id DESC

-- name: jobs_page_ids
-- The ids of jobs_page, each with its stream (a bulk action walks them a batch at a time),
-- by the primary keys (a walk of a batch at a time; on Citus a UNION of the view with its
-- ready branch is not pushed down here).
-- planned per call: the filters given decide the index (a cached plan would not)
SELECT id, stream FROM pgqueue.jobs
WHERE (%(stream)s::text IS NULL OR stream = %(stream)s::text)
  AND (%(state)s::text IS NULL OR state = %(state)s::text)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
  AND (%(after)s::bigint IS NULL OR id < %(after)s::bigint)
  AND (%(through)s::bigint IS NULL OR id <= %(through)s::bigint)
ORDER BY id DESC
LIMIT %(limit)s

-- name: jobs_count
-- How many jobs jobs_page's filter matches (what a bulk action will touch), and the newest
-- job id there is (the bulk action goes no further, so jobs enqueued after the count are left
-- alone). Without a kind, the count is the kept counts' (as the gauges read them: no scan);
-- with one, the jobs of the kind are counted.
-- planned per call: the filters given decide the index (a cached plan would not)
SELECT CASE WHEN %(kind)s::text IS NULL THEN
           (SELECT coalesce(sum(n), 0)
            FROM (SELECT stream, state, n FROM pgqueue.job_count
                  UNION ALL SELECT stream, state, delta FROM pgqueue.job_count_delta) c
            WHERE (%(stream)s::text IS NULL OR stream = %(stream)s::text)
              AND (%(state)s::text IS NULL OR state = %(state)s::text))
       ELSE
           (SELECT count(*) FROM pgqueue.jobs
            WHERE (%(stream)s::text IS NULL OR stream = %(stream)s::text)
              AND (%(state)s::text IS NULL OR state = %(state)s::text)
              AND kind = %(kind)s::text)
       END::bigint AS count,
       greatest((SELECT max(id) FROM pgqueue.job), (SELECT max(id) FROM pgqueue.dead_letter))
           AS newest

-- name: throughput
-- Per stream and minute since %(since)s, at most the last hour, the jobs enqueued, acked,
-- failed (nacked or reclaimed) and cancelled, counted from the op log (its BRIN index on at
-- reads only the span's blocks), and the database's current minute: a reader keeps the minutes
-- that are over and asks again only from the current one, so each refresh reads about a
-- minute of ops however long the span (the dashboard's hour: 220 ms at 1,000,000 ops an hour
-- when read whole).
WITH t AS MATERIALIZED (  -- a CTE of its own: Citus joins no distributed subquery laterally
    SELECT stream, date_trunc('minute', at) AS minute,
           count(*) FILTER (WHERE op = 'Enqueue')::bigint AS enqueued,
           count(*) FILTER (WHERE op = 'Ack')::bigint AS acked,
           count(*) FILTER (WHERE op IN ('Nack', 'Reclaim'))::bigint AS failed,
           count(*) FILTER (WHERE op = 'Cancel')::bigint AS cancelled
    FROM pgqueue.op_log
    WHERE at >= greatest(%(since)s::timestamptz, date_trunc('minute', now()) - interval '1 hour')
      AND op IN ('Enqueue', 'Ack', 'Nack', 'Reclaim', 'Cancel')
    GROUP BY stream, date_trunc('minute', at)
)
SELECT n.now_minute, t.stream, t.minute, t.enqueued, t.acked, t.failed, t.cancelled
FROM (SELECT date_trunc('minute', now()) AS now_minute) n
LEFT JOIN t ON true
ORDER BY t.stream, t.minute

-- name: dead_letters_preview
-- dead_letters (most recently died first) with each payload cut to its first %(preview)s bytes.
SELECT {{job_preview}}
FROM pgqueue.jobs WHERE state = 'dead' AND stream = %(stream)s
ORDER BY died_at DESC, id DESC LIMIT %(limit)s

-- name: oplog_tail_preview
-- oplog_tail with any payload in a body cut to its first %(preview)s bytes (payload_size: its
-- whole length). An Enqueue op's body is built as pgqueue.op_body builds it, from the cut
-- payload: op_body would base64 the whole payload first (and past ~190 MiB the result no
-- longer fits in a jsonb). Bodies that hold a payload themselves (Enqueue ops before 0003,
-- Upcast, UpsertSchedule) are cut after decoding. The newest ops are chosen first, so only
-- they are read.
SELECT o.seq, o.stream, o.op, o.job_id, o.lease_id, o.xid::text AS xid, o.at,
       CASE
           WHEN o.op = 'Enqueue' AND o.payload IS NOT NULL THEN o.body || jsonb_build_object(
               'job_id', o.job_id, 'stream', o.stream, 'kind', o.kind,
               'payload', pgqueue.b64(substring(o.payload FROM 1 FOR %(preview)s)),
               'priority', o.priority,
               'state', CASE WHEN pgqueue.to_ms(o.not_before) > (o.body ->> 'enqueued_at_ms')::bigint
                             THEN 'scheduled' ELSE 'pending' END,
               'not_before_ms', pgqueue.to_ms(o.not_before), 'dedup_key', pgqueue.b64(o.dedup_key),
               'max_attempts', o.max_attempts, 'schema_version', o.schema_version,
               'next_job_id', o.job_id + 1)
           WHEN b.payload IS NOT NULL AND octet_length(b.payload) > %(preview)s THEN
               jsonb_set(o.body, '{payload}',
                         to_jsonb(pgqueue.b64(substring(b.payload FROM 1 FOR %(preview)s))))
           ELSE o.body
       END AS body,
       coalesce(octet_length(o.payload), octet_length(b.payload)) AS payload_size
FROM (SELECT * FROM pgqueue.op_log
      WHERE (%(stream)s::text IS NULL OR stream = %(stream)s::text)
        AND (%(job_id)s::bigint IS NULL OR job_id = %(job_id)s::bigint)
      ORDER BY seq DESC
      LIMIT %(limit)s) o
CROSS JOIN LATERAL (
    SELECT CASE WHEN o.op = 'Enqueue' AND o.payload IS NOT NULL THEN NULL
                WHEN jsonb_typeof(o.body -> 'payload') = 'string'
                THEN pgqueue.unb64(o.body ->> 'payload') END AS payload) b
ORDER BY o.seq DESC

-- name: read_snapshot
-- The first statement of a read-only transaction whose reads must agree (a job's history: its
-- row and its ops from one snapshot).
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY

-- name: fold_job_counts
-- Add the counts' pending deltas into job_count (maintenance, and a metrics scrape).
SELECT pgqueue.fold_job_counts() AS folded

-- name: gauge_job_counts
-- Jobs by stream and state without a scan of the job table: the folded counts plus the deltas
-- not folded yet (a row per write statement of the last three 4-second periods or so).
SELECT stream, state, sum(n)::bigint AS count
FROM (SELECT stream, state, n FROM pgqueue.job_count
      UNION ALL SELECT stream, state, delta FROM pgqueue.job_count_delta) c
GROUP BY stream, state

-- name: gauge_schedules
-- Schedules by stream and paused (the schedule table: one row per schedule).
SELECT stream, paused, count(*)::bigint AS count FROM pgqueue.schedule GROUP BY stream, paused

-- name: gauge_oldest_pending
-- Per stream, seconds since its oldest ready job became leasable: one probe each of
-- job_pending_since_idx (NULL: none ready).
SELECT s.stream,
       extract(epoch FROM now() - (SELECT min(j.not_before) FROM pgqueue.job j
                                   WHERE j.stream = s.stream AND j.state = 'pending'
                                     AND j.not_before > '-infinity'))::float8
           AS age_seconds
FROM unnest(%(streams)s::text[]) AS s(stream)

-- name: gauge_oldest_pending_of
-- gauge_oldest_pending for one stream, on a Citus cluster (which plans no subquery correlated
-- with unnest): the same probe, run on the stream's node, a statement per stream in one round
-- trip.
SELECT %(stream)s::text AS stream,
       extract(epoch FROM now() - min(j.not_before))::float8 AS age_seconds
FROM pgqueue.job j
WHERE j.stream = %(stream)s::text AND j.state = 'pending' AND j.not_before > '-infinity'

-- name: gauge_op_log
-- The ops the log keeps: for each window of 2^32 seqs it holds (a partition of its ring, see
-- pgqueue.op_log), the last seq less the first, plus one (probes of the primary keys; seqs
-- rolled back leave gaps, so this is at most a few more than a count). The windows are found
-- by skipping from one to the next (the ring keeps at most 32), never by reading the log.
WITH RECURSIVE w(k) AS (
    SELECT min(seq) >> 32 FROM pgqueue.op_log
    UNION ALL
    SELECT (SELECT min(o.seq) >> 32 FROM pgqueue.op_log o WHERE o.seq >= (w.k + 1) << 32)
    FROM w WHERE w.k IS NOT NULL
)
SELECT coalesce(sum((SELECT max(o.seq) - min(o.seq) + 1 FROM pgqueue.op_log o
                     WHERE o.seq >= w.k << 32 AND o.seq < (w.k + 1) << 32)), 0)::bigint AS ops
FROM w WHERE w.k IS NOT NULL

-- name: gauge_op_log_count
-- gauge_op_log on a Citus cluster: there a node's seqs step by 1024 and the key is (stream,
-- seq), so a window's span is no count and no index is ordered by seq alone; the ops are
-- counted instead, in parallel on every node (each a scan of its ops: this gauge's cost grows
-- with the log there: 72-77 ms for 1,000,045 ops on the test bed, 4 shards on two workers).
SELECT count(*)::bigint AS ops FROM pgqueue.op_log

-- name: gauge_workers
-- Registered workers, live or stale by the database's clock (a heartbeat older than
-- %(stale_after)s seconds), as `pgqueue workers` tells them.
SELECT count(*) FILTER (WHERE heartbeat_at >= now() - %(stale_after)s * interval '1 second')::bigint
           AS live,
       count(*) FILTER (WHERE heartbeat_at < now() - %(stale_after)s * interval '1 second')::bigint
           AS stale
FROM pgqueue.worker

-- name: pending_is_rare
-- Whether a page of a stream's ready jobs reads fewer rows through their entries in
-- pgqueue.ready (about as many as the stream has ready jobs, p) than through the primary keys
-- newest first (about all jobs, t, over p per job found, for %(limit)s jobs): p * p < t * limit.
-- By the counts the writes keep (as jobs_count reads them: no scan).
SELECT coalesce(sum(n) FILTER (WHERE stream = %(stream)s::text AND state = 'pending'), 0) ^ 2
       < coalesce(sum(n), 0) * %(limit)s::bigint AS rare
FROM (SELECT stream, state, n FROM pgqueue.job_count
      UNION ALL SELECT stream, state, delta FROM pgqueue.job_count_delta) c
