"""Names in the repository are honest: every file path a docstring, comment, doc page or
`pyproject.toml` names exists (a module that moved leaves no stale path behind). Paths with a
placeholder (NNNN, SYSTEM) and paths of generated output (the built site, an installed
wheel's names) are not files of the tree."""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: Where names are read: the code, the tests, the docs and the project's own files.
READ = ("pgqueue", "cli", "tools", "tests", "bench", "examples", "docs", "migrations")
TOP = ("pyproject.toml", "README.md", "Makefile", "setup.py", ".ci/run")
_PATH = re.compile(r"(?<![\w./-])((?:[A-Za-z_][\w.-]*/)+[\w-]+\.(?:py|sql|md|html|toml|yml))\b")
#: Placeholders and the names of built or installed output, which are not files of the tree.
_NOT_A_FILE = re.compile(r"NNNN|SYSTEM|^site/|^pgqueue_(cli|migrations)/|^shop/|extra(_async)?\.py$")


def _files() -> list[Path]:
    found = [REPO / name for name in TOP]
    for folder in READ:
        for path in (REPO / folder).rglob("*"):
            # a frozen migration's text is history: it may name what existed then
            if (path.suffix in (".py", ".sql", ".md", ".toml") and "__pycache__" not in path.parts
                    and not (folder == "migrations" and path.suffix == ".sql")):
                found.append(path)
    return found


def _exists(path: str, where: Path) -> bool:
    return any(base.joinpath(path).exists() for base in
               (REPO, REPO / "pgqueue", where.parent, REPO / "tests", REPO / "docs", REPO / "examples"))


def test_every_path_named_in_the_tree_exists() -> None:
    stale = [f"{f.relative_to(REPO)}:{n}: {m.group(1)}"
             for f in _files()
             for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1)
             for m in _PATH.finditer(line)
             if not _NOT_A_FILE.search(m.group(1)) and not _exists(m.group(1), f)]
    assert stale == []


def test_a_stale_path_is_caught(tmp_path: Path) -> None:
    """The scan sees a path that does not exist (the test above cannot pass vacuously)."""
    gone = "aio" + "/queue.py"  # spelled apart, or the scan of this file would find it
    line = f"the mixin of AsyncQueue ({gone}) and its pool (pgqueue/db/pool.py)"
    named = [m.group(1) for m in _PATH.finditer(line)]
    assert named == [gone, "pgqueue/db/pool.py"]
    assert [p for p in named if not _exists(p, tmp_path / "x.py")] == [gone]
