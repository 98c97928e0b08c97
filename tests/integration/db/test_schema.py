"""Schema management: upgrade, downgrade, current, and refusing a missing or newer schema."""
from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from psycopg.types.json import Jsonb

import pgqueue
from pgqueue.db import connection, queries, schema
from tests.integration.client.test_oplog import assert_identical, op_count
from tests.pgbed import Bed


def test_queue_on_database_without_schema_says_run_upgrade(empty_dsn: str) -> None:
    with pytest.raises(pgqueue.SchemaMissing, match="pgqueue db upgrade"):
        pgqueue.Queue(empty_dsn)


def test_migrate_is_idempotent_and_reports_head(empty_dsn: str) -> None:
    assert schema.current(empty_dsn) is None
    pgqueue.migrate(empty_dsn)
    pgqueue.migrate(empty_dsn)
    assert schema.current(empty_dsn) == schema.head() == connection.SCHEMA_REVISION


def test_installs_in_threads_of_one_process_each_complete(bed: Bed) -> None:
    # alembic's commands share module-level proxies: two at once in one process (followers of
    # two replicas set up in threads) once removed each other's and failed with KeyError
    dsns = [bed.new_database(migrated=False) for _ in range(4)]
    errors: list[BaseException] = []

    def install(d: str) -> None:
        try:
            pgqueue.migrate(d)
        except BaseException as exc:
            errors.append(exc)

    try:
        threads = [threading.Thread(target=install, args=(d,)) for d in dsns]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert [schema.current(d) for d in dsns] == [schema.head()] * len(dsns)
    finally:
        for d in dsns:
            bed.drop(d)


def test_downgrade_to_base_then_upgrade_again(dsn: str) -> None:
    with pgqueue.Queue(dsn) as q:
        q.enqueue("x")
    schema.downgrade(dsn, "base")
    assert schema.current(dsn) is None
    with pytest.raises(pgqueue.SchemaMissing):
        pgqueue.Queue(dsn)
    pgqueue.migrate(dsn)
    with pgqueue.Queue(dsn) as q:
        assert q.stats() == []


def test_newer_schema_is_refused(dsn: str) -> None:
    with connection.connect(dsn) as conn:
        conn.execute("UPDATE pgqueue.alembic_version SET version_num = '9999'")
    with pytest.raises(pgqueue.SchemaTooNew, match="newer"):
        pgqueue.Queue(dsn)
    with pytest.raises(pgqueue.SchemaTooNew):
        pgqueue.migrate(dsn)


# -------------------------------------------------------------------------------------------
# 0003: an Enqueue op's job fields moved from its jsonb body to typed op_log columns
# -------------------------------------------------------------------------------------------

def enqueue_sql(tag: str) -> tuple[str, ...]:
    """Raw SQL, so it runs on any revision: a ready job, a delayed one with a dedup key, and
    batches with priorities, max_attempts, a schema version and a dedup key; then a lease."""
    key = tag.encode().hex()
    return (
        "SELECT pgqueue.enqueue_one('s', '\\x6f6e65'::bytea, 'k', 3, NULL, NULL, NULL, 5, NULL)",
        f"SELECT pgqueue.enqueue_one('s', '\\x00ff'::bytea, NULL, 0, 60000, NULL, "
        f"'\\x{key}'::bytea, 0, 2)",
        "SELECT pgqueue.enqueue('t', ARRAY['\\x01'::bytea, '\\x02'::bytea], ARRAY['a', NULL], "
        "ARRAY[9, 1], ARRAY[NULL, 5000]::bigint[], ARRAY[NULL, NULL]::timestamptz[], "
        "ARRAY[NULL, NULL]::bytea[], ARRAY[1, 0], ARRAY[7, NULL])",
        f"SELECT pgqueue.enqueue('t', ARRAY['\\x03'::bytea], ARRAY['d'], ARRAY[0], "
        f"ARRAY[NULL]::bigint[], ARRAY[NULL]::timestamptz[], ARRAY['\\x{key}'::bytea], ARRAY[0], "
        f"ARRAY[NULL]::int[])",
        "SELECT count(*) FROM pgqueue.lease('t', 1, 30000, 1, 1)",
    )


#: An Enqueue op as 0002 stored it: every field in its body.
BODY_KEYS = {"job_id", "stream", "kind", "payload", "priority", "state", "enqueued_at_ms",
             "not_before_ms", "dedup_key", "attempts", "max_attempts", "schema_version",
             "next_job_id"}


def run_sql(dsn: str, statements: tuple[str, ...]) -> None:
    with connection.connect(dsn) as conn:
        for statement in statements:
            conn.execute(statement)


def enqueue_bodies(dsn: str, expr: str) -> list[tuple[int, dict[str, Any]]]:
    with connection.connect(dsn) as conn:
        return [(r[0], r[1]) for r in conn.execute(
            f"SELECT seq, {expr} FROM pgqueue.op_log o WHERE op = 'Enqueue' ORDER BY seq")]


def ingest_everything(source: str, target: str) -> int:
    """Hand the source's whole op log to the target's ingest_ops (works on either revision)."""
    with connection.connect(source) as conn:
        ops = [r[0] for r in conn.execute(
            "SELECT to_jsonb(o) FROM pgqueue.op_log o ORDER BY seq").fetchall()]
    with connection.connect(target) as conn:
        row = conn.execute("SELECT pgqueue.ingest_ops(%s)", [Jsonb(ops)]).fetchone()
    assert row is not None
    return int(row[0])


def test_enqueue_ops_of_both_formats_replay_to_the_same_state(bed: Bed) -> None:
    source = bed.new_database(migrated=False)
    target = bed.new_database()
    try:
        schema.upgrade(source, "0002")
        run_sql(source, enqueue_sql("a"))  # ops with the whole body (0002)
        old = enqueue_bodies(source, "body")
        assert len(old) == 5 and all(set(b) == BODY_KEYS for _, b in old)
        schema.upgrade(source, "0003")
        run_sql(source, enqueue_sql("b"))
        new = enqueue_bodies(source, "body")[5:]
        assert len(new) == 5
        assert all(set(b) == {"enqueued_at_ms", "attempts"} for _, b in new)
        # op_body gives the old ops back unchanged and the new ones whole, in the same shape
        whole = enqueue_bodies(source, "pgqueue.op_body(o)")
        assert whole[:5] == old
        assert all(set(b) == BODY_KEYS for _, b in whole)
        assert [b["state"] for _, b in whole] == ["pending", "scheduled", "pending", "scheduled",
                                                  "pending"] * 2
        assert ingest_everything(source, target) == op_count(source)
        schema.upgrade(source)  # compare at one revision: later ones add op_log columns
        assert_identical(source, target)
    finally:
        bed.drop(source)
        bed.drop(target)


def test_downgrade_from_0003_puts_every_enqueue_body_back(bed: Bed) -> None:
    source = bed.new_database()
    target = bed.new_database(migrated=False)
    try:
        run_sql(source, enqueue_sql("a"))
        whole = enqueue_bodies(source, "pgqueue.op_body(o)")
        assert len(whole) == 5
        schema.downgrade(source, "0002")
        assert enqueue_bodies(source, "body") == whole  # nothing lost
        schema.upgrade(target, "0002")
        assert ingest_everything(source, target) == op_count(source)
        schema.upgrade(source)
        schema.upgrade(target)
        assert_identical(source, target)
    finally:
        bed.drop(source)
        bed.drop(target)


# -------------------------------------------------------------------------------------------
# One current source: a fresh install and the revisions build the same catalog
# -------------------------------------------------------------------------------------------

def revisions() -> list[str]:
    """Every revision id, oldest first."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    cfg = Config()
    cfg.set_main_option("script_location", str(schema.migrations_dir()))
    return [r.revision for r in reversed(list(ScriptDirectory.from_config(cfg).walk_revisions()))]


def assert_same(a: dict[str, str], b: dict[str, str], names: tuple[str, str]) -> None:
    diff = schema.catalog_diff(a, b, names=names)
    assert not diff, "catalogs differ:\n" + "\n".join(diff)


def test_the_revisions_and_a_fresh_install_build_the_same_catalog(bed: Bed, dsn: str) -> None:
    by_revisions = bed.new_database(migrated=False)
    try:
        schema.upgrade_by_revisions(by_revisions)
        assert schema.current(by_revisions) == schema.head()
        installed = schema.catalog(dsn)  # the template: installed from pgqueue/sql/ at head
        assert len([k for k in installed if k.startswith("function ")]) > 50
        assert_same(schema.catalog(by_revisions), installed, ("revisions", "install"))
    finally:
        bed.drop(by_revisions)


def test_a_downgrade_through_every_revision_and_back_round_trips(bed: Bed, dsn: str) -> None:
    """Down from head a revision at a time, each step gives the catalog that building up to
    that revision gives (old code from its frozen file, old tables from the down deltas,
    carrying the jobs head wrote); back up a revision at a time, each step gives it again; at
    head, head's. One chain: each migration runs once each way, not once per revision below
    it."""
    names = revisions()
    built: dict[str, dict[str, str]] = {}
    up_to = bed.new_database(migrated=False)
    try:
        for revision in names[:-1]:
            schema.upgrade(up_to, revision)
            built[revision] = schema.catalog(up_to)
    finally:
        bed.drop(up_to)
    head_catalog = schema.catalog(dsn)
    run_sql(dsn, enqueue_sql("r"))  # data for the down (and then the up) deltas to carry
    for revision in reversed(names[:-1]):
        schema.downgrade(dsn, revision)
        assert schema.current(dsn) == revision
        assert_same(built[revision], schema.catalog(dsn),
                    (f"upgraded to {revision}", f"downgraded to {revision}"))
    for revision in names[1:-1]:
        schema.upgrade(dsn, revision)
        assert schema.current(dsn) == revision
        assert_same(built[revision], schema.catalog(dsn),
                    (f"upgraded to {revision}", f"down and up again to {revision}"))
    schema.upgrade(dsn)
    assert_same(head_catalog, schema.catalog(dsn), ("head", "down and up again"))


def test_op_seqs_go_on_across_the_0005_sequence_change_both_ways(bed: Bed) -> None:
    """0005 turns op_log.seq's identity into a plain sequence (drawn once the transaction has
    an xid); the next op after an upgrade or a downgrade follows the last one, never reuses."""
    db = bed.new_database(migrated=False)
    try:
        schema.upgrade(db, "0004")
        run_sql(db, enqueue_sql("u"))
        with connection.connect(db) as conn:
            before = conn.execute("SELECT max(seq) FROM pgqueue.op_log").fetchone()
        schema.upgrade(db, "0005")
        run_sql(db, enqueue_sql("v"))
        with connection.connect(db) as conn:
            seqs = [r[0] for r in conn.execute("SELECT seq FROM pgqueue.op_log ORDER BY seq")]
            default = conn.execute(
                "SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef "
                "WHERE adrelid = 'pgqueue.op_log'::regclass AND adnum = 1").fetchone()
        assert before is not None and seqs == list(range(1, len(seqs) + 1))
        assert seqs[-1] > before[0]
        assert default is not None and "pg_current_xact_id()" in default[0]
        schema.downgrade(db, "0004")
        run_sql(db, enqueue_sql("w"))
        with connection.connect(db) as conn:
            after = [r[0] for r in conn.execute("SELECT seq FROM pgqueue.op_log ORDER BY seq")]
        assert after[:len(seqs)] == seqs and after == list(range(1, len(after) + 1))
    finally:
        bed.drop(db)


def test_the_catalog_diff_names_each_object_that_differs(bed: Bed, dsn: str) -> None:
    changed = bed.new_database()
    try:
        run_sql(changed, (
            "DROP INDEX pgqueue.job_leased_idx",
            "ALTER TABLE pgqueue.job ALTER COLUMN max_attempts SET DEFAULT 7",
            "CREATE OR REPLACE FUNCTION pgqueue.b64(b bytea) RETURNS text LANGUAGE sql "
            "IMMUTABLE AS $$ SELECT encode(b, 'base64') $$",
            "ALTER FUNCTION pgqueue.reclaim_expired(int) SET search_path = pg_catalog",
        ))
        diff = schema.catalog_diff(schema.catalog(dsn), schema.catalog(changed),
                                   names=("head", "changed"))
        keys = sorted(entry.split(":")[0] for entry in diff)
        assert keys == ["column job.max_attempts", "function pgqueue.b64(bytea)",
                        "function pgqueue.reclaim_expired(integer)", "index job_leased_idx"]
        assert any("default 7" in entry for entry in diff)
    finally:
        bed.drop(changed)


def test_a_downgrade_to_base_leaves_no_pgqueue_object(dsn: str) -> None:
    schema.downgrade(dsn, "base")
    assert schema.catalog(dsn) == {"schema pgqueue": ""}


def test_every_revision_but_head_has_its_frozen_code() -> None:
    from pgqueue_migrations.revision import code_file

    versions = schema.migrations_dir() / "versions"
    *older, newest = revisions()
    assert newest == schema.head() == connection.SCHEMA_REVISION
    assert code_file(newest, versions) is None  # the head's code is pgqueue/sql/
    for rev in older:
        frozen = code_file(rev, versions)
        assert frozen is not None and int(frozen.stem) <= int(rev)
        assert frozen.read_text().startswith("-- GENERATED FILE: do not edit.")
    # a revision shares the file below it only when that is not another revision's own
    assert {p.stem for p in (versions / "code").glob("*.sql")} <= set(older)


def test_starting_a_revision_freezes_the_code_and_writes_only_a_delta(tmp_path: Path) -> None:
    from pgqueue_migrations import new
    from pgqueue_migrations.revision import code_file, code_of

    versions = tmp_path / "versions"
    shutil.copytree(schema.migrations_dir() / "versions", versions,
                    ignore=shutil.ignore_patterns("__pycache__"))
    head = schema.head()
    assert new.main(["add_thing", "Add a thing.", "--compatible", "--versions", str(versions)]) == 0
    nxt = f"{int(head) + 1:04d}"
    frozen = code_file(head, versions)  # its own file, or the one below when code is unchanged
    assert frozen is not None and code_of(head, versions) == queries.code_sql()
    # what changed, not a copy: a function no revision has changed since 0003 is not in it
    assert "FUNCTION pgqueue.to_ms(" not in frozen.read_text()
    assert frozen.stat().st_size < len(queries.code_sql())
    assert code_file(nxt, versions) is None
    module = (versions / f"{nxt}_add_thing.py").read_text()
    assert f'down_revision = "{head}"' in module and "compatible=True" in module
    assert (versions / f"{nxt}_add_thing.sql").exists()
    (versions / "code" / f"{head}.sql").write_text("-- frozen")
    with pytest.raises(SystemExit, match="already frozen"):
        new.freeze(head, nxt, versions)


# -------------------------------------------------------------------------------------------
# Rolling upgrades: a release runs on a newer schema when the revisions past it are compatible
# -------------------------------------------------------------------------------------------

PROBE_DELTA = """
ALTER TABLE pgqueue.job ADD COLUMN test_note text NOT NULL DEFAULT '';
CREATE INDEX job_test_note_idx ON pgqueue.job (stream, test_note) WHERE test_note <> '';
CREATE TABLE pgqueue.test_probe (id bigint PRIMARY KEY);
"""
PROBE_UNDO = """
DROP TABLE pgqueue.test_probe;
DROP INDEX pgqueue.job_test_note_idx;
ALTER TABLE pgqueue.job DROP COLUMN test_note;
"""


def migrations_with_probe(tmp_path: Path, *, compatible: bool) -> Path:
    """A copy of the migrations with one more, test-only revision after head: new column with
    a default, a new index and a new table (additive), marked compatible or not."""
    from pgqueue_migrations import new

    location = tmp_path / "migrations"
    shutil.copytree(schema.migrations_dir(), location,
                    ignore=shutil.ignore_patterns("__pycache__"))
    args = ["test_probe", "--versions", str(location / "versions")]
    assert new.main([*args, "--compatible"] if compatible else args) == 0
    nxt = f"{int(schema.head()) + 1:04d}"
    (location / "versions" / f"{nxt}_test_probe.sql").write_text(PROBE_DELTA)
    (location / "versions" / f"{nxt}_test_probe.down.sql").write_text(PROBE_UNDO)
    return location


def test_a_compatible_newer_revision_is_accepted_and_recorded(dsn: str, tmp_path: Path) -> None:
    location = migrations_with_probe(tmp_path, compatible=True)
    probe = schema.head(location)
    before = schema.catalog(dsn)
    schema.upgrade(dsn, "head", location=location)
    assert schema.current(dsn) == probe
    with pgqueue.Queue(dsn) as q:  # this library, one revision behind the schema
        job_id = q.enqueue("x")
        (lease,) = q.lease(limit=1)
        q.ack(lease)
        assert lease.job_id == job_id
    with connection.connect(dsn) as conn:
        rows = conn.execute("SELECT revision, compatible_from FROM pgqueue.schema_history "
                            "ORDER BY revision").fetchall()
    assert rows[-1] == (probe, schema.compatible_from(connection.SCHEMA_REVISION))
    schema.downgrade(dsn, connection.SCHEMA_REVISION, location=location)
    assert_same(before, schema.catalog(dsn), ("before", "up to the probe and down"))


def test_an_incompatible_newer_revision_is_refused_naming_both(dsn: str, tmp_path: Path) -> None:
    location = migrations_with_probe(tmp_path, compatible=False)
    probe = schema.head(location)
    schema.upgrade(dsn, "head", location=location)
    with pytest.raises(pgqueue.SchemaTooNew) as refused:
        pgqueue.Queue(dsn)
    message = str(refused.value)
    assert probe in message and connection.SCHEMA_REVISION in message
    assert f"pip install -U {connection.DISTRIBUTION}" in message


def test_an_older_schema_is_refused_naming_both_and_the_command(dsn: str) -> None:
    older = revisions()[-2]
    schema.downgrade(dsn, older)
    with pytest.raises(pgqueue.SchemaMissing) as refused:
        pgqueue.Queue(dsn)
    message = str(refused.value)
    assert older in message and connection.SCHEMA_REVISION in message
    assert "pgqueue db upgrade" in message


def test_an_install_over_unstamped_tables_changes_nothing_and_says_why(empty_dsn: str) -> None:
    with connection.connect(empty_dsn) as conn:
        queries.run_script(conn, queries.install_sql())
        conn.execute("INSERT INTO pgqueue.stream_config (stream) VALUES ('kept')")
    with pytest.raises(pgqueue.SchemaError, match="no revision stamp"):
        pgqueue.migrate(empty_dsn)
    with connection.connect(empty_dsn) as conn:
        assert conn.execute("SELECT stream FROM pgqueue.stream_config").fetchall() == [("kept",)]


def test_a_lease_waiting_behind_a_revision_that_adds_a_job_column_succeeds(dsn: str) -> None:
    """A lease that started while a revision adding a column to job held its lock finishes
    after the revision commits with the leases it asked for (lease returns its own columns,
    not the job table's row type: the rolling-upgrade test once saw a lease with SETOF
    pgqueue.job fail with "structure of query does not match function result type")."""
    import threading

    from pgqueue.client import lease
    from tests.dbhelp import wait_for

    with pgqueue.Queue(dsn) as q:
        q.enqueue_many([pgqueue.NewJob(str(i)) for i in range(3)])
    outcome: list[object] = []
    with connection.connect(dsn, autocommit=False) as migration, connection.connect(dsn) as worker:
        migration.execute("ALTER TABLE pgqueue.job ADD COLUMN test_note text NOT NULL DEFAULT ''")
        pid = worker.info.backend_pid

        def take() -> None:
            try:
                outcome.append(lease.lease(worker, "default", 2, 30.0, 0, 0))
            except Exception as exc:
                outcome.append(exc)

        thread = threading.Thread(target=take)
        thread.start()
        with connection.connect(dsn) as watcher:
            wait_for(lambda: watcher.execute(
                "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s",
                (pid,)).fetchone() == (True,), 10, "the lease to wait for the job table's lock")
        migration.commit()
        thread.join(timeout=10)
    assert len(outcome) == 1 and isinstance(outcome[0], list), outcome
    assert len(outcome[0]) == 2
