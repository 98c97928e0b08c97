-- Undo 0020's tables.
ALTER TABLE pgqueue.worker DROP COLUMN kinds;
