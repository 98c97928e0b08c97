"""Schema migrations through alembic, for programs (`pgqueue.migrate`) and the CLI.

The revisions ship inside the wheel (package `pgqueue_migrations`, the repository's
`migrations/` folder); each runs a plain .sql file.
"""
from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy import create_engine, pool

from pgqueue import connection
from pgqueue.errors import SchemaTooNew


def migrations_dir() -> Path:
    """Where the alembic environment is: the installed package, or the source tree."""
    spec = importlib.util.find_spec("pgqueue_migrations")
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return Path(__file__).resolve().parent.parent / "migrations"


@contextmanager
def _alembic(dsn: str) -> Iterator[Config]:
    def creator() -> Any:
        return connection.connect(dsn, autocommit=False)

    engine = create_engine("postgresql+psycopg://", creator=creator, poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            cfg = Config()
            cfg.set_main_option("script_location", str(migrations_dir()))
            cfg.attributes["connection"] = conn
            yield cfg
            conn.commit()
    finally:
        engine.dispose()


def head() -> str:
    """The newest revision this library ships."""
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    rev = ScriptDirectory.from_config(cfg).get_current_head()
    assert rev is not None
    return rev


def current(dsn: str) -> str | None:
    """The database's revision, or None when it has no pgqueue schema."""
    def creator() -> Any:
        return connection.connect(dsn, autocommit=False)

    engine = create_engine("postgresql+psycopg://", creator=creator, poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(
                conn, opts={"version_table": "alembic_version", "version_table_schema": "pgqueue"}
            )
            return ctx.get_current_revision()
    finally:
        engine.dispose()


def upgrade(dsn: str, revision: str = "head") -> None:
    """Migrate the database up to `revision` (default: this library's newest)."""
    found = current(dsn)
    if found is not None and found.isdigit() and int(found) > int(head()):
        raise SchemaTooNew(
            f"the database's pgqueue schema is revision {found}, newer than this library's "
            f"{head()}; upgrade the pgqueue package"
        )
    with _alembic(dsn) as cfg:
        try:
            command.upgrade(cfg, revision)
        except CommandError as exc:
            raise ValueError(f"revision: {exc}") from None


def downgrade(dsn: str, revision: str) -> None:
    """Migrate the database down to `revision` ("base" removes every pgqueue object)."""
    with _alembic(dsn) as cfg:
        try:
            command.downgrade(cfg, revision)
        except CommandError as exc:
            raise ValueError(f"revision: {exc}") from None


def migrate(dsn: str) -> None:
    """Bring the database's pgqueue schema up to date (idempotent)."""
    upgrade(dsn, "head")
