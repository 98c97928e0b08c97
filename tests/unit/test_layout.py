"""The package's layout holds: one folder per subsystem, each importing only the subsystems
its `__init__.py` names ("May import: ..."), and no circle of imports between modules or
between subsystems. Every import counts, those inside functions and under TYPE_CHECKING too:
a circle a lazy import hides is still a circle for a reader."""
from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import pgqueue

PKG = Path(pgqueue.__file__).resolve().parent
#: Modules at the package's top level that are not the shared core: the public API (which
#: gathers every subsystem's names), `python -m pgqueue` and the compatibility path of a
#: documented import.
ENTRY = {"pgqueue": "api", "pgqueue.__main__": "api", "pgqueue.logs": "api"}
_MAY = re.compile(r"^May import: (.*)\.$", re.MULTILINE)


def modules() -> dict[str, Path]:
    """Every module of the package by dotted name."""
    found = {}
    for path in PKG.rglob("*.py"):
        parts = path.relative_to(PKG.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def subsystem(name: str) -> str:
    """core for the shared modules at the top level, else the folder under pgqueue/."""
    if name in ENTRY:
        return ENTRY[name]
    parts = name.split(".")
    return parts[1] if len(parts) > 2 or (PKG / parts[1]).is_dir() else "core"


def imports(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """The pgqueue modules `name` imports, wherever the import stands."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            targets = [f"{base}.{a.name}" for a in node.names]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                yield target


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: set(imports(name, path, known)) for name, path in known.items()}


def allowed() -> dict[str, set[str]]:
    """Each subsystem's "May import:" line, read from its folder's __init__.py."""
    rules = {"core": {"core"}}
    for init in PKG.glob("*/__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        found = _MAY.search(doc)
        assert found, f"{init.relative_to(PKG.parent)} does not say what it may import"
        named = {s.strip() for s in found.group(1).split(",")} - {"nothing"}
        rules[init.parent.name] = named | {init.parent.name}
    return rules


def cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One circle of `edges`, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_every_folder_says_what_it_does_and_may_import_in_two_lines() -> None:
    for init in sorted(PKG.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        lines = doc.split("\n\n")[0].splitlines()
        assert len(lines) == 2 and _MAY.match(lines[1]), (
            f"{init.relative_to(PKG.parent)}: its docstring opens with what it does and "
            f"'May import: ...' on two lines, got {lines}")
    rules = allowed()
    for folder in rules:
        assert rules[folder] <= {*rules, "nothing"}, f"{folder} names an unknown subsystem"


def test_each_subsystem_imports_only_what_it_may() -> None:
    rules = allowed()
    wrong = []
    for name, targets in graph().items():
        mine = subsystem(name)
        if mine == "api":
            continue
        assert mine in rules, f"{name}: subsystem {mine} has no rule"
        wrong += [f"{name} -> {t}" for t in sorted(targets) if subsystem(t) not in rules[mine]]
    assert wrong == []


def test_the_core_stands_alone() -> None:
    edges = graph()
    assert {subsystem(t) for n, ts in edges.items() if subsystem(n) == "core" for t in ts} <= {"core"}


def test_no_circle_of_imports_between_modules() -> None:
    assert cycle(graph()) is None


def test_no_circle_between_subsystems() -> None:
    edges: dict[str, set[str]] = {}
    for name, targets in graph().items():
        if subsystem(name) == "api":
            continue
        edges.setdefault(subsystem(name), set()).update(
            subsystem(t) for t in targets if subsystem(t) != subsystem(name))
    assert cycle(edges) is None


def test_the_client_never_imports_the_worker_runtime() -> None:
    edges = graph()
    client = [n for n in edges if subsystem(n) == "client"]
    assert client
    assert [f"{n} -> {t}" for n in client for t in edges[n] if subsystem(t) == "runtime"] == []


@pytest.mark.parametrize("edges, found", [
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
    ({"a": {"b"}, "b": {"c"}, "c": set()}, None),
])
def test_the_circle_finder_finds_circles(edges: dict[str, set[str]], found: list[str] | None) -> None:
    assert cycle(edges) == found


def test_a_forbidden_import_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A client module importing the worker runtime fails the rule (a copy of the package)."""
    import shutil

    copy = tmp_path / "pgqueue"
    shutil.copytree(PKG, copy, ignore=shutil.ignore_patterns("__pycache__", "static", "templates"))
    bad = copy / "client" / "enqueue_async.py"
    bad.write_text(bad.read_text(encoding="utf-8") + "\nfrom pgqueue.runtime import app\n",
                   encoding="utf-8")
    monkeypatch.setattr(__import__(__name__, fromlist=["PKG"]), "PKG", copy)
    with pytest.raises(AssertionError, match=r"pgqueue\.client\.enqueue_async -> pgqueue\.runtime\.app"):
        test_each_subsystem_imports_only_what_it_may()
