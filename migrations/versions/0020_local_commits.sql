-- pgqueue 0020: the tables' delta (state only).
-- The kinds each worker handles, with its handlers' settings (the dashboard's Kinds page).
ALTER TABLE pgqueue.worker ADD COLUMN kinds jsonb;
