-- Undo 0009: 0008's code defines pgqueue.enqueue_one without the defaults 0009 gave it, and
-- CREATE OR REPLACE may add a parameter default but never remove one: the function goes, and
-- the code reload that follows makes it again as 0008 had it (and grants it again).
DROP FUNCTION pgqueue.enqueue_one(text, bytea, text, int, bigint, timestamptz, bytea, int, int,
                                  uuid, boolean, jsonb, text);
