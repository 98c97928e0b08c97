-- schema: which revision of the pgqueue schema a database holds, and which code it can run.
--
-- The schema itself is installed from the stage files (queries.SCHEMA_STAGES) and moved between
-- revisions by migrations/revision.py; this file holds its bookkeeping.

-- schema: tables -------------------------------------------------------------------------

-- The revisions applied, and which code each one can run, so that a release keeps working on a
-- database upgraded to a newer, backward-compatible revision (a rolling upgrade: database
-- first, then workers). alembic's own pgqueue.alembic_version holds the current revision.
CREATE TABLE pgqueue.schema_history (
    revision        text PRIMARY KEY,
    -- the oldest revision whose code runs on this one: a backward-compatible revision keeps
    -- its predecessor's, any other names itself
    compatible_from text NOT NULL,
    applied_at      timestamptz NOT NULL DEFAULT now()
);

-- How the schema is laid out: 'single' (one server), or 'citus' once pgqueue.db.schema laid
-- it out across a Citus cluster (pgqueue/sql/citus.sql). An enqueue notifies waiting workers
-- only on one server (pgqueue.notify_ready). One row; a reference table on Citus.
CREATE TABLE pgqueue.layout (
    one  boolean PRIMARY KEY DEFAULT true CHECK (one),
    name text NOT NULL DEFAULT 'single' CHECK (name IN ('single', 'citus'))
);
INSERT INTO pgqueue.layout DEFAULT VALUES;

-- queries -----------------------------------------------------------------------------------

-- name: schema_revision
-- The alembic revision of the pgqueue schema (no row after a downgrade to base; a missing
-- table raises, which pgqueue reports as "run pgqueue db upgrade").
SELECT version_num AS revision FROM pgqueue.alembic_version LIMIT 1

-- name: database_exists
SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = %(name)s) AS exists

-- name: session_read_committed
-- A pooled connection's transactions run at READ COMMITTED whatever the server's default:
-- the kinds' limits need a snapshot per statement (pgqueue.lease).
SELECT set_config('default_transaction_isolation', 'read committed', false)

-- name: backend_pid
-- The server process serving this connection: not the one the handshake gave when a pooler
-- stands between (pool.behind_pooler).
SELECT pg_backend_pid() AS pid

-- name: server_check
-- What `pgqueue db check` judges, in one row: the server, its JIT, the settings this session
-- runs with (the connecting role's and database's included), the connections.
SELECT current_setting('server_version_num')::int AS version_num,
       current_setting('server_version') AS version,
       current_setting('jit') AS jit, pg_jit_available() AS jit_available,
       current_setting('jit_above_cost')::float8 AS jit_above_cost,
       current_setting('jit_inline_above_cost')::float8 AS jit_inline_above_cost,
       current_setting('jit_optimize_above_cost')::float8 AS jit_optimize_above_cost,
       current_setting('statement_timeout') AS statement_timeout,
       current_setting('lock_timeout') AS lock_timeout,
       current_setting('idle_in_transaction_session_timeout') AS idle_in_transaction_session_timeout,
       current_setting('idle_session_timeout', true) AS idle_session_timeout,
       -- the same in milliseconds (pg_settings holds each in its base unit)
       (SELECT jsonb_object_agg(name, setting::bigint) FROM pg_settings
        WHERE name IN ('statement_timeout', 'lock_timeout', 'idle_in_transaction_session_timeout',
                       'idle_session_timeout')) AS timeouts_ms,
       current_setting('default_transaction_isolation') AS default_transaction_isolation,
       current_setting('search_path') AS search_path,
       current_setting('wal_level') AS wal_level,
       current_setting('max_connections')::int AS max_connections,
       current_setting('superuser_reserved_connections')::int AS reserved_connections,
       (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')::int
           AS connections,
       current_user AS role, current_database() AS database

-- name: server_check_schema
-- The schema's side of `pgqueue db check`: its revision, the logical replicas attached, and
-- the handler slots of the workers that heartbeat in the last minute.
SELECT (SELECT version_num FROM pgqueue.alembic_version LIMIT 1) AS revision,
       (SELECT count(*) FROM pgqueue.replica WHERE method = 'logical')::int AS logical_replicas,
       (SELECT count(*) FROM pgqueue.worker
        WHERE heartbeat_at > now() - interval '1 minute')::int AS live_workers,
       (SELECT coalesce(sum(concurrency), 0) FROM pgqueue.worker
        WHERE heartbeat_at > now() - interval '1 minute')::int AS live_slots

-- name: server_version
SELECT current_setting('server_version') AS version

-- name: schema_compatible_from
-- The oldest revision whose code runs on the database's revision (a backward-compatible
-- revision keeps its predecessor's); NULL before revision 0004, which started the history.
SELECT h.compatible_from FROM pgqueue.alembic_version v
JOIN pgqueue.schema_history h ON h.revision = v.version_num

-- name: writable_path_schemas
-- The schemas on this session's search_path (besides pgqueue and pg_catalog) in which a role
-- other than their owner and this session's may create objects (PUBLIC's CREATE on public,
-- the default up to Postgres 14): a function planted there could run with this session's
-- rights when one of its own statements resolves a name to it.
SELECT n.nspname AS name
FROM unnest(current_schemas(false)) WITH ORDINALITY AS s(name, ord)
JOIN pg_namespace n ON n.nspname = s.name
WHERE n.nspname NOT IN ('pgqueue', 'pg_catalog')
  AND EXISTS (SELECT 1 FROM aclexplode(coalesce(n.nspacl, acldefault('n', n.nspowner))) a
              WHERE a.privilege_type = 'CREATE'
                AND a.grantee NOT IN (n.nspowner, (SELECT r.oid FROM pg_roles r
                                                   WHERE r.rolname = current_user)))
ORDER BY s.ord

-- name: schema_has_tables
-- Whether pgqueue's tables exist (a database without a revision stamp may still hold them).
SELECT to_regclass('pgqueue.job') IS NOT NULL AS exists

-- name: schema_history_exists
SELECT to_regclass('pgqueue.schema_history') IS NOT NULL AS exists

-- name: schema_history_compatible_from
SELECT compatible_from FROM pgqueue.schema_history WHERE revision = %(revision)s

-- name: schema_history_put
-- A revision was applied (again): what it is compatible with, and when.
INSERT INTO pgqueue.schema_history (revision, compatible_from) VALUES (%(revision)s, %(since)s)
ON CONFLICT (revision) DO UPDATE SET compatible_from = excluded.compatible_from,
                                     applied_at = excluded.applied_at  -- (its default: now)

-- name: schema_history_delete
DELETE FROM pgqueue.schema_history WHERE revision = %(revision)s

-- name: check_function_bodies
-- For the rest of the migration's transaction (frozen code files are not in call order).
SELECT set_config('check_function_bodies', %(on)s, true)

-- name: code_load_begin
-- Before a revision's code is loaded: note where every pgqueue function and view's catalog row
-- is. CREATE OR REPLACE writes a new row version (a new ctid) even for an unchanged
-- definition, so a row still in its noted place afterwards was not defined by that code. (Not
-- xmin: one alembic run applies several revisions in one transaction.)
CREATE TEMP TABLE pgqueue_code_before ON COMMIT DROP AS
SELECT 'FUNCTION' AS kind, p.oid, p.ctid AS at FROM pg_proc p
WHERE p.pronamespace = 'pgqueue'::regnamespace
UNION ALL
SELECT 'VIEW', c.oid, rw.ctid FROM pg_class c JOIN pg_rewrite rw ON rw.ev_class = c.oid
WHERE c.relnamespace = 'pgqueue'::regnamespace AND c.relkind = 'v'

-- name: code_load_citus
-- Before a revision's code is loaded on a Citus cluster's coordinator: the count triggers it
-- makes again are on distributed tables, which Citus allows only with enable_unsafe_triggers
-- (set for the database by the layout, citus.sql; set here too, for this transaction, since a
-- database copied from another, or a session begun before, lacks it).
SELECT set_config('citus.enable_unsafe_triggers', 'on', true)
WHERE EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')

-- name: drop_schema_leftovers
-- After the code is loaded: drop every function and view it did not define (views first:
-- they may call functions; functions other functions depend on last). Names come from the catalog, quoted by it.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT 1 AS pass, 'VIEW' AS kind, b.oid::regclass::text AS name
        FROM pgqueue_code_before b JOIN pg_rewrite rw ON rw.ev_class = b.oid AND rw.ctid = b.at
        WHERE b.kind = 'VIEW'
        UNION ALL
        -- a function others name (in a parameter default: pgqueue.each_stream) after them
        SELECT CASE WHEN EXISTS (SELECT 1 FROM pg_depend d
                                 WHERE d.refclassid = 'pg_proc'::regclass AND d.refobjid = b.oid
                                   AND d.classid = 'pg_proc'::regclass)
                    THEN 3 ELSE 2 END, 'FUNCTION', b.oid::regprocedure::text
        FROM pgqueue_code_before b JOIN pg_proc p ON p.oid = b.oid AND p.ctid = b.at
        WHERE b.kind = 'FUNCTION'
        ORDER BY 1, 3
    LOOP
        EXECUTE format('DROP %s %s', r.kind, r.name);
    END LOOP;
    DROP TABLE pgqueue_code_before;
END
$$

-- name: schema_catalog
-- Every object of the pgqueue schema as (object, definition) rows: what the catalog test
-- compares between a database built by the revisions and one installed from the stage files.
-- alembic's version table and the rows of schema_history are bookkeeping, not schema. An
-- access list is shown as its items in order, and not at all when it is the default (so the
-- order grants ran in, and a grant undone, leave no trace). A
-- column's position is its place among live columns (a dropped and re-added column leaves a
-- hole in attnum that SELECT * does not see).
WITH rel AS (
    SELECT c.oid, c.relname, c.relkind FROM pg_class c
    WHERE c.relnamespace = 'pgqueue'::regnamespace AND c.relname <> 'alembic_version'
      AND c.relname NOT LIKE 'alembic_version%%'
)
SELECT 'schema pgqueue' AS object,
       concat_ws(' ', 'acl ' || (SELECT CASE WHEN n.nspacl IS NULL OR a.items = d.items THEN NULL ELSE a.items END
        FROM (SELECT string_agg(x::text, ',' ORDER BY x::text) AS items FROM unnest(n.nspacl) x) a,
             (SELECT string_agg(x::text, ',' ORDER BY x::text) AS items
              FROM unnest(acldefault('n', n.nspowner)) x) d),
                 'comment ' || obj_description(n.oid, 'pg_namespace')) AS definition
FROM pg_namespace n WHERE n.nspname = 'pgqueue'
UNION ALL
SELECT 'table ' || r.relname,
       concat_ws(' ', 'kind ' || r.relkind::text, 'options ' || c.reloptions::text,
                 'persistence ' || c.relpersistence::text, 'rls ' || c.relrowsecurity::text,
                 'acl ' || (SELECT CASE WHEN c.relacl IS NULL OR a.items = d.items THEN NULL ELSE a.items END
        FROM (SELECT string_agg(x::text, ',' ORDER BY x::text) AS items FROM unnest(c.relacl) x) a,
             (SELECT string_agg(x::text, ',' ORDER BY x::text) AS items
              FROM unnest(acldefault(CASE WHEN c.relkind = 'S' THEN 's'::"char" ELSE 'r'::"char" END,
                                   c.relowner)) x) d),
                 'comment ' || obj_description(c.oid, 'pg_class'))
FROM rel r JOIN pg_class c ON c.oid = r.oid WHERE r.relkind IN ('r', 'p', 'v', 'S')
UNION ALL
SELECT 'column ' || r.relname || '.' || a.attname,
       concat_ws(' ', '#' || row_number() OVER (PARTITION BY a.attrelid ORDER BY a.attnum), format_type(a.atttypid, a.atttypmod),
                 CASE WHEN a.attnotnull THEN 'NOT NULL' END,
                 'default ' || pg_get_expr(d.adbin, d.adrelid),
                 CASE WHEN a.attidentity <> '' THEN 'identity ' || a.attidentity::text END,
                 CASE WHEN a.attgenerated <> '' THEN 'generated ' || a.attgenerated::text END,
                 'acl ' || (SELECT string_agg(x::text, ',' ORDER BY x::text) FROM unnest(a.attacl) x),
                 'comment ' || col_description(r.oid, a.attnum))
FROM rel r JOIN pg_attribute a ON a.attrelid = r.oid AND a.attnum > 0 AND NOT a.attisdropped
LEFT JOIN pg_attrdef d ON d.adrelid = r.oid AND d.adnum = a.attnum
WHERE r.relkind IN ('r', 'p', 'v')
UNION ALL
SELECT 'constraint ' || r.relname || '.' || co.conname, pg_get_constraintdef(co.oid)
FROM rel r JOIN pg_constraint co ON co.conrelid = r.oid
UNION ALL
SELECT 'index ' || r.relname, pg_get_indexdef(r.oid)
FROM rel r WHERE r.relkind = 'i'
UNION ALL
SELECT 'sequence ' || r.relname,
       concat_ws(' ', format_type(s.seqtypid, NULL), 'start', s.seqstart, 'increment',
                 s.seqincrement, 'min', s.seqmin, 'max', s.seqmax, 'cache', s.seqcache,
                 'cycle', s.seqcycle, 'owned by',
                 (SELECT dc.relname || '.' || da.attname FROM pg_depend dep
                  JOIN pg_class dc ON dc.oid = dep.refobjid
                  JOIN pg_attribute da ON da.attrelid = dep.refobjid AND da.attnum = dep.refobjsubid
                  WHERE dep.objid = r.oid AND dep.classid = 'pg_class'::regclass
                    AND dep.refclassid = 'pg_class'::regclass AND dep.deptype IN ('a', 'i')))
FROM rel r JOIN pg_sequence s ON s.seqrelid = r.oid
UNION ALL
SELECT 'view ' || r.relname, pg_get_viewdef(r.oid)
FROM rel r WHERE r.relkind = 'v'
UNION ALL
SELECT 'function ' || p.oid::regprocedure::text,
       concat_ws(E'\n', pg_get_functiondef(p.oid), 'acl ' || (SELECT CASE WHEN p.proacl IS NULL OR a.items = d.items THEN NULL ELSE a.items END
        FROM (SELECT string_agg(x::text, ',' ORDER BY x::text) AS items FROM unnest(p.proacl) x) a,
             (SELECT string_agg(x::text, ',' ORDER BY x::text) AS items
              FROM unnest(acldefault('f', p.proowner)) x) d),
                 'comment ' || obj_description(p.oid, 'pg_proc'))
FROM pg_proc p WHERE p.pronamespace = 'pgqueue'::regnamespace
UNION ALL
SELECT 'trigger ' || r.relname || '.' || t.tgname,
       pg_get_triggerdef(t.oid) || ' enabled ' || t.tgenabled::text
FROM rel r JOIN pg_trigger t ON t.tgrelid = r.oid AND NOT t.tgisinternal
UNION ALL
SELECT 'policy ' || r.relname || '.' || po.polname,
       concat_ws(' ', po.polcmd::text, po.polpermissive::text, po.polroles::text,
                 pg_get_expr(po.polqual, po.polrelid), pg_get_expr(po.polwithcheck, po.polrelid))
FROM rel r JOIN pg_policy po ON po.polrelid = r.oid
UNION ALL
SELECT 'type ' || t.typname, t.typtype::text
FROM pg_type t WHERE t.typnamespace = 'pgqueue'::regnamespace AND t.typtype NOT IN ('c', 'b')
UNION ALL
SELECT 'publication ' || pub.pubname,
       concat_ws(' ', 'insert', pub.pubinsert, 'update', pub.pubupdate, 'delete', pub.pubdelete,
                 'tables', (SELECT string_agg(pt.schemaname || '.' || pt.tablename, ',' ORDER BY 1)
                            FROM pg_publication_tables pt WHERE pt.pubname = pub.pubname))
FROM pg_publication pub
ORDER BY 1
