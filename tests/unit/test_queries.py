"""The named-query catalog: every stage file parses, names are unique, and every query the
code asks for exists."""
from __future__ import annotations

import re
from pathlib import Path

from pgqueue import queries

PKG = Path(queries.__file__).resolve().parent


def test_catalog_loads_every_stage() -> None:
    stages = {q.stage for q in queries.catalog().values()}
    assert {"enqueue", "lease", "settle", "reclaim", "deadletter", "oplog", "inspect", "meta"} <= stages


def test_every_query_named_in_code_exists() -> None:
    used: set[str] = set()
    for path in PKG.glob("*.py"):
        used |= set(re.findall(r'queries\.(?:fetch|fetch_one|scalar)\(\s*\w+,\s*"([a-z_]+)"',
                               path.read_text()))
    assert used, "found no query uses"
    missing = used - set(queries.catalog())
    assert not missing, missing


def test_no_module_but_queries_executes_sql() -> None:
    offenders = [p.name for p in PKG.glob("*.py")
                 if p.name != "queries.py" and re.search(r"\.execute\(|\.cursor\(", p.read_text())]
    assert offenders == []
