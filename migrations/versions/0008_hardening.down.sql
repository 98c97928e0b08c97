-- Undo 0008's tables.
DROP TABLE pgqueue.maintenance_runner;
