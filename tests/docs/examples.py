"""The examples of the documentation, as a reader meets them: the fenced code blocks of each
page, in order.

What a block is, by its fence:
- ```python runs as a script (with `dsn`, the page's database, defined first);
- ```python title="myapp.py" is a file the reader saves: written into the page's folder,
  for the blocks after it (`pgqueue worker --app myapp:app`);
- ```sh runs in bash, in that folder; a command ending in `&` runs in the background until
  the page ends (a worker, the dashboard), as in a second terminal. `pip install` and `make`
  lines are not run: they are checked against the project (its name and extras, the
  Makefile's targets);
- anything else (```text synopses, ```sql, ```json, output) is read, not run.
A block included from a file of the repository (`--8<--`) is that file, which the suite runs
on its own (examples/)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)(?P<attrs>[^\n`]*)$")
RUN = ("python", "sh")


@dataclass(frozen=True)
class Block:
    """One fenced block of a page."""

    page: Path
    line: int  # 1-based, of the opening fence
    lang: str
    title: str | None
    code: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def included(self) -> bool:
        return self.code.lstrip().startswith("--8<--")


def pages() -> list[Path]:
    """Every page of the site, and the README (its front page)."""
    return [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of a page, in order (indented ones too: in tabs, admonitions, lists)."""
    found: list[Block] = []
    lines = page.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent = m.group("indent")
        title = re.search(r'title="([^"]+)"', m.group("attrs"))
        body: list[str] = []
        j = i + 1
        while j < len(lines) and lines[j].strip() != "```":
            body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j])
            j += 1
        found.append(Block(page, i + 1, m.group("lang"), title.group(1) if title else None,
                           "\n".join(body) + "\n"))
        i = j + 1
    return found


def _project() -> tuple[str, set[str]]:
    """The distribution's name and extras, as installed."""
    meta = metadata.metadata("pgqueue-py")
    return meta["Name"], set(meta.get_all("Provides-Extra") or [])


def _make_targets() -> set[str]:
    return set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))


def checked_lines(code: str) -> tuple[str, list[str]]:
    """The shell code to run, without its `pip install` and `make` lines, and what is wrong
    with those lines (an unknown distribution, extra or target), if anything."""
    name, extras = _project()
    targets = _make_targets()
    keep, wrong = [], []
    for line in code.splitlines():
        command = line.split("#", 1)[0].strip()
        if command.startswith("pip install "):
            for spec in command.split()[2:]:
                spec = spec.strip("'\"")
                if spec.startswith("-") or spec in (".", "-e"):
                    continue
                m = re.fullmatch(r"([\w.-]+)(?:\[([\w,-]+)\])?", spec)
                if m and m.group(1) == ".":
                    continue
                if not m or m.group(1) != name:
                    if not spec.startswith(".["):
                        wrong.append(f"{line!r}: {spec} is not {name}")
                    continue
                for extra in (m.group(2) or "").split(","):
                    if extra and extra not in extras:
                        wrong.append(f"{line!r}: no extra {extra!r} (there are {sorted(extras)})")
            keep.append("")
        elif command.startswith("make "):
            for target in command.split()[1:]:
                if target not in targets:
                    wrong.append(f"{line!r}: the Makefile has no target {target!r}")
            keep.append("")
        else:
            keep.append(line)
    return "\n".join(keep) + "\n", wrong
