-- Undo 0006's tables.

-- 16 least privilege: the roles keep nothing here, and functions are PUBLIC's again, as
-- before 0006 (the roles themselves stay: they are the server's, and other databases may use
-- them).
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA pgqueue FROM pgqueue_reader, pgqueue_producer,
    pgqueue_worker, pgqueue_operator;
REVOKE ALL ON ALL TABLES IN SCHEMA pgqueue FROM pgqueue_reader, pgqueue_producer,
    pgqueue_worker, pgqueue_operator;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA pgqueue FROM pgqueue_reader, pgqueue_producer,
    pgqueue_worker, pgqueue_operator;
REVOKE ALL ON SCHEMA pgqueue FROM pgqueue_reader, pgqueue_producer, pgqueue_worker,
    pgqueue_operator;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA pgqueue TO PUBLIC;
