-- pgqueue 0019: the tables' delta (state only): op_log_ring gains the stream of its key
-- ('' on one server: its rows as they were), which on Citus names a shard group.
--
-- The rings' upkeep takes a stream: pgqueue.fold_job_counts, pgqueue.recycle_ready,
-- pgqueue.recycle_lease_expiry and pgqueue.recycle_op_log take p_stream (by default
-- pgqueue.each_stream(): the whole tables on one server, as before; refused on Citus), and
-- pgqueue.recycle_rings does all four. On Citus the maintenance pass calls recycle_rings once
-- per shard group of the job table, naming a stream hashed to it (citus_shard_keys): the call
-- runs on the group's node and folds and truncates the group's shards (pgqueue.shard_of), a
-- transaction of that node alone; its op log ring is op_log_ring's rows under that stream,
-- distributed with it (the layout, citus.sql, turns the reference table into a distributed
-- one). Before, these read the coordinator's empty tables and never truncated anything there.
ALTER TABLE pgqueue.op_log_ring ADD COLUMN stream text NOT NULL DEFAULT '';
ALTER TABLE pgqueue.op_log_ring DROP CONSTRAINT op_log_ring_pkey;
ALTER TABLE pgqueue.op_log_ring ADD PRIMARY KEY (stream, slot);
