-- Undo 0010: the view and pgqueue.lease read the new columns and change shape; they go and
-- 0009's code makes them again. The summaries and time limits are dropped (the tracebacks
-- stay in last_error).
DROP VIEW pgqueue.jobs;
DROP FUNCTION pgqueue.lease(text, int, bigint, int, int, uuid, boolean, int);
ALTER TABLE pgqueue.job DROP COLUMN error_summary, DROP COLUMN timeout_ms;
ALTER TABLE pgqueue.dead_letter DROP COLUMN error_summary, DROP COLUMN timeout_ms;

-- The operator verbs on one job return a few readable columns instead of the whole job row
-- (0010): 0009's code makes them again returning pgqueue.job.
DROP FUNCTION pgqueue.release(bigint, boolean);
DROP FUNCTION pgqueue.rewind(bigint, text);
DROP FUNCTION pgqueue.restart(bigint);
DROP FUNCTION pgqueue.skip_step(bigint);
DROP FUNCTION pgqueue.accept_step_set(bigint);
