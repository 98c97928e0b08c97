"""The reader of pgqueue/sql/<stage>.sql, the errors a statement raises, and SQL's entry points.

Each stage file holds, in this order, the current schema objects of that lifecycle stage and
the runtime queries that call them:

    -- schema: tables ------    tables, indexes, sequences (state: changed by revision deltas)
    CREATE TABLE ...
    -- schema: functions ---    functions and views (code: CREATE OR REPLACE, reloaded whole)
    CREATE OR REPLACE FUNCTION pgqueue.lease(...) ...
    -- name: lease_jobs         the named runtime queries
    -- Lease up to %(limit)s jobs of a stream.
    SELECT ...

Query names are unique across files. Every named query runs through pgqueue/run.py (generated
from its async source pgqueue/aio/run.py, which AsyncQueue uses), reached from here by
`fetch`/`scalar`...; the DDL helpers below run the few statements built with psycopg.sql.
Driver errors become pgqueue's errors (`translate`), so no other module imports psycopg's
cursor API (and `pgqueue sql show NAME` can print any statement for psql).
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql as pg_sql

from pgqueue import run
from pgqueue.errors import (
    ConnectionFailed,
    Contention,
    DedupConflict,
    InvalidState,
    JobNotFound,
    NotLeader,
    PermissionDenied,
    PgQueueError,
    SchemaMissing,
)

_NAME = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_TABLES = re.compile(r"^-- schema: tables\b.*$", re.MULTILINE)
_FUNCTIONS = re.compile(r"^-- schema: functions\b.*$", re.MULTILINE)
_PER_CALL = re.compile(r"^--\s*planned per call\b", re.MULTILINE)
_COMMENT = re.compile(r"--[^\n]*")
_CALLS = re.compile(r"\bpgqueue\.([a-z_][a-z0-9_]*)\s*\(")
_WRITES = re.compile(r"\b(INSERT|UPDATE|DELETE|TRUNCATE|LOCK|setval|FOR (UPDATE|SHARE))\b")
#: The order a fresh database installs the stages in: every stage's tables first, then every
#: stage's functions (SQL-language bodies are checked at creation, so helpers come first).
SCHEMA_STAGES = ("core", "observe", "schema", "oplog", "replica", "steps", "schedule", "worker",
                 "enqueue", "lease", "settle", "reclaim", "deadletter", "operate", "maintain",
                 "access")  # last: its grants name the functions the others define
_HOLDER = re.compile(r"holder=(\d+)")
#: SQLSTATEs meaning the server went away (shutdown, crash, terminated backend).
_CONNECTION_LOST = frozenset({"57P01", "57P02", "57P03", "57P05"})

Conn = psycopg.Connection[Any]
R = TypeVar("R")
Params = Mapping[str, Any] | None


@dataclass(frozen=True)
class Query:
    """A named statement from a stage's .sql file. `prepare` is False for a statement marked
    `-- planned per call`: one whose optional filters decide the index, so a plan cached for
    one set of arguments (psycopg prepares a statement after 5 runs) would be wrong for others."""

    name: str
    stage: str
    sql: str
    prepare: bool = True

    @property
    def functions(self) -> tuple[str, ...]:
        """The pgqueue functions the statement calls (what a refused call needs the rights to)."""
        return tuple(dict.fromkeys(_CALLS.findall(_COMMENT.sub("", self.sql))))

    @property
    def writes(self) -> bool:
        """Whether the statement writes or locks a table itself (not through a function):
        only the schema owner's statements do (migrations, replica tasks)."""
        return _WRITES.search(_COMMENT.sub("", self.sql)) is not None


@cache
def catalog() -> dict[str, Query]:
    """Every named query of every pgqueue/sql/*.sql file, by name."""
    found: dict[str, Query] = {}
    for entry in sorted(resources.files("pgqueue.sql").iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        stage = entry.name[: -len(".sql")]
        text = entry.read_text(encoding="utf-8")
        parts = _NAME.split(text)
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in found:
                raise RuntimeError(f"query {name!r} is defined twice ({found[name].stage}, {stage})")
            found[name] = Query(name=name, stage=stage, sql=body.strip().rstrip(";"),
                                prepare=_PER_CALL.search(body) is None)
    return found


@dataclass(frozen=True)
class SchemaPart:
    """The current schema objects of one stage file: its tables and its functions."""

    stage: str
    tables: str
    functions: str


def _stage_text(stage: str) -> str:
    return resources.files("pgqueue.sql").joinpath(f"{stage}.sql").read_text(encoding="utf-8")


@cache
def schema_parts() -> tuple[SchemaPart, ...]:
    """The schema sections of every stage file, in install order (SCHEMA_STAGES)."""
    parts = []
    for stage in SCHEMA_STAGES:
        text = _stage_text(stage)
        first_query = _NAME.search(text)
        ddl = text[: first_query.start()] if first_query else text
        tables_at, functions_at = _TABLES.search(ddl), _FUNCTIONS.search(ddl)
        tables = ddl[tables_at.end(): functions_at.start() if functions_at else len(ddl)] \
            if tables_at else ""
        functions = ddl[functions_at.end():] if functions_at else ""
        if not tables.strip() and not functions.strip():
            raise RuntimeError(f"pgqueue/sql/{stage}.sql has no '-- schema:' section")
        parts.append(SchemaPart(stage, tables.strip("\n") + "\n", functions.strip("\n") + "\n"))
    return tuple(parts)


def install_sql() -> str:
    """The whole current schema as one script: every stage's tables, then every function."""
    tables = [f"-- {p.stage}.sql: tables\n{p.tables}" for p in schema_parts() if p.tables.strip()]
    code = [f"-- {p.stage}.sql: functions\n{p.functions}" for p in schema_parts()
            if p.functions.strip()]
    return "\n".join(tables + code)


def code_sql() -> str:
    """The current functions and views of every stage (what a revision's code reload runs)."""
    return "\n".join(f"-- {p.stage}.sql: functions\n{p.functions}" for p in schema_parts()
                     if p.functions.strip())


def run_script(conn: Conn, script: str) -> None:
    """Execute a script of several statements (schema files: plpgsql bodies, no parameters)."""
    try:
        conn.execute(script.encode("utf-8"))
    except psycopg.Error as exc:
        raise translate(exc) from exc


def get(name: str) -> Query:
    """The named query; KeyError names what is missing."""
    try:
        return catalog()[name]
    except KeyError:
        raise KeyError(f"no query named {name!r}") from None


def fetch(conn: Conn, name: str, params: Params = None) -> list[dict[str, Any]]:
    """Run a named query and return its rows as dicts (pgqueue/run.py executes it)."""
    return run.fetch(conn, name, params)


def fetch_tuples(conn: Conn, name: str, params: Params = None) -> list[tuple[Any, ...]]:
    """Run a named query and return its rows as tuples, in the query's column order."""
    return run.fetch_tuples(conn, name, params)


def fetch_one(conn: Conn, name: str, params: Params = None) -> dict[str, Any] | None:
    """Run a named query and return its first row, or None."""
    return run.fetch_one(conn, name, params)


def scalar(conn: Conn, name: str, params: Params = None) -> Any:
    """Run a named query and return the first column of its first row (None when no row)."""
    return run.scalar(conn, name, params)


def create_database(conn: Conn, name: str, *, template: str | None = None,
                    if_missing: bool = False) -> None:
    """CREATE DATABASE name [TEMPLATE template]; names go through psycopg.sql.Identifier."""
    if if_missing and scalar(conn, "database_exists", {"name": name}):
        return
    stmt = pg_sql.SQL("CREATE DATABASE {}").format(pg_sql.Identifier(name))
    if template is not None:
        stmt = pg_sql.SQL("{} TEMPLATE {}").format(stmt, pg_sql.Identifier(template))
    try:
        conn.execute(stmt)
    except psycopg.Error as exc:
        raise translate(exc) from exc


def drop_database(conn: Conn, name: str) -> None:
    """DROP DATABASE IF EXISTS name WITH (FORCE)."""
    stmt = pg_sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(pg_sql.Identifier(name))
    try:
        conn.execute(stmt)
    except psycopg.Error as exc:
        raise translate(exc) from exc


def create_subscription(conn: Conn, name: str, conninfo: str, publication: str) -> None:
    """CREATE SUBSCRIPTION name (slot of the same name, created now, not yet enabled, no
    initial copy: the caller seeds the replica in op-log order)."""
    stmt = pg_sql.SQL(
        "CREATE SUBSCRIPTION {} CONNECTION {} PUBLICATION {} WITH "
        "(copy_data = false, enabled = false, create_slot = true, slot_name = {})"
    ).format(pg_sql.Identifier(name), pg_sql.Literal(conninfo), pg_sql.Identifier(publication),
             pg_sql.Literal(name))
    _ddl(conn, stmt)


def alter_subscription(conn: Conn, name: str, action: str) -> None:
    """ALTER SUBSCRIPTION name ENABLE | DISABLE | SET (slot_name = NONE) ("detach")."""
    clauses = {"enable": "ENABLE", "disable": "DISABLE", "detach": "SET (slot_name = NONE)"}
    stmt = pg_sql.SQL("ALTER SUBSCRIPTION {} " + clauses[action]).format(
        pg_sql.Identifier(name))
    _ddl(conn, stmt)


def drop_subscription(conn: Conn, name: str) -> None:
    """DROP SUBSCRIPTION IF EXISTS name."""
    _ddl(conn, pg_sql.SQL("DROP SUBSCRIPTION IF EXISTS {}").format(pg_sql.Identifier(name)))


def _ddl(conn: Conn, stmt: pg_sql.Composed) -> None:
    try:
        conn.execute(stmt)
    except psycopg.Error as exc:
        raise translate(exc) from exc


def vacuum(conn: Conn, table: str) -> None:
    """VACUUM (ANALYZE) pgqueue.<table> (needs an autocommit connection)."""
    _ddl(conn, pg_sql.SQL("VACUUM (ANALYZE) {}").format(pg_sql.Identifier("pgqueue", table)))


def grant_role(conn: Conn, role: str, login: str) -> None:
    """GRANT role TO login (both through psycopg.sql.Identifier; the caller checks `role`)."""
    _ddl(conn, grant_role_sql(role, login))


def grant_role_sql(role: str, login: str) -> pg_sql.Composed:
    """The statement `grant_role` runs."""
    return pg_sql.SQL("GRANT {} TO {}").format(pg_sql.Identifier(role), pg_sql.Identifier(login))


#: The pgqueue roles, each including the ones before it (pgqueue/sql/access.sql).
ROLES = ("pgqueue_reader", "pgqueue_producer", "pgqueue_worker", "pgqueue_operator")
_GRANT = re.compile(r"^GRANT (EXECUTE ON FUNCTION|SELECT ON ALL TABLES IN SCHEMA|USAGE ON SCHEMA)"
                    r"\s+(.*?)\s+TO (pgqueue_[a-z]+);", re.MULTILINE | re.DOTALL)
_DENIED = re.compile(r"permission denied for (function|table|view|schema|sequence|database) (\S+)")


@cache
def granted() -> dict[tuple[str, str], str]:
    """The lowest pgqueue role that may use each object, read from access.sql's grants:
    {("function", name): role, ("table", "*"): role, ("schema", "pgqueue"): role}."""
    found: dict[tuple[str, str], str] = {}
    for what, objects, role in _GRANT.findall(_stage_text("access")):
        if what == "EXECUTE ON FUNCTION":
            for name in objects.split(","):
                found.setdefault(("function", name.strip().removeprefix("pgqueue.")), role)
        elif what.startswith("SELECT"):
            found.setdefault(("table", "*"), role)
        else:
            found.setdefault(("schema", objects.strip()), role)
    return found


def _denied(message: str, user: str | None, query: Query | None = None,
            hint: str | None = None) -> PermissionDenied:
    """A refused call (42501), saying which pgqueue role it needs and how to grant it, with
    Postgres's own words last. `query`: the named statement refused (a login without the
    schema's use is told the role that statement needs, not only a reader's)."""
    found = _DENIED.search(message)
    if found is None:  # one of ours (a pinned clock, the roles missing): its words say why
        return PermissionDenied(f"{message} ({hint})" if hint else message)
    kind, name = found.groups()
    who = f"the role {user}" if user else "the connected role"
    if kind == "database":
        return PermissionDenied(
            f"{who} may not create objects in the database {name}: only the pgqueue schema's "
            f"owner (the role that ran `pgqueue db upgrade` first) migrates it ({message})")
    if kind == "function":
        role = granted().get(("function", name))
    elif query is not None and query.writes:
        role = None  # a statement of the owner's own (a replica task, a migration)
    elif kind in ("table", "view", "schema"):
        # a reader's right; more when the statement calls a function a higher role has
        needs = [granted().get(("function", f)) for f in (query.functions if query else ())]
        roles: list[str | None] = [r for r in needs if r is not None] or [
            granted().get(("table", "*"))]
        role = max((r for r in roles if r is not None), key=ROLES.index, default=None)
    else:
        role = None
    what = {"function": f"call pgqueue.{name}", "table": f"use the table pgqueue.{name}",
            "view": f"read the view pgqueue.{name}", "schema": f"use the schema {name}",
            "sequence": f"use the sequence pgqueue.{name}"}[kind]
    if role is None:
        why = ("no pgqueue role writes a table: state changes through the transition functions "
               "(pgqueue.enqueue, pgqueue.cancel, ...), and the replica tasks and migrations "
               "are the schema owner's" if kind in ("table", "view") else
               "only the schema owner may")
        return PermissionDenied(f"{who} may not {what}: {why} ({message})", None)
    wider = ROLES[ROLES.index(role) + 1:]
    includes = "" if not wider else (
        f" ({wider[0]} includes it)" if len(wider) == 1 else
        f" ({', '.join(wider[:-1])} and {wider[-1]} include it)")
    return PermissionDenied(
        f"{who} may not {what}: that needs the pgqueue role {role}{includes}; an "
        f"administrator grants it: pgqueue db grant {role} --to {user or 'LOGIN'} ({message})",
        role)


def translate(exc: psycopg.Error, user: str | None = None, query: Query | None = None
              ) -> Exception:
    """Map a driver error to pgqueue's error classes (SQLSTATEs raised by our functions);
    `user`: the connected role, and `query` the statement, named when a call is refused."""
    state = getattr(exc.diag, "sqlstate", None) if isinstance(exc, psycopg.Error) else None
    message = (exc.diag.message_primary if exc.diag else None) or str(exc)
    if state == "42501":
        return _denied(message, user, query, exc.diag.message_hint if exc.diag else None)
    if state == "PQ404":
        return JobNotFound(message)
    if state == "PQ409":
        detail = exc.diag.message_detail or ""
        found = _HOLDER.search(detail)
        return DedupConflict(message, int(found.group(1)) if found else None)
    if state == "PQ422":
        return InvalidState(message)
    if state == "PQ401":
        return NotLeader(message)
    if state == "PQ413":  # a payload over its stream's limit: a bad argument, nothing written
        return ValueError(message)
    if state in ("40P01", "40001"):
        return Contention(message)
    if isinstance(exc, pg_errors.InvalidSchemaName | pg_errors.UndefinedTable | pg_errors.UndefinedFunction):
        return SchemaMissing(
            f"the pgqueue schema is missing or out of date ({message}); run `pgqueue db upgrade`"
        )
    lost = (state.startswith("08") or state in _CONNECTION_LOST) if state else isinstance(
        exc, psycopg.OperationalError | psycopg.InterfaceError)
    if lost:
        return ConnectionFailed(f"lost the database connection: {message}",
                                retryable=state in _CONNECTION_LOST)
    return PgQueueError(message)
