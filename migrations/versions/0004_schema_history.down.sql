-- Undo 0004.
DROP TABLE pgqueue.schema_history;
