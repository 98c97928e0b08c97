-- pgqueue 0012, before the upgrade's transaction: each statement below commits on its own while
-- the queue runs (pgqueue_migrations.revision.Revision.before). It proves that every op the
-- old log holds belongs to one partition of 0012's ring, so that 0012 attaches the log as that
-- partition without reading it under its lock: a CHECK constraint added NOT VALID (a moment's
-- lock, waited for at most 10 s) and then validated under a lock that lets writers go on. It
-- changes nothing else, and 0012 drops the constraint again; where the proof cannot hold
-- (the ops span two partitions; the next seq is past them) or is not needed (an empty log),
-- nothing is done and 0012 decides under its lock. Run twice, it does nothing the second time.
SET lock_timeout = '10s'
-- next transaction
DO $$
DECLARE
    lo bigint;
    hi bigint;
    v_next bigint;
    v_seq regclass;
BEGIN
    IF (SELECT c.relkind FROM pg_class c WHERE c.oid = to_regclass('pgqueue.op_log'))
       IS DISTINCT FROM 'r' THEN
        RETURN;  -- no log yet (an older revision comes first), or already on the ring
    END IF;
    v_seq := to_regclass(pg_get_serial_sequence('pgqueue.op_log', 'seq'));
    IF v_seq IS NULL
       OR EXISTS (SELECT 1 FROM pg_constraint
                  WHERE conrelid = 'pgqueue.op_log'::regclass AND conname = 'op_log_ring_slot') THEN
        RETURN;
    END IF;
    SELECT min(seq) >> 32, max(seq) >> 32 INTO lo, hi FROM pgqueue.op_log;
    EXECUTE format('SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM %s',
                   v_seq) INTO v_next;
    IF lo IS NULL OR lo <> hi OR v_next >> 32 <> hi THEN
        RETURN;
    END IF;
    EXECUTE format('ALTER TABLE pgqueue.op_log ADD CONSTRAINT op_log_ring_slot CHECK ((((seq >> 32) %% 32::bigint) IS NOT NULL) AND (((seq >> 32) %% 32::bigint) = %s::bigint)) NOT VALID',
                   hi % 32);
END
$$
-- next transaction
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_constraint
               WHERE conrelid = to_regclass('pgqueue.op_log') AND conname = 'op_log_ring_slot'
                 AND NOT convalidated) THEN
        ALTER TABLE pgqueue.op_log VALIDATE CONSTRAINT op_log_ring_slot;
    END IF;
END
$$
-- next transaction
RESET lock_timeout
