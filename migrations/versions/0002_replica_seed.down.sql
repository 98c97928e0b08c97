-- Undo 0002's tables (its code is replaced by 0001's after this file).
ALTER TABLE pgqueue.node DROP COLUMN seed_snapshot, DROP COLUMN seeded_through;
