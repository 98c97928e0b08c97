-- pgqueue 0010: the tables' delta (state only).
--
-- A failure is kept as a one-line summary beside its traceback (last_error), on the job and
-- dead-letter rows (and in Nack, Reclaim and Cancel op bodies); rows from before have none,
-- and readers take it from last_error (pgqueue.error_summary). A job may carry its own time
-- limit, set at enqueue (in the Enqueue op's body when set). Both columns are NULL by default:
-- adding them rewrites nothing.
--
-- Upgrade logical replicas before their leader: a subscriber must have every published column.

ALTER TABLE pgqueue.job
    ADD COLUMN error_summary text,
    ADD COLUMN timeout_ms    int CHECK (timeout_ms > 0);
ALTER TABLE pgqueue.dead_letter
    ADD COLUMN error_summary text,
    ADD COLUMN timeout_ms    int;

-- pgqueue.lease returns the job's time limit too: a function's result columns cannot change
-- in place, so it goes and the code reload makes it again (in this transaction: no caller
-- sees it missing).
DROP FUNCTION pgqueue.lease(text, int, bigint, int, int, uuid, boolean, int);

-- The operator verbs on one job return a few readable columns instead of the whole job row
-- (pgqueue.job_change): their result type changes, so they go and the code makes them again.
DROP FUNCTION pgqueue.release(bigint, boolean);
DROP FUNCTION pgqueue.rewind(bigint, text);
DROP FUNCTION pgqueue.restart(bigint);
DROP FUNCTION pgqueue.skip_step(bigint);
DROP FUNCTION pgqueue.accept_step_set(bigint);
