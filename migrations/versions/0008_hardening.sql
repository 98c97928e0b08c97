-- pgqueue 0008: the tables' delta (state only).

-- The maintenance runners' election: a claim row no login but a worker's transition may write
-- or lock (pgqueue/sql/maintain.sql), instead of an advisory lock any login could hold.
CREATE TABLE pgqueue.maintenance_runner (
    only_one boolean PRIMARY KEY DEFAULT true CHECK (only_one),
    holder   uuid NOT NULL,         -- the runner (one per Maintainer)
    pid      int NOT NULL,          -- its session's backend
    until    timestamptz NOT NULL   -- the claim lapses then unless renewed
);
