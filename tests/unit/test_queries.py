"""The named-query catalog: every stage file parses, names are unique, and every query the
code asks for exists."""
from __future__ import annotations

import re
from pathlib import Path

from pgqueue.db import queries, translate

PKG = Path(queries.__file__).resolve().parent.parent


def test_catalog_loads_every_stage() -> None:
    stages = {q.stage for q in queries.catalog().values()}
    assert {"enqueue", "lease", "settle", "reclaim", "deadletter", "oplog", "observe",
            "schema"} <= stages


def test_every_query_named_in_code_exists() -> None:
    used: set[str] = set()
    for path in PKG.rglob("*.py"):
        used |= set(re.findall(
            r'(?:queries|run)\.(?:fetch|fetch_shaped|fetch_one|fetch_each|scalar)\(\s*\w+,\s*"([a-z_]+)"',
            path.read_text()))
    assert used, "found no query uses"
    missing = used - set(queries.catalog())
    assert not missing, missing


def test_no_module_but_queries_and_run_executes_sql() -> None:
    """db/queries.py (DDL helpers, scripts) and db/run.py (named queries; generated from its
    async source db/run_async.py) execute SQL; no other module does, async sources included."""
    allowed = {"db/queries.py", "db/run.py", "db/run_async.py"}
    offenders = [str(p.relative_to(PKG)) for p in PKG.rglob("*.py")
                 if str(p.relative_to(PKG)) not in allowed
                 and re.search(r"\.execute\(|\.cursor\(", p.read_text())]
    assert offenders == []


_CODE = re.compile(r"^CREATE (?:OR REPLACE )?(?:FUNCTION|VIEW|TRIGGER)\b", re.MULTILINE)
# (a trigger's `ALTER TABLE t ENABLE ALWAYS TRIGGER name` belongs to the trigger: code)
_STATE = re.compile(r"^(?:CREATE|ALTER|DROP) (?:TABLE|(?:UNIQUE )?INDEX|SEQUENCE|SCHEMA)\b"
                    r"(?! [\w.]+ ENABLE ALWAYS TRIGGER )", re.MULTILINE)


def test_every_schema_object_stands_in_its_section_once() -> None:
    """Tables in the tables sections, functions and views (all CREATE OR REPLACE, so a
    revision can reload them) in the functions sections, each defined in one place only."""
    defined: dict[str, str] = {}
    for part in queries.schema_parts():
        assert not _CODE.search(part.tables), f"{part.stage}.sql: code among its tables"
        assert not _STATE.search(part.functions), f"{part.stage}.sql: a table among its functions"
        assert not re.search(r"^CREATE (FUNCTION|VIEW)\b", part.functions, re.MULTILINE), (
            f"{part.stage}.sql: a function or view without OR REPLACE cannot be reloaded")
        for name in re.findall(r"^CREATE (?:OR REPLACE )?(?:FUNCTION|VIEW|TABLE) (pgqueue\.\w+)",
                               part.tables + part.functions, re.MULTILINE):
            assert name not in defined, f"{name} defined in {defined[name]} and {part.stage}"
            defined[name] = part.stage
    assert "pgqueue.lease" in defined and defined["pgqueue.lease"] == "lease"


def test_no_ddl_after_the_queries_of_a_stage() -> None:
    for path in sorted(PKG.joinpath("sql").glob("*.sql")):
        text = path.read_text()
        first = re.search(r"^-- name:", text, re.MULTILINE)
        if first:
            assert not _CODE.search(text[first.start():]), f"{path.name}: DDL among the queries"


def test_revisions_never_define_a_function() -> None:
    """A revision's SQL changes tables only; its code comes from the current files or the
    generated frozen copy of an earlier revision, never from a body typed again."""
    versions = PKG.parent / "migrations" / "versions"
    files = sorted(versions.glob("*.sql"))
    assert files
    for path in files:
        assert not _CODE.search(path.read_text()), f"{path.name} defines code"


def test_every_granted_function_is_defined_and_every_role_is_known() -> None:
    """access.sql's grants name functions the stage files define, and only the four roles;
    a refused call names the lowest of them that may make it."""
    defined = {name.removeprefix("pgqueue.") for part in queries.schema_parts()
               for name in re.findall(r"^CREATE OR REPLACE FUNCTION (pgqueue\.\w+)\(",
                                      part.functions, re.MULTILINE)}
    granted = queries.granted()
    functions = {name for kind, name in granted if kind == "function"}
    assert functions and functions <= defined, functions - defined
    assert set(granted.values()) <= set(queries.ROLES)
    assert granted[("function", "enqueue")] == "pgqueue_producer"
    assert granted[("function", "lease")] == "pgqueue_worker"
    assert granted[("function", "cancel")] == "pgqueue_operator"
    assert granted[("table", "*")] == granted[("schema", "pgqueue")] == "pgqueue_reader"


def test_a_refused_call_names_the_role_it_needs() -> None:
    denied = translate._denied("permission denied for function lease", "web")
    assert denied.role == "pgqueue_worker"
    assert str(denied) == (
        "the role web may not call pgqueue.lease: that needs the pgqueue role pgqueue_worker "
        "(pgqueue_operator includes it); an administrator grants it: pgqueue db grant "
        "pgqueue_worker --to web (permission denied for function lease)")
    helper = translate._denied("permission denied for function apply_op", "web")
    assert helper.role is None and "only the schema owner may" in str(helper)
    ours = translate._denied("pgqueue.now is set to '2100-01-01': only the owner ...", None)
    assert ours.role is None and str(ours).startswith("pgqueue.now is set")


def test_a_code_reload_runs_the_grants_after_every_definition() -> None:
    """migrations/revision.py drops the functions a revision's code does not define before it
    runs that code's grants (a grant rewrites every function's catalog row, which reads as
    "defined"): the grants must be the code's last part, and define nothing."""
    from pgqueue_migrations.revision import GRANTS_AT

    code = queries.code_sql()
    assert queries.SCHEMA_STAGES[-1] == "access"
    assert code.count(GRANTS_AT) == 1
    grants = code[code.index(GRANTS_AT):]
    assert "GRANT EXECUTE" in grants
    assert "CREATE OR REPLACE" not in grants.upper() and "CREATE FUNCTION" not in grants.upper()
