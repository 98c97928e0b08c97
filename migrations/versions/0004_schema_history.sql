-- pgqueue 0004: a record of the revisions applied, and which code each one can run, so that a
-- release keeps working on a database upgraded to a newer, backward-compatible revision (a
-- rolling upgrade: database first, then workers).
CREATE TABLE pgqueue.schema_history (
    revision        text PRIMARY KEY,
    -- the oldest revision whose code runs on this one: a backward-compatible revision keeps
    -- its predecessor's, any other names itself
    compatible_from text NOT NULL,
    applied_at      timestamptz NOT NULL DEFAULT now()
);
