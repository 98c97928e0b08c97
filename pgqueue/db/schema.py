"""The schema: a fresh install from the current files, and alembic revisions for the rest.

A database without the pgqueue schema is installed from pgqueue/sql/<stage>.sql (every stage's
tables, then its functions) and stamped at head, in one transaction. A database that has the
schema moves between revisions through alembic, each revision of an upgrade committed on its
own; the revisions ship inside the wheel (package `pgqueue_migrations`, the repository's
`migrations/` folder), each a small delta of plain SQL for the tables plus the code of the
revision it lands on (see migrations/revision.py).
"""
from __future__ import annotations

import importlib.util
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg

from pgqueue.db import connection, queries
from pgqueue.errors import SchemaError, SchemaTooNew

if TYPE_CHECKING:
    from alembic.config import Config


def migrations_dir() -> Path:
    """Where the alembic environment is: the installed package, or the source tree."""
    spec = importlib.util.find_spec("pgqueue_migrations")
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return Path(__file__).resolve().parents[2] / "migrations"


def _config(location: Path | None) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(location or migrations_dir()))
    return cfg


def _engine(dsn: str) -> Any:
    """A SQLAlchemy engine on one psycopg connection at a time (alembic runs on SQLAlchemy)."""
    from sqlalchemy import create_engine, pool

    def creator() -> Any:
        return connection.connect(dsn, autocommit=False)

    return create_engine("postgresql+psycopg://", creator=creator, poolclass=pool.NullPool)


#: alembic's commands run through module-level proxies (alembic.context, alembic.op) that one
#: command sets and removes: two at once in one process (two replicas' followers set up in
#: threads) removed each other's ("KeyError: 'config'"), so they take turns.
_COMMANDS = threading.RLock()


@contextmanager
def _alembic(dsn: str, location: Path | None = None) -> Iterator[tuple[Config, Any]]:
    """An alembic config on one transaction of `dsn` (committed when the block ends), and the
    psycopg connection underneath it; one at a time in a process (_COMMANDS)."""
    with _COMMANDS:
        yield from _alembic_session(dsn, location)


def _alembic_session(dsn: str, location: Path | None) -> Iterator[tuple[Config, Any]]:
    from sqlalchemy.exc import DBAPIError

    engine = _engine(dsn)
    try:
        with engine.connect() as conn:
            cfg = _config(location)
            cfg.attributes["connection"] = conn
            driver = conn.connection.driver_connection
            assert driver is not None
            _unbounded(driver)
            try:
                yield cfg, driver
            except DBAPIError as exc:  # a statement of a revision, run through SQLAlchemy
                if isinstance(exc.orig, psycopg.Error):
                    raise queries.translate(exc.orig, driver.info.user) from exc
                raise
            conn.commit()
    finally:
        engine.dispose()


def _unbounded(conn: Any) -> None:
    """No statement_timeout on a migration's own session: a limit set for the role or the
    database (to stop runaway queries of an application, say 50 ms) would cancel the DDL
    of an install or upgrade, which takes as long as it takes (its lock waits are still
    bounded by lock_timeout, if one is set)."""
    queries.fetch(conn, "setting_set", {"name": "statement_timeout", "value": "0"})


def head(location: Path | None = None) -> str:
    """The newest revision this library ships (or that the migrations at `location` hold)."""
    from alembic.script import ScriptDirectory

    rev = ScriptDirectory.from_config(_config(location)).get_current_head()
    assert rev is not None
    return rev


def compatible_from(revision: str, location: Path | None = None) -> str:
    """The oldest revision whose code runs on `revision`: walk down the backward-compatible
    revisions (the value each revision records in pgqueue.schema_history)."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(_config(location))
    while True:
        found = script.get_revision(revision)
        assert found is not None
        spec = getattr(found.module, "REVISION", None)
        if spec is None or not spec.compatible or found.down_revision is None:
            return revision
        revision = str(found.down_revision)


def current(dsn: str) -> str | None:
    """The database's revision, or None when it has no pgqueue schema."""
    from alembic.runtime.migration import MigrationContext

    engine = _engine(dsn)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(
                conn, opts={"version_table": "alembic_version", "version_table_schema": "pgqueue"}
            )
            return ctx.get_current_revision()
    finally:
        engine.dispose()


def install(dsn: str) -> None:
    """Install the current schema into a database that has none, stamped at head (one
    transaction: a failure leaves nothing behind)."""
    with _alembic(dsn) as (cfg, conn):
        if queries.scalar(conn, "schema_has_tables"):
            raise SchemaError(
                f"the database {connection.describe(dsn)} has pgqueue tables but no revision "
                "stamp (installed by hand from `pgqueue db sql`?), so its revision is unknown; "
                "nothing was changed. Install with `pgqueue db upgrade`, which stamps the "
                "revision, into a database without the pgqueue schema")
        queries.run_script(conn, queries.install_sql())
        from alembic import command

        command.stamp(cfg, "head")
        queries.fetch(conn, "schema_history_put",
                      {"revision": head(), "since": compatible_from(head())})
        # every role reads the revision (the stamp made the table after the install's grants)
        queries.fetch(conn, "grant_version_table")


def writable_path_schemas(dsn: str) -> list[str]:
    """The schemas on the search_path of `dsn`'s role (the owner's, for migrations) that
    other roles may create objects in: on Postgres 14 and earlier, `public` (see the docs'
    Roles page). Empty is what a safe setup gives."""
    with connection.connect(dsn) as conn:
        return [str(r["name"]) for r in queries.fetch(conn, "writable_path_schemas")]


def upgrade(dsn: str, revision: str = "head", *, location: Path | None = None) -> None:
    """Migrate the database up to `revision` (default: this library's newest). A database
    without the schema that is to reach head is installed from the current files instead
    (`location`: another migrations folder, for tests of revisions this library lacks)."""
    found = current(dsn)
    newest = head(location)
    if found is not None and found.isdigit() and newest.isdigit() and int(found) > int(newest):
        raise SchemaTooNew(
            f"the database's pgqueue schema is revision {found}, newer than this library's "
            f"{newest}; upgrade the {connection.DISTRIBUTION} package "
            f"(pip install -U {connection.DISTRIBUTION})"
        )
    if found is None and location is None and revision in ("head", newest):
        install(dsn)
        distribute(dsn)
        return
    from alembic import command
    from alembic.util.exc import CommandError

    _before_steps(dsn, found, revision, location)
    with _alembic(dsn, location) as (cfg, _):
        cfg.attributes["commit_each_revision"] = True
        try:
            command.upgrade(cfg, revision)
        except CommandError as exc:
            raise ValueError(f"revision: {exc}") from None
    distribute(dsn)


def distribute(dsn: str) -> bool:
    """On a database with the citus extension, lay the schema out across the cluster
    (pgqueue/sql/citus.sql: tables by stream, settings as reference tables, transitions
    distributed on their stream, id sequences on every node); idempotent. False, and nothing
    done, on a database without Citus."""
    with connection.connect(dsn, autocommit=True) as conn:
        if not queries.scalar(conn, "citus_installed"):
            return False
        with conn.transaction():
            queries.fetch(conn, "citus_tables")
            queries.run_script(conn, "SET LOCAL citus.enable_unsafe_triggers = on")
            for statement in queries.trigger_statements():
                queries.run_script(conn, statement)
            queries.fetch(conn, "citus_functions")
        failed = [f"node {row['nodeid']}: {row['result']}"
                  for row in queries.fetch(conn, "citus_node_sequences") if not row["success"]]
    if failed:
        raise SchemaError("making the id sequences of the Citus nodes failed: " + "; ".join(failed))
    return True


def _before_steps(dsn: str, found: str | None, revision: str, location: Path | None) -> None:
    """Run the before-steps of the revisions between `found` and `revision`, oldest first, each
    statement committed on its own (pgqueue_migrations.revision.Revision.before): they prepare
    while the queue runs what the upgrade's transaction would otherwise do under its locks."""
    from alembic.script import ScriptDirectory
    from alembic.util.exc import CommandError

    script = ScriptDirectory.from_config(_config(location))
    try:
        pending = list(script.iterate_revisions(revision, found))
    except CommandError as exc:
        raise ValueError(f"revision: {exc}") from None
    steps = [spec for rev in reversed(pending)
             if (spec := getattr(rev.module, "REVISION", None)) is not None]
    if not steps:
        return
    with connection.connect(dsn, autocommit=True) as conn:
        _unbounded(conn)
        for spec in steps:
            spec.before(conn)


def upgrade_by_revisions(dsn: str, revision: str = "head") -> None:
    """Migrate up through every revision, even on an empty database (what an existing
    database goes through; the catalog test compares it with a fresh install)."""
    from alembic import command

    _before_steps(dsn, current(dsn), revision, None)
    with _alembic(dsn) as (cfg, _):
        cfg.attributes["commit_each_revision"] = True
        command.upgrade(cfg, revision)


def downgrade(dsn: str, revision: str, *, location: Path | None = None) -> None:
    """Migrate the database down to `revision` ("base" removes every pgqueue object)."""
    from alembic import command
    from alembic.util.exc import CommandError

    with _alembic(dsn, location) as (cfg, _):
        try:
            command.downgrade(cfg, revision)
        except CommandError as exc:
            raise ValueError(f"revision: {exc}") from None


def migrate(dsn: str) -> None:
    """Bring the database's pgqueue schema up to date (idempotent)."""
    upgrade(dsn, "head")


def catalog(dsn: str) -> dict[str, str]:
    """Every object of the database's pgqueue schema, by name, with its full definition
    (columns with types, defaults and nullability; constraints; indexes with predicates;
    functions with signatures, volatility, settings and bodies; triggers and their enable mode;
    views; sequences; publications; grants; comments): two databases hold the same schema
    exactly when their catalogs are equal."""
    with connection.connect(dsn) as conn:
        return {row["object"]: row["definition"] or "" for row in
                queries.fetch(conn, "schema_catalog")}


def catalog_diff(a: dict[str, str], b: dict[str, str], *, names: tuple[str, str] = ("a", "b")
                 ) -> list[str]:
    """What differs between two catalogs, one readable entry per object (empty when equal)."""
    import difflib

    problems = []
    for key in sorted(a.keys() | b.keys()):
        if key not in b:
            problems.append(f"{key}: only in {names[0]}")
        elif key not in a:
            problems.append(f"{key}: only in {names[1]}")
        elif a[key] != b[key]:
            diff = difflib.unified_diff(a[key].splitlines(), b[key].splitlines(), names[0],
                                        names[1], lineterm="", n=1)
            problems.append(f"{key}: differs\n" + "\n".join(diff))
    return problems
