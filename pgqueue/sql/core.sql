-- core: The job tables and the pieces every transition shares.
--
-- Tables: job (live jobs with their leases and checkpoints), dead_letter, the stream and kind
-- settings. Every transition is a function of this schema that changes state AND appends its
-- op to op_log in the same transaction, so psql users get the same guarantees as the library.
-- Timestamps written by pgqueue are truncated to milliseconds so that the op log, which
-- carries them as epoch milliseconds, replays them exactly. SQL helpers are declared with
-- their body's true volatility (extract on timestamptz, timestamptz + interval and
-- jsonb_build_object are STABLE): a function declared more strictly than its body is never
-- inlined and costs a call per row (an op body of 1,000 jobs: 7.8 ms declared IMMUTABLE,
-- 3.5 ms inlined).

-- schema: tables ----------------------------------------------------------------------------
CREATE SCHEMA IF NOT EXISTS pgqueue;

-- Job ids are unique across streams; lease ids are unique forever (fencing tokens).
CREATE SEQUENCE pgqueue.job_id_seq;
CREATE SEQUENCE pgqueue.lease_id_seq;

-- Per-stream settings; a stream without a row uses the defaults below.
CREATE TABLE pgqueue.stream_config (
    stream            text PRIMARY KEY,
    -- A failed job's backoff: about base * 2^attempts, +-25% jitter, at most the cap.
    retry_base_ms     bigint NOT NULL DEFAULT 1000 CHECK (retry_base_ms >= 0),
    -- The backoff's cap.
    retry_cap_ms      bigint NOT NULL DEFAULT 3600000 CHECK (retry_cap_ms >= 0),
    -- Crashes of one step (its lease expired while it ran) that quarantine the job.
    quarantine_after  int    NOT NULL DEFAULT 3 CHECK (quarantine_after >= 1),
    -- The largest payload a job of the stream may carry: 16 MiB unless set, at most 64 MiB,
    -- the size every path (op log replay, logical and follow replicas, seeding, verify, the
    -- CLI) is tested to carry. Larger payloads belong in object storage, referenced by key.
    max_payload_bytes bigint NOT NULL DEFAULT 16777216
                      CHECK (max_payload_bytes BETWEEN 1 AND 67108864)
);

-- Per-kind settings within a stream (set by Queue.configure_kind, the CLI's `kinds set`, or a
-- worker registering handlers that name them); a row exists while one setting is set, and a
-- NULL one means: none (quarantine_after: the stream's). Reclaim and the lease read them
-- without handler code:
--   quarantine_after  crashes of one step before the job is quarantined
--   max_concurrency   at most this many jobs of the kind leased at once, across all workers
--   rate_count/_ms    at most rate_count leases of the kind starting in any rate_ms window
--   max_per_key       at most this many leased jobs sharing one concurrency_key
CREATE TABLE pgqueue.kind_config (
    stream           text NOT NULL,
    kind             text NOT NULL,
    -- Crashes of one step that quarantine a job of the kind (none: the stream's).
    quarantine_after int CHECK (quarantine_after >= 1),
    -- At most this many jobs of the kind leased at once, across every worker.
    max_concurrency  int CHECK (max_concurrency >= 1),
    -- At most rate_count leases starting in any window of rate_ms (both set, or neither).
    rate_count       int CHECK (rate_count >= 1),
    -- The rate limit's window.
    rate_ms          bigint CHECK (rate_ms >= 1),
    -- At most this many leased jobs sharing one concurrency_key.
    max_per_key      int CHECK (max_per_key >= 1),
    CHECK ((rate_count IS NULL) = (rate_ms IS NULL)),
    PRIMARY KEY (stream, kind)
);

-- One row per live job. States:
--   pending      ready to lease now
--   scheduled    waiting for not_before (kept apart so a million delayed jobs never slow a lease;
--                a due scheduled job is leasable at once, without a maintenance pass)
--   leased       held by lease_id until lease_expires_at
--   quarantined  its step in progress crashed workers quarantine_after times; operator decides
--   undecodable  the code that leased it cannot run it (state_reason says why); operator decides
-- Acked jobs are deleted (their history stays in op_log); dead jobs move to dead_letter.
CREATE TABLE pgqueue.job (
    id                    bigint PRIMARY KEY,
    stream                text NOT NULL,
    kind                  text,
    payload               bytea NOT NULL,
    priority              smallint NOT NULL DEFAULT 0 CHECK (priority BETWEEN 0 AND 255),
    state                 text NOT NULL
                          CHECK (state IN ('pending', 'scheduled', 'leased', 'quarantined', 'undecodable')),
    not_before            timestamptz NOT NULL,
    enqueued_at           timestamptz NOT NULL,
    dedup_key             bytea,
    attempts              int NOT NULL DEFAULT 0,
    max_attempts          int NOT NULL DEFAULT 25 CHECK (max_attempts >= 0),
    last_error            text,
    state_reason          text,   -- why quarantined/undecodable: crashed, unknown_kind, ...
    state_detail          jsonb,  -- the particulars (step and crashes, old and new step lists)
    -- the lease: only meaningful while state = 'leased'
    lease_id              bigint,
    worker_node           int,
    worker_instance       int,
    lease_expires_at      timestamptz,
    -- the checkpoint: written by the renewal UPDATE; survives reclaim, nack and dead-lettering
    last_completed_step   text,
    cursor_step           text,
    cursor                bytea,
    checkpoint_updated_at timestamptz,
    schema_version        int,
    step_set_hash         text,
    crashes_by_step       jsonb NOT NULL DEFAULT '{}',
    -- whether the producer set max_attempts: when not, a worker's handler may set it (its
    -- app.job(max_attempts=...)) at the job's first failure; a value set at enqueue wins
    max_attempts_given    boolean NOT NULL DEFAULT true,
    -- whether the current lease's handler has started: a worker leases jobs ahead of its free
    -- handlers (prefetch) and says which it started (at the lease, then in its renewals);
    -- reclaim charges no attempt and no crash to a lease whose handler never started
    lease_started         boolean NOT NULL DEFAULT true,
    -- how often a lease of this job expired before its handler started (said so, or not yet
    -- said: a job that kills its worker the moment it starts looks the same); from the first,
    -- each later lease counts as started, so such a job is charged and still quarantined
    unstarted_reclaims    int NOT NULL DEFAULT 0,
    -- the producer's trace context (W3C traceparent/tracestate, as OpenTelemetry propagates
    -- it), so the span of the job's run joins the trace of the request that enqueued it
    trace_context         jsonb,
    -- what the kind's max_per_key counts (a tenant id, say): at most that many leased jobs of
    -- the kind share one key; NULL: no key, no per-key limit
    concurrency_key       text CHECK (length(concurrency_key) BETWEEN 1 AND 200),
    -- when an operator asked to cancel the job while a worker held it (pgqueue.cancel): the
    -- worker learns it from its next renewal (or at once by NOTIFY pgqueue_cancel), and every
    -- way the lease can end but an ack (the handler stopping, a nack, a reclaim, a give-back,
    -- parking) ends the job as cancelled. Set only while leased; never indexed (renewals stay
    -- HOT)
    cancel_requested_at   timestamptz,
    -- the last failure in one line (`ExceptionType: message`, at most 200 characters) beside
    -- its traceback in last_error; NULL on rows written before 0010 (readers take it from
    -- last_error: pgqueue.error_summary)
    error_summary         text,
    -- the job's own time limit per run, set at enqueue (NULL: its handler's, or none)
    timeout_ms            int CHECK (timeout_ms > 0)
) WITH (fillfactor = 70);  -- room on each page so renewals stay HOT updates

-- Nothing a renewal writes is indexed. Ready jobs are found through pgqueue.ready (below),
-- not an index of this table: an index entry of a job leased or acked since the vacuum
-- horizon was pinned stays for every lease scan to step over.
CREATE INDEX job_scheduled_idx ON pgqueue.job (stream, not_before, id) WHERE state = 'scheduled';
-- Leased jobs only (reclaim reads them all: few), never keyed on the expiry, which renewals
-- change. By kind and concurrency key within a stream: the lease counts a limited kind's leased jobs
-- (max_concurrency) and a key's (max_per_key) with a range of it, however many other jobs are
-- leased. The one entry a lease writes, as before it had these columns.
CREATE INDEX job_leased_idx ON pgqueue.job (stream, kind, concurrency_key, id)
    WHERE state = 'leased';
-- Operators (and the dashboard's keyset pages) list a stream's jobs in one state, newest
-- first. Only the states a hot path never writes are indexed here: a ready job costs the
-- enqueue no entry (its pages are read through the primary key, dense with ready jobs, or
-- pgqueue.ready when they are few), a lease none (leased jobs: job_leased_idx). Measured:
-- indexing pending jobs here cost batched enqueue 7-10 % (and a kind column 10 % more).
CREATE INDEX job_listed_idx ON pgqueue.job (stream, state, id)
    WHERE state IN ('scheduled', 'quarantined', 'undecodable');
-- At most one live job per (stream, dedup_key): enforced here, never by read-then-write.
-- Every index but the primary key leads with the stream and holds one state or a few. A
-- statement that finds jobs by id names their stream too (every transition does, 0017: on
-- Citus the stream says which node), and tests their state in the "POSIX" collation, which
-- no index predicate here is in (equality is bytewise in any collation): so the planner never
-- takes a stream's partial index, and every entry of the stream in it, for what the primary
-- key finds by id. Measured (bench/throughput.py, after 20,000 jobs handled): with the state
-- in the default collation, renewing 1,000 leases locked them through job_leased_idx's range
-- of the stream, 4,600 renewals/s instead of 21,000.
CREATE UNIQUE INDEX job_dedup_idx ON pgqueue.job (stream, dedup_key)
    WHERE dedup_key IS NOT NULL AND state IN ('pending', 'scheduled', 'leased');

-- The ready jobs in lease order (priority DESC then id, within a stream): one entry per job
-- that became pending, written by the job table's statement triggers (pgqueue.count_jobs) on
-- every path, replicas' apply included, and removed by the lease that takes it. Derived
-- state, not in the op log (a migration or a promotion can rebuild it from job).
--
-- Why not an index of job: under a pinned vacuum horizon (a session idle in transaction, a
-- long REPEATABLE READ report, a logical slot) the entry of every job leased or acked since
-- stays in the index, and every lease scan steps over all of them: 2,000 buffers per lease
-- after a minute at 400 jobs/s, growing for as long as the horizon is held. Here each entry
-- goes to the partition of the 4-second period it was written in (pgqueue.ring_slot: a ring
-- of 8), and once a past period's partition holds no ready job it is truncated whole
-- (pgqueue.recycle_ready), which no horizon holds back: a lease steps over at most the
-- entries of the last few periods.
--
-- An entry may outlive its job's readiness (a path that does not remove it): a lease takes
-- it out and leases the job only when its row says pending. Every pending job has an entry.
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
-- Lease order within a stream, and by kind (a lease of a stream with limited kinds takes each
-- kind's jobs apart: pgqueue.pick_within_limits).
CREATE INDEX ready_order_idx ON pgqueue.ready (stream, priority DESC, job_id);
CREATE INDEX ready_kind_idx ON pgqueue.ready (stream, kind, priority DESC, job_id);

-- Jobs that used up their attempts, moved out of job with their checkpoint and last error.
CREATE TABLE pgqueue.dead_letter (
    id                    bigint PRIMARY KEY,
    stream                text NOT NULL,
    kind                  text,
    payload               bytea NOT NULL,
    priority              smallint NOT NULL,
    enqueued_at           timestamptz NOT NULL,
    dedup_key             bytea,
    attempts              int NOT NULL,
    max_attempts          int NOT NULL,
    last_error            text,
    died_at               timestamptz NOT NULL,
    last_completed_step   text,
    cursor_step           text,
    cursor                bytea,
    checkpoint_updated_at timestamptz,
    schema_version        int,
    step_set_hash         text,
    crashes_by_step       jsonb NOT NULL DEFAULT '{}',
    max_attempts_given    boolean NOT NULL DEFAULT true,
    concurrency_key       text,
    error_summary         text,
    timeout_ms            int
);
CREATE INDEX dead_letter_stream_idx ON pgqueue.dead_letter (stream, id);

-- schema: functions -------------------------------------------------------------------------

-- The partition a row of a ring written now goes to (pgqueue.ready, pgqueue.job_count_delta):
-- the 4-second period it is written in, on a ring of 8 (32 seconds around). Past periods'
-- partitions are emptied whole, by TRUNCATE (pgqueue.recycle_ready, pgqueue.fold_job_counts):
-- nothing left for vacuum, which a held horizon keeps from removing anything. Not every
-- second: a TRUNCATE makes every session plan its statements on the ring again, and leases
-- wait behind its lock.
CREATE OR REPLACE FUNCTION pgqueue.ring_slot() RETURNS smallint
LANGUAGE sql VOLATILE PARALLEL SAFE
AS $$ SELECT (floor(extract(epoch FROM clock_timestamp()) / 4)::bigint % 8)::smallint $$;

-- The ring's partitions that may be emptied now: all but the last period's, this one's and
-- the next's (rows are still being written to those), in slot order.
CREATE OR REPLACE FUNCTION pgqueue.ring_past_slots() RETURNS smallint[]
LANGUAGE sql VOLATILE
AS $$
    SELECT array_agg(s::smallint ORDER BY s) FROM generate_series(0, 7) s, pgqueue.ring_slot() n
    WHERE (s - n + 8) % 8 NOT IN (0, 1, 7)
$$;

-- Lock a ring's past partitions for truncation (pgqueue.recycle_ready, pgqueue.fold_job_counts,
-- pgqueue.recycle_op_log) in one request: NOWAIT, tried p_tries times 2 ms apart, then (when
-- p_wait_ms > 0) once more queued for at most p_wait_ms. A queued ACCESS EXCLUSIVE request
-- makes every lease (which reads all the ready ring's partitions) wait behind it, so the wait
-- is short; but without it a busy queue's leases, which overlap back to back, left no moment
-- free of them, no partition was emptied, and the entries piled up in front of every lease
-- (measured: 8 truncations in 10 minutes of a held horizon at 1,000 jobs/s). False: another
-- session held one of them throughout (they are left for the next pass). Held to the end of
-- the transaction.
CREATE OR REPLACE FUNCTION pgqueue.lock_for_truncate(p_parts regclass[], p_tries int,
                                                     p_wait_ms int DEFAULT 0)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_list text := (SELECT string_agg(format('%s', p), ', ') FROM unnest(p_parts) p);
    v_timeout text := current_setting('lock_timeout');
BEGIN
    FOR i IN 1 .. p_tries LOOP
        BEGIN
            EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE NOWAIT', v_list);
            RETURN true;
        EXCEPTION WHEN lock_not_available THEN
            PERFORM pg_sleep(0.002);
        END;
    END LOOP;
    IF coalesce(p_wait_ms, 0) <= 0 THEN
        RETURN false;
    END IF;
    BEGIN
        PERFORM set_config('lock_timeout', p_wait_ms || 'ms', true);
        EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', v_list);
        PERFORM set_config('lock_timeout', v_timeout, true);
        RETURN true;
    EXCEPTION WHEN lock_not_available THEN
        PERFORM set_config('lock_timeout', v_timeout, true);
        RETURN false;
    END;
END
$$;

-- A table of pgqueue named for a maintenance call (p_table: 'job', 'ready', 'ready_3', ...):
-- the table itself on one server (p_stream NULL); on a Citus node, the table's shard that
-- holds p_stream's rows there (e.g. pgqueue.ready_3_102010), which the maintenance calls run
-- on that node read and empty (pgqueue.recycle_rings). There a statement naming the
-- distributed table may touch p_stream's rows only, and the shard holds the rows of every
-- stream hashed to it; a shard is written by name only with citus.enable_manual_changes_to_shards,
-- set here for the rest of the transaction.
CREATE OR REPLACE FUNCTION pgqueue.shard_of(p_table text, p_stream text) RETURNS regclass
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_shard bigint;
BEGIN
    IF p_stream IS NULL THEN
        RETURN format('pgqueue.%I', p_table)::regclass;
    END IF;
    PERFORM set_config('citus.enable_manual_changes_to_shards', 'on', true);
    -- by EXECUTE: the function is Citus's, absent on one server
    EXECUTE 'SELECT get_shard_id_for_distribution_column($1, $2)'
        INTO v_shard USING format('pgqueue.%I', p_table)::regclass, p_stream;
    RETURN format('pgqueue.%I', p_table || '_' || v_shard)::regclass;
END
$$;

-- Every shard of a table of pgqueue on this Citus node (p_stream: any stream, as for
-- pgqueue.shard_of; NULL: the table itself, on one server): what a maintenance call on one
-- shard group checks of the others on the node (the op log's next partition is empty in all
-- of them before the node's sequence moves on to it, pgqueue.recycle_op_log).
CREATE OR REPLACE FUNCTION pgqueue.shards_here(p_table text, p_stream text) RETURNS regclass[]
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_shards regclass[];
BEGIN
    IF p_stream IS NULL THEN
        RETURN ARRAY[format('pgqueue.%I', p_table)::regclass];
    END IF;
    EXECUTE 'SELECT coalesce(array_agg(format(''pgqueue.%I'', $1 || ''_'' || s.shardid)::regclass), '
            '''{}'') FROM pg_dist_shard s JOIN pg_dist_placement p ON p.shardid = s.shardid '
            'WHERE s.logicalrelid = format(''pgqueue.%I'', $1)::regclass '
            'AND p.groupid = (SELECT groupid FROM pg_dist_local_group)'
        INTO v_shards USING p_table;
    RETURN v_shards;
END
$$;

-- On a Citus node whose group is p_group (elsewhere nothing): raise its id sequences so that
-- the next job id, lease id and op seq each exceed the floor given (the highest any node has
-- handed out, plus a margin: pgqueue.cluster.placement), keeping the node's own form
-- k * 1024 + group. Run before streams move onto the node, so that a moved stream's ids and
-- op seqs keep increasing (FIFO by id, replay by seq). True when this node is the one.
CREATE OR REPLACE FUNCTION pgqueue.raise_node_ids(p_group int, p_job bigint, p_lease bigint,
                                                  p_op bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_group int;
    v_floor bigint;
    v_seq text;
    v_last bigint;
BEGIN
    EXECUTE 'SELECT groupid FROM pg_dist_local_group' INTO v_group;
    IF v_group IS DISTINCT FROM p_group THEN
        RETURN false;
    END IF;
    FOR v_seq, v_floor IN VALUES ('job_id_seq', p_job), ('lease_id_seq', p_lease),
                                 ('op_log_seq_seq', p_op) LOOP
        EXECUTE format('SELECT last_value FROM pgqueue.%I', v_seq) INTO v_last;
        IF v_last < v_floor THEN
            -- the first k * 1024 + group above the floor, handed out next
            PERFORM setval(format('pgqueue.%I', v_seq),
                           (v_floor / 1024 + 1) * 1024 + v_group - 1024, true);
        END IF;
    END LOOP;
    RETURN true;
END
$$;

-- A failure's one-line summary from what was said about it: a traceback's last line (Python's
-- `ExceptionType: message`), else its first non-blank line; whitespace runs made one space, at
-- most 200 characters. Normalises every summary a transition stores (a worker's, or one a
-- caller gave), and gives one to rows and calls that carry only the error text (written
-- before 0010, or by a client that sends none).
CREATE OR REPLACE FUNCTION pgqueue.error_summary(p_error text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN length(l.line) > 200 THEN left(l.line, 199) || '…' ELSE l.line END
    FROM (SELECT nullif(btrim(regexp_replace(
              CASE WHEN p_error LIKE 'Traceback (most recent call last):%'
                   THEN (SELECT x FROM regexp_split_to_table(p_error, E'\n') WITH ORDINALITY
                                       AS t(x, n)
                         WHERE x ~ '\S' ORDER BY n DESC LIMIT 1)
                   ELSE (SELECT x FROM regexp_split_to_table(p_error, E'\n') WITH ORDINALITY
                                       AS t(x, n)
                         WHERE x ~ '\S' ORDER BY n LIMIT 1) END,
              '\s+', ' ', 'g')), '') AS line) l
$$;

-- Every job pgqueue knows, live or dead, in one shape: what q.job() and operators read.
CREATE OR REPLACE VIEW pgqueue.jobs AS
SELECT id, stream, kind, state, payload, priority, attempts, max_attempts, not_before,
       enqueued_at, dedup_key, last_error, state_reason, state_detail, lease_id, worker_node,
       worker_instance, lease_expires_at, NULL::timestamptz AS died_at, last_completed_step, cursor_step, cursor,
       checkpoint_updated_at, schema_version, step_set_hash, crashes_by_step, concurrency_key,
       cancel_requested_at, coalesce(error_summary, pgqueue.error_summary(last_error)) AS error_summary,
       timeout_ms
FROM pgqueue.job
UNION ALL
SELECT id, stream, kind, 'dead', payload, priority, attempts, max_attempts, NULL, enqueued_at,
       dedup_key, last_error, NULL, NULL, NULL, NULL, NULL, NULL, died_at, last_completed_step,
       cursor_step, cursor, checkpoint_updated_at, schema_version, step_set_hash, crashes_by_step,
       concurrency_key, NULL, coalesce(error_summary, pgqueue.error_summary(last_error)), timeout_ms
FROM pgqueue.dead_letter;

CREATE OR REPLACE FUNCTION pgqueue.to_ms(ts timestamptz) RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT (extract(epoch FROM ts) * 1000)::bigint $$;

CREATE OR REPLACE FUNCTION pgqueue.from_ms(ms bigint) RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT 'epoch'::timestamptz + ms * interval '1 millisecond' $$;

-- The time pinned with SET pgqueue.now = '...' (tests, and a pass run for a given time), or
-- NULL. Only the schema owner's sessions (or a superuser's) may pin it: the transitions run
-- with the owner's rights, and a role that moved their clock could reclaim others' leases
-- early or step past a rate window.
CREATE OR REPLACE FUNCTION pgqueue.pinned_now() RETURNS timestamptz
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_pinned text := nullif(current_setting('pgqueue.now', true), '');
BEGIN
    IF v_pinned IS NULL THEN
        RETURN NULL;
    END IF;
    IF NOT pg_has_role(session_user, (SELECT n.nspowner FROM pg_namespace n
                                      WHERE n.nspname = 'pgqueue'), 'USAGE') THEN
        RAISE EXCEPTION 'pgqueue.now is set to %: only the pgqueue schema''s owner may pin the clock',
            quote_literal(left(v_pinned, 40)) USING ERRCODE = '42501';
    END IF;
    RETURN v_pinned::timestamptz;
END
$$;

-- The transaction's time (or the pinned one), truncated to ms.
CREATE OR REPLACE FUNCTION pgqueue.now_ms() RETURNS timestamptz
LANGUAGE sql STABLE
AS $$
    SELECT date_trunc('milliseconds', coalesce(pgqueue.pinned_now(), now()))
$$;

CREATE OR REPLACE FUNCTION pgqueue.b64(b bytea) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT translate(encode(b, 'base64'), E'\n', '') $$;

CREATE OR REPLACE FUNCTION pgqueue.unb64(t text) RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT decode(t, 'base64') $$;

CREATE OR REPLACE FUNCTION pgqueue.check_stream(p_stream text) RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF p_stream IS NULL OR length(p_stream) = 0 OR length(p_stream) > 200 THEN
        RAISE EXCEPTION 'stream name must be 1 to 200 characters, got %', quote_nullable(left(p_stream, 40))
            USING ERRCODE = '22023';
    END IF;
END
$$;

-- A kind or a concurrency key as every way in takes it (a job's, a schedule's, a kind's
-- settings): 1 to 200 characters, or null. A longer one would be refused by an index only
-- later: a scheduled job's kind enters the ready index when it comes due, and every lease of
-- its stream would fail there.
CREATE OR REPLACE FUNCTION pgqueue.check_name(p_value text, p_what text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF length(p_value) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION '% must be 1 to 200 characters (or null), got %', p_what, length(p_value)
            USING ERRCODE = '22023';
    END IF;
END
$$;

-- The most payload bytes a job of the stream may carry (stream_config.max_payload_bytes, 16 MiB
-- by default), which enqueue and upcast keep.
CREATE OR REPLACE FUNCTION pgqueue.payload_limit(p_stream text) RETURNS bigint
LANGUAGE sql STABLE
AS $$ SELECT coalesce((SELECT c.max_payload_bytes FROM pgqueue.stream_config c
                       WHERE c.stream = p_stream), 16777216) $$;

-- Queue writes happen on the leader only; a replica names its leader in the refusal.
CREATE OR REPLACE FUNCTION pgqueue.require_leader() RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_role text;
    v_leader text;
BEGIN
    -- Reading the node row holds the table's ACCESS SHARE lock to the end of the transaction:
    -- a demotion (pgqueue.set_role) locks the table ACCESS EXCLUSIVE, so it waits for the
    -- transitions that already passed this check, and later ones see the new role. (Not an
    -- advisory lock: any role may take one, and a reader holding it exclusively would stop
    -- every transition; locking the table that way needs a privilege no pgqueue role has.)
    SELECT role, leader INTO v_role, v_leader FROM pgqueue.node;
    IF v_role IS DISTINCT FROM 'leader' THEN
        RAISE EXCEPTION 'this database is a replica (its leader: %); queue writes go to the leader',
            coalesce(v_leader, 'unknown') USING ERRCODE = 'PQ401', DETAIL = coalesce(v_leader, '');
    END IF;
END
$$;

-- The checkpoint as it travels in ops (cursor in base64), from its columns: what a statement
-- passes that has the columns but not a job row (on Citus a CTE's row reaches a function as
-- an anonymous record).
CREATE OR REPLACE FUNCTION pgqueue.checkpoint_json_of(p_last_completed_step text,
    p_cursor_step text, p_cursor bytea, p_updated_at timestamptz, p_schema_version int,
    p_step_set_hash text, p_crashes_by_step jsonb) RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT jsonb_build_object(
        'last_completed_step', p_last_completed_step,
        'cursor_step', p_cursor_step,
        'cursor', pgqueue.b64(p_cursor),
        'updated_at_ms', pgqueue.to_ms(p_updated_at),
        'schema_version', p_schema_version,
        'step_set_hash', p_step_set_hash,
        'crashes_by_step', p_crashes_by_step)
$$;

-- The checkpoint of a job row as it travels in ops.
CREATE OR REPLACE FUNCTION pgqueue.checkpoint_json(j pgqueue.job) RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT pgqueue.checkpoint_json_of(j.last_completed_step, j.cursor_step, j.cursor,
                                      j.checkpoint_updated_at, j.schema_version,
                                      j.step_set_hash, j.crashes_by_step)
$$;

-- The body every failure-like op (Nack, Reclaim) carries: the job's resulting values.
CREATE OR REPLACE FUNCTION pgqueue.outcome_json(j pgqueue.job, p_state text, p_at timestamptz) RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT jsonb_build_object(
        'job_id', j.id,
        'state', p_state,
        'attempts', j.attempts,
        'max_attempts', j.max_attempts,
        'not_before_ms', pgqueue.to_ms(j.not_before),
        'last_error', j.last_error,
        'error_summary', j.error_summary,
        'state_reason', j.state_reason,
        'state_detail', j.state_detail,
        'crashes_by_step', j.crashes_by_step,
        'unstarted_reclaims', j.unstarted_reclaims,
        'at_ms', pgqueue.to_ms(p_at))
$$;

-- The job's resulting state as generic ops carry it.
CREATE OR REPLACE FUNCTION pgqueue.job_state_json(j pgqueue.job) RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT jsonb_build_object(
        'job_id', j.id, 'state', j.state, 'attempts', j.attempts, 'max_attempts', j.max_attempts,
        'not_before_ms', pgqueue.to_ms(j.not_before), 'last_error', j.last_error,
        'error_summary', j.error_summary, 'state_reason', j.state_reason, 'state_detail', j.state_detail,
        'checkpoint', pgqueue.checkpoint_json(j))
$$;

-- Backoff after the n-th failure: about base * 2^n with +-25% jitter, capped.
CREATE OR REPLACE FUNCTION pgqueue.backoff_ms(p_stream text, p_attempts int) RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
    SELECT least(c.cap, (c.base * power(2, least(p_attempts, 40)) * (0.75 + random() * 0.5)))::bigint
    FROM (SELECT coalesce(sc.retry_base_ms, 1000) AS base, coalesce(sc.retry_cap_ms, 3600000) AS cap
          FROM (SELECT 1) one
          LEFT JOIN pgqueue.stream_config sc ON sc.stream = p_stream) c
$$;

-- Move a job row to dead_letter (leader and apply share this).
CREATE OR REPLACE FUNCTION pgqueue.bury(p_stream text, p_job_id bigint, p_attempts int, p_error text,
                             p_died_at timestamptz, p_crashes jsonb, p_summary text) RETURNS void
LANGUAGE sql VOLATILE
AS $$
    WITH gone AS (DELETE FROM pgqueue.job WHERE stream = p_stream AND id = p_job_id RETURNING *)
    INSERT INTO pgqueue.dead_letter (id, stream, kind, payload, priority, enqueued_at, dedup_key,
        attempts, max_attempts, last_error, died_at, last_completed_step, cursor_step, cursor,
        checkpoint_updated_at, schema_version, step_set_hash, crashes_by_step, max_attempts_given,
        concurrency_key, error_summary, timeout_ms)
    SELECT id, stream, kind, payload, priority, enqueued_at, dedup_key,
        p_attempts, max_attempts, p_error, p_died_at, last_completed_step, cursor_step, cursor,
        checkpoint_updated_at, schema_version, step_set_hash, p_crashes, max_attempts_given,
        concurrency_key, p_summary, timeout_ms
    FROM gone
$$;

CREATE OR REPLACE FUNCTION pgqueue.save_job(j pgqueue.job, p_op text, p_lease_id bigint, p_extra jsonb DEFAULT '{}')
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF j.state <> 'leased' THEN
        j.lease_id := NULL; j.worker_node := NULL; j.worker_instance := NULL;
        j.lease_expires_at := NULL;
    END IF;
    UPDATE pgqueue.job
    SET payload = j.payload, state = j.state, attempts = j.attempts,
        max_attempts = j.max_attempts, not_before = j.not_before, last_error = j.last_error,
        error_summary = j.error_summary, state_reason = j.state_reason, state_detail = j.state_detail, lease_id = j.lease_id,
        worker_node = j.worker_node, worker_instance = j.worker_instance,
        lease_expires_at = j.lease_expires_at, last_completed_step = j.last_completed_step,
        cursor_step = j.cursor_step, cursor = j.cursor,
        checkpoint_updated_at = j.checkpoint_updated_at, schema_version = j.schema_version,
        step_set_hash = j.step_set_hash, crashes_by_step = j.crashes_by_step
    WHERE stream = j.stream AND id = j.id;
    INSERT INTO pgqueue.op_log (stream, op, job_id, lease_id, body)
    VALUES (j.stream, p_op, j.id, p_lease_id, pgqueue.job_state_json(j) || p_extra);
END
$$;

-- The apply side of save_job: set every field the body carries.
CREATE OR REPLACE FUNCTION pgqueue.apply_job_state(p_stream text, p_job_id bigint, b jsonb) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
BEGIN
    UPDATE pgqueue.job
    SET payload = CASE WHEN b ? 'payload' THEN pgqueue.unb64(b ->> 'payload') ELSE payload END,
        state = b ->> 'state', attempts = (b ->> 'attempts')::int,
        max_attempts = (b ->> 'max_attempts')::int,
        not_before = pgqueue.from_ms((b ->> 'not_before_ms')::bigint),
        last_error = b ->> 'last_error',
        error_summary = CASE WHEN b ? 'error_summary' THEN b ->> 'error_summary' ELSE error_summary END,
        state_reason = b ->> 'state_reason',
        state_detail = nullif(b -> 'state_detail', 'null'::jsonb),
        lease_id = CASE WHEN b ->> 'state' = 'leased' THEN lease_id END,
        worker_node = CASE WHEN b ->> 'state' = 'leased' THEN worker_node END,
        worker_instance = CASE WHEN b ->> 'state' = 'leased' THEN worker_instance END,
        lease_expires_at = CASE WHEN b ->> 'state' = 'leased' THEN lease_expires_at END,
        last_completed_step = b #>> '{checkpoint,last_completed_step}',
        cursor_step = b #>> '{checkpoint,cursor_step}',
        cursor = pgqueue.unb64(b #>> '{checkpoint,cursor}'),
        checkpoint_updated_at = pgqueue.from_ms((b #>> '{checkpoint,updated_at_ms}')::bigint),
        schema_version = (b #>> '{checkpoint,schema_version}')::int,
        step_set_hash = b #>> '{checkpoint,step_set_hash}',
        crashes_by_step = b #> '{checkpoint,crashes_by_step}'
    WHERE stream = p_stream AND id = p_job_id;
END
$$;

-- A leased job whose cancel was requested (pgqueue.cancel) ends as cancelled: deleted, its op
-- Cancel (was leased, by whom, and the error when a failure ended it). Every end of such a
-- lease but an ack comes here (the handler stopping, a nack, a reclaim, a give-back,
-- parking), so a cancelled job never runs again.
CREATE OR REPLACE FUNCTION pgqueue.finish_cancel(j pgqueue.job, p_by text, p_error text DEFAULT NULL,
                                                 p_summary text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    -- a variable, not j.stream in the statements: Citus runs a call delegated to a stream's
    -- node only with statements that name the stream as a value it can compare
    v_stream text := j.stream;
BEGIN
    DELETE FROM pgqueue.job WHERE stream = v_stream AND id = j.id;
    INSERT INTO pgqueue.op_log (stream, op, job_id, lease_id, body)
    VALUES (v_stream, 'Cancel', j.id, j.lease_id, jsonb_strip_nulls(jsonb_build_object(
        'job_id', j.id, 'was', 'leased', 'by', p_by,
        'requested_at_ms', pgqueue.to_ms(j.cancel_requested_at), 'error', p_error,
        'error_summary', p_summary)));
END
$$;

-- Whether a unique violation's constraint is the live jobs' dedup key index: job_dedup_idx,
-- or on a Citus node one of its shards' (job_dedup_idx_102010).
CREATE OR REPLACE FUNCTION pgqueue.is_dedup_index(p_name text) RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$ SELECT coalesce(p_name = 'job_dedup_idx' OR p_name ~ '^job_dedup_idx_[0-9]+$', false) $$;

-- The default of a transition's stream argument, p_stream: NULL, each job's own stream, looked
-- up. On a Citus cluster a call must name its stream instead, and one that does not is
-- refused, saying so: only a call naming the stream runs on the node holding it, where the
-- stream's ids and op seqs come from; run on the coordinator, its op would take the
-- coordinator's seq, out of order among the stream's ops. A VOLATILE function rather than a
-- NULL literal: Citus (14.0.1) plans a call of a function distributed on p_stream by hashing
-- the argument's constant, and a NULL constant crashes the coordinator's backend; a volatile
-- default is never a constant. (A NULL passed explicitly still crashes it: the client never
-- passes one.)
CREATE OR REPLACE FUNCTION pgqueue.each_stream() RETURNS text
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM pgqueue.layout WHERE name = 'citus') THEN
        RAISE EXCEPTION 'on a Citus cluster a call about jobs names their stream: pass it as p_stream'
            USING ERRCODE = '22023',
                  HINT = 'e.g. SELECT * FROM pgqueue.release(42, p_stream => ''billing''); the stream of job 42 is SELECT pgqueue.stream_of(42)';
    END IF;
    RETURN NULL;
END
$$;

-- " in stream S" when a caller named the stream S a job was looked for in (else ''): what a
-- not-found error adds, since on Citus a call given the wrong stream finds nothing.
CREATE OR REPLACE FUNCTION pgqueue.in_stream(p_stream text) RETURNS text
LANGUAGE sql IMMUTABLE
AS $$ SELECT CASE WHEN p_stream <> '' THEN ' in stream ' || p_stream ELSE '' END $$;

-- The stream of a live job, or of a dead letter (NULL: none): for a caller that named only
-- the job, which then locks it by stream and id (on Citus, on one node). On Citus this asks
-- every node; a worker names the stream its lease came from instead.
CREATE OR REPLACE FUNCTION pgqueue.stream_of(p_job_id bigint) RETURNS text
LANGUAGE sql STABLE
AS $$ SELECT stream FROM pgqueue.job WHERE id = p_job_id $$;

CREATE OR REPLACE FUNCTION pgqueue.dead_stream_of(p_job_id bigint) RETURNS text
LANGUAGE sql STABLE
AS $$ SELECT stream FROM pgqueue.dead_letter WHERE id = p_job_id $$;

-- Load a leased job under lock, fenced by its lease id (NULL when the lease is not current).
-- p_stream NULL: the job's own (pgqueue.stream_of).
CREATE OR REPLACE FUNCTION pgqueue.leased_job(p_job_id bigint, p_lease_id bigint,
                                              p_stream text DEFAULT NULL) RETURNS pgqueue.job
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    j pgqueue.job;
    v_stream text := coalesce(p_stream, pgqueue.stream_of(p_job_id));
BEGIN
    PERFORM pgqueue.require_leader();
    SELECT * INTO j FROM pgqueue.job
    WHERE stream = v_stream AND id = p_job_id AND lease_id = p_lease_id
      AND state = 'leased' COLLATE "POSIX"
    FOR UPDATE;
    RETURN j;
END
$$;

-- Load a job for an operator, under lock; PQ404 when it is not a live job, PQ422 when leased
-- or not in one of p_states. p_stream: the job's stream, as the client found it (on Citus the
-- verb then runs on the stream's node, and every statement there names it); NULL: looked up.
CREATE OR REPLACE FUNCTION pgqueue.operator_job(p_job_id bigint, p_action text, p_states text[],
                                                p_stream text DEFAULT NULL) RETURNS pgqueue.job
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    j pgqueue.job;
    v_stream text := coalesce(p_stream, pgqueue.stream_of(p_job_id));
BEGIN
    PERFORM pgqueue.require_leader();
    -- found by id, then locked by stream and id (on Citus a lock is taken on one node only)
    SELECT * INTO j FROM pgqueue.job WHERE stream = v_stream AND id = p_job_id FOR UPDATE;
    IF NOT FOUND THEN
        v_stream := coalesce(p_stream, pgqueue.dead_stream_of(p_job_id));
        IF EXISTS (SELECT 1 FROM pgqueue.dead_letter WHERE stream = v_stream AND id = p_job_id) THEN
            RAISE EXCEPTION 'cannot % job %: it is a dead letter (requeue it first)', p_action, p_job_id
                USING ERRCODE = 'PQ422';
        END IF;
        -- (the stream named when the caller gave one: on Citus a wrong one finds nothing)
        RAISE EXCEPTION 'no live job %', p_job_id || pgqueue.in_stream(p_stream)
            USING ERRCODE = 'PQ404';
    END IF;
    IF NOT j.state = ANY (p_states) THEN
        -- p_action completes "cannot ... job N"; the verb is named as the CLI names it
        RAISE EXCEPTION 'cannot % job %: it is %, and % applies only to % jobs', p_action, p_job_id,
            j.state, CASE p_action WHEN 'skip a step of' THEN 'skip-step'
                                   WHEN 'accept the step set of' THEN 'accept-step-set'
                                   ELSE p_action END,
            array_to_string(p_states, ' or ') USING ERRCODE = 'PQ422';
    END IF;
    RETURN j;
END
$$;

-- The live job (pending, scheduled or leased) that holds a dedup key in a stream, other than
-- p_id; NULL when none is visible to the statement that asks.
CREATE OR REPLACE FUNCTION pgqueue.dedup_holder(p_stream text, p_key bytea, p_id bigint) RETURNS bigint
LANGUAGE sql STABLE
AS $$
    SELECT id FROM pgqueue.job
    WHERE stream = p_stream AND dedup_key = p_key AND id <> p_id
      AND state IN ('pending', 'scheduled', 'leased')
    LIMIT 1
$$;

-- Refuse an operator's move to pending because a live job holds the key: PQ409, with the
-- holder in DETAIL (holder=ID) when it is known, which queries.translate turns into
-- DedupConflict.holder. p_doing completes "cannot ...".
CREATE OR REPLACE FUNCTION pgqueue.refuse_dedup(p_doing text, p_holder bigint) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF p_holder IS NULL THEN
        RAISE EXCEPTION 'cannot %: a live job holds its dedup key', p_doing
            USING ERRCODE = 'PQ409';
    END IF;
    RAISE EXCEPTION 'cannot %: live job % holds its dedup key', p_doing, p_holder
        USING ERRCODE = 'PQ409', DETAIL = format('holder=%s', p_holder);
END
$$;

-- A parked or rewound job goes back to pending: refuse when a live job holds its dedup key.
-- This sees committed holders only; save_as_pending catches the one an open transaction adds.
CREATE OR REPLACE FUNCTION pgqueue.check_dedup_free(j pgqueue.job) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_holder bigint;
BEGIN
    IF j.dedup_key IS NULL OR j.state IN ('pending', 'scheduled', 'leased') THEN
        RETURN;
    END IF;
    v_holder := pgqueue.dedup_holder(j.stream, j.dedup_key, j.id);
    IF v_holder IS NOT NULL THEN
        PERFORM pgqueue.refuse_dedup(format('return job %s to pending', j.id), v_holder);
    END IF;
END
$$;

-- An operator's change sends the job back to pending at once: refuse when a live job took
-- its dedup key meanwhile, clear the parking reason, save, and log the op. A holder enqueued
-- by a transaction still open at the check makes the UPDATE wait for it; when that commits,
-- the dedup index refuses the UPDATE, and that is reported like a committed holder (PQ409
-- naming it), never as a raw unique violation.
CREATE OR REPLACE FUNCTION pgqueue.save_as_pending(j pgqueue.job, p_op text, p_checkpoint_changed boolean,
                                        p_extra jsonb DEFAULT '{}') RETURNS pgqueue.job
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_index text;
BEGIN
    PERFORM pgqueue.check_dedup_free(j);
    IF p_checkpoint_changed THEN
        j.checkpoint_updated_at := pgqueue.now_ms();
    END IF;
    j.state := 'pending';
    j.not_before := pgqueue.now_ms();
    j.state_reason := NULL;
    j.state_detail := NULL;
    BEGIN
        PERFORM pgqueue.save_job(j, p_op, NULL, p_extra);
    EXCEPTION WHEN unique_violation THEN
        GET STACKED DIAGNOSTICS v_index = CONSTRAINT_NAME;
        IF NOT pgqueue.is_dedup_index(v_index) THEN
            RAISE;
        END IF;
        -- a new statement, a new snapshot: the holder that just committed is visible
        PERFORM pgqueue.refuse_dedup(format('return job %s to pending', j.id),
                                     pgqueue.dedup_holder(j.stream, j.dedup_key, j.id));
    END;
    RETURN j;
END
$$;
