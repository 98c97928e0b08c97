-- pgqueue 0001: the queue core's tables (state). Its functions and views are the generated
-- versions/code/0001.sql, loaded after this file by migrations/revision.py.
--
-- Tables: job (live jobs and their leases and checkpoints), dead_letter, stream_config, op_log.
-- Every transition is a function in this schema that changes state AND appends its op to
-- op_log in the same transaction, so psql users get the same guarantees as the library.
--
-- Timestamps written by pgqueue are truncated to milliseconds so that the op log, which carries
-- them as epoch milliseconds, replays them exactly.

CREATE SCHEMA IF NOT EXISTS pgqueue;

-- Job ids are unique across streams; lease ids are unique forever (fencing tokens).
CREATE SEQUENCE pgqueue.job_id_seq;
CREATE SEQUENCE pgqueue.lease_id_seq;

-- ---------------------------------------------------------------------------------------------
-- Tables
-- ---------------------------------------------------------------------------------------------

-- Per-stream settings; a stream without a row uses the defaults below.
CREATE TABLE pgqueue.stream_config (
    stream            text PRIMARY KEY,
    retry_base_ms     bigint NOT NULL DEFAULT 1000 CHECK (retry_base_ms >= 0),
    retry_cap_ms      bigint NOT NULL DEFAULT 3600000 CHECK (retry_cap_ms >= 0),
    quarantine_after  int    NOT NULL DEFAULT 3 CHECK (quarantine_after >= 1)
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
    crashes_by_step       jsonb NOT NULL DEFAULT '{}'
) WITH (fillfactor = 70);  -- room on each page so renewals stay HOT updates

-- Lease order: priority DESC then id, within a stream. Nothing a renewal writes is indexed.
CREATE INDEX job_pending_idx ON pgqueue.job (stream, priority DESC, id) WHERE state = 'pending';
CREATE INDEX job_scheduled_idx ON pgqueue.job (stream, not_before, id) WHERE state = 'scheduled';
-- Reclaim scans leased jobs only; keyed on id (never on the expiry, which renewals change).
CREATE INDEX job_leased_idx ON pgqueue.job (id) WHERE state = 'leased';
-- Operators list parked jobs; small.
CREATE INDEX job_parked_idx ON pgqueue.job (stream, state, id)
    WHERE state IN ('quarantined', 'undecodable');
-- At most one live job per (stream, dedup_key): enforced here, never by read-then-write.
CREATE UNIQUE INDEX job_dedup_idx ON pgqueue.job (stream, dedup_key)
    WHERE dedup_key IS NOT NULL AND state IN ('pending', 'scheduled', 'leased');

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
    crashes_by_step       jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX dead_letter_stream_idx ON pgqueue.dead_letter (stream, id);

-- The ordered step list behind each step-set hash, so a resumed job's recorded steps can be
-- compared with the code's (hash of ordered step names and versions, never of source).
CREATE TABLE pgqueue.step_set (
    hash       text PRIMARY KEY,
    kind       text NOT NULL,
    steps      jsonb NOT NULL,  -- [{"name": ..., "version": ...}, ...] in order
    created_at timestamptz NOT NULL
);

-- Per-kind overrides of the stream's crash quarantine threshold (set when a worker registers
-- a handler with quarantine_after=N, or by the CLI); reclaim runs without handler code.
CREATE TABLE pgqueue.kind_config (
    stream           text NOT NULL,
    kind             text NOT NULL,
    quarantine_after int NOT NULL CHECK (quarantine_after >= 1),
    PRIMARY KEY (stream, kind)
);

-- Registered worker processes (liveness only, local to this database; not replicated).
CREATE TABLE pgqueue.worker (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    node         int NOT NULL,
    host         text NOT NULL,
    pid          int NOT NULL,
    streams      text[] NOT NULL,
    concurrency  int NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now()
);

-- Cron schedules. next_run_at is the next fire time (UTC); cron is evaluated in Python with
-- croniter on wall-clock time in `timezone`. A tick's enqueue and the advance of next_run_at
-- commit together, which is what makes a tick fire exactly once.
CREATE TABLE pgqueue.schedule (
    stream           text NOT NULL,
    name             text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    cron             text NOT NULL,
    timezone         text NOT NULL,
    payload          bytea NOT NULL,
    kind             text,
    priority         smallint NOT NULL CHECK (priority BETWEEN 0 AND 255),
    max_attempts     int NOT NULL CHECK (max_attempts >= 0),
    catch_up         text NOT NULL CHECK (catch_up IN ('none', 'one', 'all')),
    misfire_grace_ms bigint NOT NULL CHECK (misfire_grace_ms >= 0),
    paused           boolean NOT NULL DEFAULT false,
    next_run_at      timestamptz NOT NULL,
    last_fired_at    timestamptz,
    updated_at       timestamptz NOT NULL,
    PRIMARY KEY (stream, name)
);
CREATE INDEX schedule_due_idx ON pgqueue.schedule (next_run_at) WHERE NOT paused;

-- The append-only op log: one op per job per transition, written in the transition's
-- transaction. seq is assigned at insert (not commit); xid lets a reader take only rows whose
-- transaction is below the snapshot's xmin. Replicas and replays insert rows with the leader's
-- seq, xid and at, so the log itself is identical everywhere.
CREATE TABLE pgqueue.op_log (
    seq      bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    stream   text NOT NULL,
    op       text NOT NULL,
    job_id   bigint,
    lease_id bigint,
    body     jsonb NOT NULL,
    xid      xid8 NOT NULL DEFAULT pg_current_xact_id(),
    at       timestamptz NOT NULL DEFAULT now(),
    -- WAL insert position, to tell which ops a logical replica's slot has confirmed
    lsn      pg_lsn NOT NULL DEFAULT pg_current_wal_insert_lsn()
);
CREATE INDEX op_log_job_idx ON pgqueue.op_log (job_id);
CREATE INDEX op_log_lsn_idx ON pgqueue.op_log USING brin (lsn);
CREATE INDEX op_log_at_idx ON pgqueue.op_log USING brin (at);

-- This database's role. A replica refuses queue writes (pgqueue.require_leader) but applies
-- its leader's ops. Local to each database: never in the op log.
CREATE TABLE pgqueue.node (
    id         boolean PRIMARY KEY DEFAULT true CHECK (id),
    role       text NOT NULL DEFAULT 'leader' CHECK (role IN ('leader', 'replica')),
    epoch      int NOT NULL DEFAULT 1,
    name       text,         -- this database's name as a replica
    leader     text,         -- a replica's leader (DSN without password)
    pruned_through bigint NOT NULL DEFAULT 0,  -- the highest op seq ever pruned here
    changed_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO pgqueue.node DEFAULT VALUES;

-- The leader's registry of replicas (local; never in the op log).
CREATE TABLE pgqueue.replica (
    name          text PRIMARY KEY,
    method        text NOT NULL CHECK (method IN ('logical', 'follow')),
    slot_name     text,                      -- logical: the subscription's slot here
    dsn           text,                      -- the replica's DSN without password
    attached_at   timestamptz NOT NULL DEFAULT now(),
    confirmed_seq bigint NOT NULL DEFAULT 0, -- follow: every op at or below is applied there
    seen_at       timestamptz NOT NULL DEFAULT now()
);

-- A follower's progress, kept in the replica in the same transaction as the ops it applied:
-- every op at or below low_seq is applied (or will never commit); mark_seq/mark_xmax are the
-- op-log sequence and the next xid seen at the previous poll (see pgqueue/replica.py).
CREATE TABLE pgqueue.follow_state (
    name       text PRIMARY KEY,
    low_seq    bigint NOT NULL DEFAULT 0,
    mark_seq   bigint NOT NULL DEFAULT 0,
    mark_xmax  xid8,
    updated_at timestamptz NOT NULL DEFAULT now()
);
