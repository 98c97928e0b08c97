-- Undo 0017's tables (0016's code makes its functions again).
ALTER TABLE pgqueue.lease_expiry DROP COLUMN stream;
DROP TABLE pgqueue.layout;
