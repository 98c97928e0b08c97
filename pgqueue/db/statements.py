"""The reader of pgqueue/sql/<stage>.sql: named queries, and the schema sections in install order.

Each stage file holds, in this order, the current schema objects of that lifecycle stage and
the runtime queries that call them:

    -- schema: tables ------    tables, indexes, sequences (state: changed by revision deltas)
    CREATE TABLE ...
    -- schema: functions ---    functions and views (code: CREATE OR REPLACE, reloaded whole)
    CREATE OR REPLACE FUNCTION pgqueue.lease(...) ...
    -- name: lease_jobs         the named runtime queries
    -- Lease up to %(limit)s jobs of a stream.
    SELECT ...
    -- fragment: job_preview    a piece of SQL several queries share (a projection, a
    id, stream, ...              subquery), written once; a query names it {{job_preview}}

Query and fragment names are unique across files; a fragment may name another. Pure (no I/O
but reading the package's files): run.py executes what this module reads, queries.py adds
the few statements built with psycopg.sql.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

_NAME = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
#: A named query or a fragment: what follows, up to the next one, is its text.
_ENTRY = re.compile(r"^--\s*(name|fragment):\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_USE = re.compile(r"\{\{([a-z_][a-z0-9_]*)\}\}")
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
    """Every named query of every pgqueue/sql/*.sql file, by name, its fragments filled in."""
    queries: dict[str, tuple[str, str]] = {}  # name -> (stage, text)
    fragments: dict[str, tuple[str, str]] = {}
    for entry in sorted(resources.files("pgqueue.sql").iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        stage = entry.name[: -len(".sql")]
        parts = _ENTRY.split(entry.read_text(encoding="utf-8"))
        for what, name, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
            found = queries if what == "name" else fragments
            if name in found:
                raise RuntimeError(f"{what} {name!r} is defined twice ({found[name][0]}, {stage})")
            found[name] = (stage, body)
    return {name: Query(name=name, stage=stage, sql=fill(body, fragments, name).strip().rstrip(";"),
                        prepare=_PER_CALL.search(body) is None)
            for name, (stage, body) in queries.items()}


def fill(text: str, fragments: Mapping[str, tuple[str, str]], where: str,
         seen: tuple[str, ...] = ()) -> str:
    """`text` with each {{fragment}} replaced by that fragment's SQL (without its comment
    lines), itself filled; an unknown or circular fragment names the query that used it."""
    def one(found: re.Match[str]) -> str:
        name = found.group(1)
        if name not in fragments:
            raise RuntimeError(f"query {where!r} uses {{{{{name}}}}}, which no file defines")
        if name in seen:
            raise RuntimeError(f"fragment {name!r} includes itself ({' -> '.join(seen)})")
        body = "\n".join(line for line in fragments[name][1].strip().splitlines()
                         if not line.lstrip().startswith("--"))
        return fill(body, fragments, where, (*seen, name))

    return _USE.sub(one, text)


@dataclass(frozen=True)
class SchemaPart:
    """The current schema objects of one stage file: its tables and its functions."""

    stage: str
    tables: str
    functions: str


def stage_text(stage: str) -> str:
    return resources.files("pgqueue.sql").joinpath(f"{stage}.sql").read_text(encoding="utf-8")


@cache
def schema_parts() -> tuple[SchemaPart, ...]:
    """The schema sections of every stage file, in install order (SCHEMA_STAGES)."""
    parts = []
    for stage in SCHEMA_STAGES:
        text = stage_text(stage)
        first_query = _ENTRY.search(text)
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


_TRIGGER = re.compile(r"^(?:CREATE OR REPLACE TRIGGER|ALTER TABLE \S+ ENABLE ALWAYS TRIGGER)\b[^;]*;",
                      re.MULTILINE)


def trigger_statements(code: str | None = None) -> tuple[str, ...]:
    """The triggers and their enable modes, a statement each, as `code` (by default the
    current code) defines them: what the Citus layout makes again once it has distributed the
    tables (which Citus does to no table that has triggers), and what a revision's code load
    runs one by one there (Citus sends a trigger's statement on to the nodes as the text it
    came in, which must then hold that statement alone)."""
    return tuple(_TRIGGER.findall(code_sql() if code is None else code))


def without_triggers(code: str) -> str:
    """`code` without its trigger statements (trigger_statements gives them)."""
    return _TRIGGER.sub("", code)


def get(name: str) -> Query:
    """The named query; KeyError names what is missing."""
    try:
        return catalog()[name]
    except KeyError:
        raise KeyError(f"no query named {name!r}") from None
