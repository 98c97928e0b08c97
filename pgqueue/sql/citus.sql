-- citus: the distributed layout, for a database with the citus extension (issue 27).
--
-- Not a stage of its own schema: the revisions install the same objects on Citus as on one
-- server, on the coordinator, and then pgqueue.db.schema applies this layout over them
-- (citus_tables and citus_functions, idempotent: after every upgrade). What it changes, and why:
--
-- * The stream is the unit of placement. Every table a transition writes is distributed by
--   stream and colocated with pgqueue.job: a stream's jobs, ready entries, ops, dead letters,
--   lease expiries, counts, rate windows and schedules sit on one node, so a transition
--   (which names its stream in every statement, 0017) is a transaction of that node alone.
--   Their unique keys gain the stream (Citus requires the distribution column in them): job
--   and dead_letter (stream, id), each op_log partition (stream, seq) and (stream, request);
--   job and dead_letter keep an index on id, for the lookups by id alone (operators).
-- * A stream's settings (stream_config, kind_config) are its rows too, distributed with it
--   (0019): the calls that set them run on the stream's node, their ops after its others.
--   The database's settings (step_set, node, op_log_policy, schema_history, layout) are
--   reference tables: a copy on every node, read locally by the transitions there.
-- * Every transition function (the worker's, and the operator's verbs on jobs, 0018) is
--   distributed on its stream argument, colocated with job, and
--   delegated even inside a transaction block (force_delegation): called from the coordinator
--   it runs on the node holding the stream (one round trip, one node's commit), so a stream's
--   ids and ops always come from that node's sequences. An enqueue there does not NOTIFY
--   (pgqueue.notify_ready): a transaction about streams on two nodes is a two-phase commit,
--   which a notifying node cannot prepare.
-- * Ids: job_id_seq, lease_id_seq and op_log_seq_seq exist on every node, each handing out
--   k * 1024 + (the node's group id): unique in the cluster without coordination, increasing
--   on each node. (Citus's own sequences would hand out ranges by group id, group << 48, which
--   cannot be moved past each other when a stream moves.) op_log's seq default names its
--   sequence by text, so that Citus does not take it over as a distributed sequence.
-- * The storage rings are kept per shard group (0019): a maintenance pass calls
--   pgqueue.recycle_rings once per shard of job, naming a stream hashed to it
--   (citus_shard_keys), so each call runs on its group's node and folds and truncates that
--   group's shards there (pgqueue.shard_of); op_log_ring is distributed too, a ring per group.
-- * The count triggers fire on each shard: enabled with citus.enable_unsafe_triggers, which
--   the layout sets for the database (they write only rows of their own stream's node).

-- name: citus_installed
-- Whether this database has the citus extension (then pgqueue installs the distributed layout).
SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') AS installed

-- name: citus_tables
-- The tables of the distributed layout over a freshly installed or upgraded schema (see the
-- top of this file); does nothing to what is already distributed. The count triggers are
-- dropped first (Citus distributes no table that has triggers); pgqueue.db.schema makes them
-- again from their definitions (statements.trigger_statements), then runs citus_functions. Run by the
-- schema's owner on the coordinator.
DO $layout$
DECLARE
    t text;
    c text;
    v_rings boolean;
BEGIN
    -- unsafe triggers: the count triggers (pgqueue.count_jobs) fire on the shards
    EXECUTE format('ALTER DATABASE %I SET citus.enable_unsafe_triggers = on', current_database());
    SET LOCAL citus.enable_unsafe_triggers = on;
    SET LOCAL citus.multi_shard_modify_mode = 'sequential';
    IF NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = 'pgqueue.job'::regclass) THEN
        -- Citus distributes no table that has triggers: dropped, made again after
        DROP TRIGGER job_count_insert ON pgqueue.job;
        DROP TRIGGER job_count_update ON pgqueue.job;
        DROP TRIGGER job_count_delete ON pgqueue.job;
        DROP TRIGGER dead_letter_count_insert ON pgqueue.dead_letter;
        DROP TRIGGER dead_letter_count_delete ON pgqueue.dead_letter;
        ALTER TABLE pgqueue.job DROP CONSTRAINT job_pkey;
        ALTER TABLE pgqueue.job ADD CONSTRAINT job_pkey PRIMARY KEY (stream, id);
        CREATE INDEX job_id_idx ON pgqueue.job (id);
        ALTER TABLE pgqueue.dead_letter DROP CONSTRAINT dead_letter_pkey;
        ALTER TABLE pgqueue.dead_letter ADD CONSTRAINT dead_letter_pkey PRIMARY KEY (stream, id);
        CREATE INDEX dead_letter_id_idx ON pgqueue.dead_letter (id);
        FOR s IN 0..31 LOOP
            EXECUTE format('ALTER TABLE pgqueue.%I DROP CONSTRAINT %I', 'op_log_' || s,
                           'op_log_' || s || '_pkey');
            EXECUTE format('ALTER TABLE pgqueue.%I ADD CONSTRAINT %I PRIMARY KEY (stream, seq)',
                           'op_log_' || s, 'op_log_' || s || '_pkey');
            EXECUTE format('DROP INDEX pgqueue.%I', 'op_log_' || s || '_request_idx');
            EXECUTE format('CREATE UNIQUE INDEX %I ON pgqueue.%I (stream, request) '
                           'WHERE request IS NOT NULL', 'op_log_' || s || '_request_idx',
                           'op_log_' || s);
        END LOOP;
        ALTER SEQUENCE pgqueue.op_log_seq_seq OWNED BY NONE;
        ALTER TABLE pgqueue.op_log ALTER COLUMN seq SET DEFAULT
            CASE WHEN pg_current_xact_id() IS NOT NULL
                 THEN nextval('pgqueue.op_log_seq_seq'::text) END;
        UPDATE pgqueue.layout SET name = 'citus';
        UPDATE pgqueue.lease_expiry SET stream = '' WHERE stream IS NULL;
        ALTER TABLE pgqueue.lease_expiry ALTER COLUMN stream SET NOT NULL;
        PERFORM create_distributed_table('pgqueue.job', 'stream', colocate_with => 'none');
        FOREACH t IN ARRAY ARRAY['ready', 'op_log', 'dead_letter', 'lease_expiry', 'job_count',
                                 'job_count_delta', 'kind_lease', 'schedule'] LOOP
            PERFORM create_distributed_table('pgqueue.' || t, 'stream',
                                             colocate_with => 'pgqueue.job');
        END LOOP;
        FOREACH t IN ARRAY ARRAY['step_set', 'node', 'op_log_policy', 'schema_history',
                                 'layout'] LOOP
            PERFORM create_reference_table('pgqueue.' || t);
        END LOOP;
    END IF;
    -- Kept with their stream, distributed by it and colocated with job (0019; reference tables
    -- before): a stream's settings, which a call on the stream's node then writes there, and
    -- the op log's rings, one per shard group under its key (from 0019 on, whose op_log_ring
    -- has the column; a reference table before).
    v_rings := EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'pgqueue.op_log_ring'::regclass
                       AND attname = 'stream' AND NOT attisdropped);
    IF NOT v_rings AND NOT EXISTS (SELECT 1 FROM pg_dist_partition
                                   WHERE logicalrelid = 'pgqueue.op_log_ring'::regclass) THEN
        PERFORM create_reference_table('pgqueue.op_log_ring');
    END IF;
    FOREACH t IN ARRAY ARRAY['stream_config', 'kind_config']
                       || CASE WHEN v_rings THEN ARRAY['op_log_ring'] ELSE '{}' END LOOP
        IF EXISTS (SELECT 1 FROM pg_dist_partition
                   WHERE logicalrelid = ('pgqueue.' || t)::regclass AND partmethod = 'n') THEN
            PERFORM undistribute_table(('pgqueue.' || t)::regclass);
            -- the table undistribute_table made again names its not-null constraints after a
            -- shard (op_log_ring_3403311354_slot_not_null): named as a fresh install names them
            FOR c IN SELECT conname FROM pg_constraint
                     WHERE conrelid = ('pgqueue.' || t)::regclass
                       AND conname ~ ('^' || t || '_[0-9]+_') LOOP
                EXECUTE format('ALTER TABLE pgqueue.%I RENAME CONSTRAINT %I TO %I', t, c,
                               regexp_replace(c, '^' || t || '_[0-9]+_', t || '_'));
            END LOOP;
        END IF;
        IF NOT EXISTS (SELECT 1 FROM pg_dist_partition
                       WHERE logicalrelid = ('pgqueue.' || t)::regclass) THEN
            IF t = 'op_log_ring' THEN
                DELETE FROM pgqueue.op_log_ring WHERE stream = '';  -- one server's ring
            END IF;
            PERFORM create_distributed_table('pgqueue.' || t, 'stream',
                                             colocate_with => 'pgqueue.job');
        END IF;
    END LOOP;
END
$layout$

-- name: citus_functions
-- Every function on every node, and the transitions distributed on their stream (after
-- citus_tables, and the triggers made again from their definitions: statements.trigger_statements).
DO $functions$
DECLARE
    f record;
    g record;
BEGIN
    -- Every other function on every node too: Citus makes those a function depends on
    -- everywhere, but left out those whose arguments are a table's row type (save_job,
    -- leased_job, ...), made before their table was distributed.
    FOR f IN
        SELECT p.oid::regprocedure AS fn
        FROM pg_proc p
        WHERE p.pronamespace = 'pgqueue'::regnamespace
          AND NOT EXISTS (SELECT 1 FROM pg_dist_object o
                          WHERE o.classid = 'pg_proc'::regclass AND o.objid = p.oid)
    LOOP
        PERFORM create_distributed_function(f.fn);
    END LOOP;
    -- the transition functions, each on its stream argument (again after every upgrade: a
    -- revision's code reload may have made a function anew)
    FOR f IN
        SELECT p.oid::regprocedure AS fn
        FROM pg_proc p
        WHERE p.pronamespace = 'pgqueue'::regnamespace
          AND p.proname IN ('enqueue', 'enqueue_one', 'lease', 'renew', 'ack', 'nack',
                            'return_leases', 'mark_undecodable', 'end_cancelled', 'upcast',
                            'start_rated', 'release', 'rewind', 'restart', 'skip_step',
                            'accept_step_set', 'cancel', 'requeue_dead_letter',
                            'apply_verb_to_jobs', 'reclaim_expired_jobs', 'reclaim_due_jobs',
                            'fold_job_counts', 'recycle_ready', 'recycle_lease_expiry',
                            'recycle_rings', 'recycle_op_log',
                            -- a stream's schedules, changed and advanced on its node (0019)
                            'upsert_schedule', 'advance_schedule', 'remove_schedule',
                            'lock_schedule',
                            -- a stream's settings, written on its node (0019)
                            'configure_stream', 'configure_kind_settings', 'configure_kind')
          -- (a schema upgraded to an older revision lacks some of them, or their p_stream)
          AND 'p_stream' = ANY(p.proargnames)
          AND NOT EXISTS (SELECT 1 FROM pg_dist_object o
                          WHERE o.classid = 'pg_proc'::regclass AND o.objid = p.oid
                            AND o.distribution_argument_index IS NOT NULL AND o.force_delegation)
    LOOP
        PERFORM create_distributed_function(f.fn, 'p_stream'::text, colocate_with => 'pgqueue.job'::text,
                                            force_delegation => true);
    END LOOP;
    -- each node's copy of a function with the coordinator's privileges: making a function on
    -- the nodes copies its grants but not a REVOKE from PUBLIC (a fresh install revokes
    -- before it distributes), and a REVOKE or GRANT made now is sent on to every node
    FOR f IN
        SELECT p.oid::regprocedure AS fn, p.proacl, p.proowner
        FROM pg_proc p
        WHERE p.pronamespace = 'pgqueue'::regnamespace AND p.proacl IS NOT NULL
    LOOP
        IF NOT EXISTS (SELECT 1 FROM aclexplode(f.proacl) a WHERE a.grantee = 0) THEN
            EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f.fn);
        END IF;
        FOR g IN
            SELECT DISTINCT a.grantee::regrole AS role FROM aclexplode(f.proacl) a
            WHERE a.grantee <> 0 AND a.grantee <> f.proowner
        LOOP
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %s', f.fn, g.role);
        END LOOP;
    END LOOP;
END
$functions$

-- name: citus_node_sequences
-- Each node's id sequences (see the top of this file), made where missing and set to hand
-- out k * 1024 + the node's group id: on the coordinator at once, on every worker through
-- Citus. Run after citus_layout, and again after a node is added.
SELECT nodeid, success, result FROM run_command_on_all_nodes($nodes$
DO $seqs$
DECLARE
    v_group int := (SELECT groupid FROM pg_dist_local_group);
    v_seq text;
    v_last bigint;
BEGIN
    SET LOCAL citus.enable_ddl_propagation = off;
    FOREACH v_seq IN ARRAY ARRAY['job_id_seq', 'lease_id_seq', 'op_log_seq_seq'] LOOP
        IF to_regclass('pgqueue.' || v_seq) IS NULL THEN
            EXECUTE format('CREATE SEQUENCE pgqueue.%I INCREMENT BY 1024 MINVALUE 1 START WITH %s',
                           v_seq, 1024 + v_group);
        ELSIF (SELECT increment_by FROM pg_sequences
               WHERE schemaname = 'pgqueue' AND sequencename = v_seq) <> 1024 THEN
            EXECUTE format('SELECT coalesce(last_value, 0) FROM pgqueue.%I', v_seq) INTO v_last;
            EXECUTE format('ALTER SEQUENCE pgqueue.%I INCREMENT BY 1024 RESTART WITH %s', v_seq,
                           (v_last / 1024 + 1) * 1024 + v_group);
        END IF;
    END LOOP;
END
$seqs$
$nodes$)

-- name: citus_nodes
-- The cluster's primary nodes that may hold shards, with how many shard groups of the job
-- table each holds (`pgqueue streams nodes`).
SELECT n.groupid AS node_group, n.nodename AS host, n.nodeport AS port,
       count(s.shardid)::int AS shards
FROM pg_dist_node n
LEFT JOIN pg_dist_placement p ON p.groupid = n.groupid
LEFT JOIN pg_dist_shard s ON s.shardid = p.shardid AND s.logicalrelid = 'pgqueue.job'::regclass
WHERE n.isactive AND n.noderole = 'primary' AND (n.shouldhaveshards OR s.shardid IS NOT NULL)
GROUP BY n.groupid, n.nodename, n.nodeport
ORDER BY n.groupid

-- name: citus_stream_placement
-- Where a stream's rows live: its shard of the job table (and of every table colocated with
-- it), the node holding it, and whether the shard holds this stream alone (isolated).
SELECT %(stream)s::text AS stream, s.shardid AS shard, p.groupid AS node_group,
       n.nodename AS host, n.nodeport AS port,
       s.shardminvalue = s.shardmaxvalue AS isolated
FROM pg_dist_shard s
JOIN pg_dist_placement p ON p.shardid = s.shardid
JOIN pg_dist_node n ON n.groupid = p.groupid AND n.noderole = 'primary'
WHERE s.shardid = get_shard_id_for_distribution_column('pgqueue.job', %(stream)s::text)

-- name: citus_isolate_stream
-- Give a stream a shard of its own (of the job table and every table colocated with it), on
-- the node that held it; writes to its old shard wait meanwhile (block_writes).
SELECT isolate_tenant_to_new_shard('pgqueue.job', %(stream)s::text, 'CASCADE',
                                   shard_transfer_mode => 'block_writes') AS shard

-- name: citus_id_floors
-- The highest value each id sequence handed out on any node (job ids, lease ids, op seqs):
-- what a node must hand out above before streams move onto it.
SELECT max(split_part(result, ',', 1)::bigint) AS job_id,
       max(split_part(result, ',', 2)::bigint) AS lease_id,
       max(split_part(result, ',', 3)::bigint) AS op_seq
FROM run_command_on_all_nodes($cmd$
SELECT concat_ws(',', (SELECT last_value FROM pgqueue.job_id_seq),
                 (SELECT last_value FROM pgqueue.lease_id_seq),
                 (SELECT last_value FROM pgqueue.op_log_seq_seq))
$cmd$)
WHERE success

-- name: citus_raise_ids
-- Raise one node's id sequences past the given floors (pgqueue.raise_node_ids), before streams
-- move onto it; the other nodes are left as they are.
SELECT nodeid, success, result
FROM run_command_on_all_nodes(format('SELECT pgqueue.raise_node_ids(%%s, %%s, %%s, %%s)',
                                     %(node_group)s::int, %(job_id)s::bigint,
                                     %(lease_id)s::bigint, %(op_seq)s::bigint))

-- name: citus_move_shard
-- Move a shard of the job table, with every shard colocated with it, to another node; writes
-- to it wait while it is copied (block_writes: no logical replication needed).
SELECT citus_move_shard_placement(%(shard)s::bigint, %(from_host)s::text, %(from_port)s::int,
                                  %(to_host)s::text, %(to_port)s::int,
                                  shard_transfer_mode => 'block_writes')

-- name: citus_rebalance_plan
-- The moves Citus's rebalancer would make to even out the job table's shard groups.
SELECT shardid AS shard, sourcename AS from_host, sourceport AS from_port,
       targetname AS to_host, targetport AS to_port
FROM get_rebalance_table_shards_plan('pgqueue.job')

-- name: citus_catalog
-- The distributed layout as (object, definition) rows, beside schema_catalog's (the catalog
-- test on Citus): each table's distribution (method, column, colocated with job or not) and
-- each distributed function's (its distribution argument, colocated with job, delegation).
SELECT 'distributed table ' || t.logicalrelid::regclass::text AS object,
       concat_ws(' ', 'method', t.partmethod::text,
                 'column', column_to_column_name(t.logicalrelid, t.partkey),
                 'with job', t.colocationid = (SELECT j.colocationid FROM pg_dist_partition j
                                               WHERE j.logicalrelid = 'pgqueue.job'::regclass))
           AS definition
FROM pg_dist_partition t
WHERE t.logicalrelid::regclass::text LIKE 'pgqueue.%%'
UNION ALL
SELECT 'distributed function ' || o.objid::regprocedure::text,
       concat_ws(' ', 'argument', o.distribution_argument_index,
                 'with job', o.colocationid = (SELECT j.colocationid FROM pg_dist_partition j
                                               WHERE j.logicalrelid = 'pgqueue.job'::regclass),
                 'forced', o.force_delegation)
FROM pg_dist_object o
JOIN pg_proc p ON o.classid = 'pg_proc'::regclass AND p.oid = o.objid
WHERE p.pronamespace = 'pgqueue'::regnamespace
ORDER BY 1
