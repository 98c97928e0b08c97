"""`pgqueue db`: the schema (upgrade, downgrade, current), its install SQL, and granting the
pgqueue roles to login roles (`db grant`).

`db sql` prints the current schema's plain SQL without connecting, so a DBA can read exactly
what `db upgrade` installs into an empty database.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from pgqueue.db import access, connection, queries, schema

from . import common
from .common import EXIT_USAGE, dsn, fail, print_json, say, say_lines


@click.group()
def db() -> None:
    """Manage the pgqueue schema (alembic revisions of plain SQL)."""


@contextmanager
def _revision_errors(revision: str) -> Iterator[None]:
    """alembic refuses a revision it cannot resolve with its own CommandError; name it."""
    try:
        yield
    except Exception as exc:
        if not type(exc).__module__.startswith("alembic."):
            raise
        fail(f"revision {revision!r}: {exc}", EXIT_USAGE)


def _describe(revision: str | None) -> str:
    return revision if revision is not None else "none (no pgqueue schema)"


@db.command()
@click.argument("revision", default="head")
def upgrade(revision: str) -> None:
    """Migrate the database up to REVISION (default: head, this library's newest).

    Idempotent: upgrading a database that is already at REVISION changes nothing.
    """
    target = dsn()
    before = schema.current(target)
    with _revision_errors(revision):
        schema.upgrade(target, revision)
    after = schema.current(target)
    say(f"pgqueue schema of {connection.describe(target)}: "
        f"{_describe(before)} -> {_describe(after)}")
    for name in schema.writable_path_schemas(target):
        click.echo(f"pgqueue: warning: other roles may create objects in schema {name!r}, "
                   "which is on this role's search_path: a function planted there could run "
                   "with the schema owner's rights. Run: REVOKE CREATE ON SCHEMA "
                   f"{name} FROM PUBLIC (the default from Postgres 15 on)", err=True)


@db.command(context_settings={"ignore_unknown_options": True})  # so "-1" is a REVISION
@click.argument("revision")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
def downgrade(revision: str, yes: bool) -> None:
    """Migrate the database down to REVISION: an id, a relative step such as -1, or "base".

    REVISION is required: a downgrade drops tables and their jobs, so it is never implied.
    "base" removes every pgqueue object. Asks for confirmation unless --yes (scripts: pass
    --yes; without a terminal the prompt reads end-of-file and the command exits 1).
    """
    target = dsn()
    before = schema.current(target)
    if not yes:
        click.confirm(
            f"Downgrade the pgqueue schema of {connection.describe(target)} from "
            f"{_describe(before)} to {revision}? Dropped tables lose their jobs",
            abort=True, err=True,
        )
    with _revision_errors(revision):
        schema.downgrade(target, revision)
    after = schema.current(target)
    say(f"pgqueue schema of {connection.describe(target)}: "
        f"{_describe(before)} -> {_describe(after)}")


@db.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def current(as_json: bool) -> None:
    """Show the database's schema revision and this library's newest (head)."""
    target = dsn()
    found = schema.current(target)
    head = schema.head()
    if as_json:
        print_json({"database": connection.describe(target), "current": found, "head": head,
                    "up_to_date": found == head})
        return
    if found is None:
        say(f"current: none (no pgqueue schema); head: {head}; run `pgqueue db upgrade`")
    elif found == head:
        say(f"current: {found} (head, up to date)")
    else:
        say(f"current: {found}; head: {head}; run `pgqueue db upgrade`")


def revision_files() -> list[Path]:
    """The revisions' downgrade deltas, newest first."""
    versions = schema.migrations_dir() / "versions"
    return sorted(versions.glob("*.down.sql"), reverse=True)


@db.command("sql")
@click.option("--stage", default=None, help="Only this stage's objects (e.g. lease).")
@click.option("--down", is_flag=True,
              help="Print the revisions' downgrade deltas (newest first) instead.")
def sql_(stage: str | None, down: bool) -> None:
    """Print the install SQL of the current schema, without connecting.

    Every stage's tables, then every stage's functions and views, as `db upgrade` installs
    them into an empty database (it also stamps alembic's version table, so prefer it to
    running this through psql). The same objects stand in pgqueue/sql/<stage>.sql.
    """
    if down:
        files = revision_files()
        if not files:
            fail(f"no downgrade files in {schema.migrations_dir() / 'versions'}")
        for path in files:
            say(f"-- pgqueue revision file {path.name}")
            say_lines(path.read_text(encoding="utf-8").rstrip("\n"))
            say("")
        return
    if stage is None:
        say_lines(queries.install_sql().rstrip("\n"))
        return
    parts = {p.stage: p for p in queries.schema_parts()}
    if stage not in parts:
        fail(f"no schema stage named {stage!r}; stages: {', '.join(parts)}", EXIT_USAGE)
    part = parts[stage]
    sections = [(name, text) for name, text in (("tables", part.tables),
                                                ("functions", part.functions)) if text.strip()]
    say_lines("".join(f"-- {stage}.sql: {name}\n{text}" for name, text in sections).rstrip("\n"))


@db.command()
@click.argument("role", metavar="ROLE")
@click.option("--to", "login", required=True, metavar="LOGIN",
              help="The login role (user) to grant it to.")
@click.option("--print", "print_only", is_flag=True,
              help="Print the SQL instead of running it (no database needed).")
def grant(role: str, login: str, print_only: bool) -> None:
    """Grant the pgqueue role ROLE to the login role LOGIN.

    ROLE is pgqueue_reader, pgqueue_producer, pgqueue_worker or pgqueue_operator (or reader,
    producer, worker, operator); each includes the ones before it. Run by a role that may
    grant them: the role that ran `pgqueue db upgrade` first (it created them), a superuser,
    or one holding them WITH ADMIN OPTION.
    """
    try:
        statement = access.grant_sql(role, login)
    except (TypeError, ValueError) as exc:
        fail(str(exc), EXIT_USAGE)
    if print_only:
        say(statement)
        return
    target = dsn()
    access.grant(target, role, login)
    say(f"{statement.rstrip(';')} in {connection.describe(target)}: done (roles are the "
        f"server's: it holds in every database of it with the pgqueue schema)")


@db.command()
@click.option("--expect-connections", type=click.IntRange(min=0), default=0, show_default=True,
              metavar="N", help="Connections your pools will open besides those open now "
                                "(checked against max_connections).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def check(expect_connections: int, as_json: bool) -> None:
    """What of the server matters to the queue, one line each with a verdict (ok, warn,
    fail): version, JIT and its thresholds, statement_timeout, lock_timeout, the idle
    timeouts, default_transaction_isolation, search_path, wal_level where logical replicas
    are attached, a pooler in between, max_connections against the connections open and
    expected. Read as the connecting role sees them: run it with the workers' DSN. Exits 1
    when one fails."""
    from pgqueue.db import check as server_check

    with common.translated_errors():
        found = server_check.check(common.dsn(), expected_connections=expect_connections,
                                   pooled=common.settings().pooled,
                                   connect_timeout=common.settings().connect_timeout)
    if as_json:
        common.print_json([dataclasses.asdict(f) for f in found])
    else:
        width = max(len(f.name) for f in found)
        for f in found:
            common.say(f"{f.verdict:<4}  {f.name:<{width}}  {f.value}: {f.why}")
    if any(f.verdict == "fail" for f in found):
        raise SystemExit(common.EXIT_FAILED)

