-- Undo 0019's tables: op_log_ring keyed by slot alone again (one server's rows; on Citus,
-- undo the layout's distribution of the table first). 0018's code makes its functions again.
DELETE FROM pgqueue.op_log_ring WHERE stream <> '';
ALTER TABLE pgqueue.op_log_ring DROP CONSTRAINT op_log_ring_pkey;
ALTER TABLE pgqueue.op_log_ring ADD PRIMARY KEY (slot);
ALTER TABLE pgqueue.op_log_ring DROP COLUMN stream;
