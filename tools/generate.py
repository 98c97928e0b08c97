"""Generate pgqueue's sync I/O modules from their async sources, as psycopg does.

    python tools/generate.py          # rewrite each pgqueue/<subsystem>/X.py from X_async.py
    python tools/generate.py --check  # exit 1 naming each stale module (the test suite)

Each pair sits in its subsystem's folder: `X_async.py` (async, edited by hand) beside `X.py`
(sync, generated, never edited; its first line says so and names its source). Tokens are
rewritten by `unasync` (a development dependency: it removes `async` and `await` and renames
the names below: AsyncQueue -> Queue, asyncio.Lock -> threading.Lock, ...); then every module
name ending in `_async` loses the suffix (`from pgqueue.db import run_async as run` becomes
`from pgqueue.db import run`), a line ending in `# async-only` is dropped, a comment line
`# sync-only: CODE` becomes CODE, and the header is added. Continuation lines use hanging
indents, not alignment under an opening parenthesis (removing `async ` or `await ` would leave
an aligned line out of line).
"""
from __future__ import annotations

import argparse
import difflib
import re
import subprocess
import sys
import tempfile
from pathlib import Path

#: The repository's root, the folder holding the pgqueue package (paths below are relative
#: to it). This tool lives in tools/, outside the package: it is not shipped in the wheel.
PACKAGE = Path(__file__).resolve().parent.parent


def sources(package: Path | None = None) -> tuple[str, ...]:
    """Every async source, `pgqueue/<subsystem>/X_async.py`, found by its name (so a new one
    cannot be missed), as a path relative to the folder holding the package."""
    root = PACKAGE if package is None else package
    return tuple(sorted(p.relative_to(root).as_posix()
                        for p in (root / "pgqueue").glob("*/*_async.py")))


def target(source: str) -> str:
    """The generated module of an async source: X_async.py -> X.py, in the same folder."""
    return source.removesuffix("_async.py") + ".py"


#: Names unasync renames (beyond its own: __aenter__, AsyncIterator, asynccontextmanager...).
RENAMES = {
    "AsyncConn": "Conn",
    "AsyncConnection": "Connection",
    "AsyncConnectionPool": "ConnectionPool",
    "AsyncPoolConnection": "PoolConnection",
    "AsyncQueuePool": "QueuePool",
    "AsyncRowFactory": "RowFactory",
    "AsyncQueue": "Queue",
    "AsyncSession": "Session",
    "AsyncSettler": "Settler",
    "AsyncStepContext": "StepContext",
    "AsyncQueueOperations": "QueueOperations",
    "AsyncQueueReads": "QueueReads",
    "AsyncIterator": "Iterator",
    "AsyncGenerator": "Generator",
    "AbstractAsyncContextManager": "AbstractContextManager",
    "asyncio": "threading",
}

HEADER = "# DO NOT EDIT: generated from {source} by tools/generate.py; edit that file.\n"
_SYNC_ONLY = re.compile(r"^(\s*)# sync-only: (.*)$")
#: A module name with the async suffix, and the same imported under its sync name.
_ASYNC_AS = re.compile(r"\b(\w+)_async as \1\b")
_ASYNC_MODULE = re.compile(r"\b(pgqueue(?:\.\w+)*\.\w+?)_async\b|\b(\w+)_async\b(?=[,\s]|$)")


def _open_parens(line: str) -> list[int]:
    """The columns of the parentheses (and brackets) a line leaves open."""
    stack: list[int] = []
    for col, char in enumerate(line):
        if char in "([{":
            stack.append(col)
        elif char in ")]}" and stack:
            stack.pop()
    return stack


def _realign(source: str, text: str) -> str:
    """Continuation lines aligned under an opening parenthesis in the async source follow it
    to where it moved once `async `/`await ` went (unasync keeps lines one for one)."""
    src_lines, out = source.splitlines(), text.splitlines()
    if len(src_lines) != len(out):
        raise RuntimeError("unasync changed the number of lines")
    i = 0
    while i < len(out):
        src_open, gen_open = _open_parens(src_lines[i]), _open_parens(out[i])
        if src_open and gen_open and src_open[-1] != gen_open[-1]:
            old_col, new_col, depth = src_open[-1] + 1, gen_open[-1] + 1, len(src_open)
            j = i + 1
            while j < len(out) and depth > 0:
                line = out[j]
                indent = len(line) - len(line.lstrip(" "))
                if indent == old_col and line.strip():
                    out[j] = " " * new_col + line.lstrip(" ")
                depth += len(_open_parens(src_lines[j])) - _closed(src_lines[j])
                j += 1
        i += 1
    return "\n".join(out) + "\n"


def _closed(line: str) -> int:
    """How many parentheses opened on earlier lines this line closes."""
    depth = closed = 0
    for char in line:
        if char in "([{":
            depth += 1
        elif char in ")]}":
            if depth:
                depth -= 1
            else:
                closed += 1
    return closed


def _sort_imports(name: str, text: str) -> str:
    """Imports merged and sorted, and those only the async code used dropped (ruff I, F401)."""
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--select", "I,F401", "--fix", "--quiet",
         "--stdin-filename", str(PACKAGE / name), "-"],
        input=text, capture_output=True, text=True, check=False, cwd=PACKAGE)
    if done.returncode not in (0, 1) or not done.stdout:
        raise RuntimeError(f"ruff could not sort the imports of {name}: {done.stderr}")
    return done.stdout


def _sync_imports(line: str) -> str:
    """An import line of the async source naming the sync modules instead."""
    if not line.lstrip().startswith(("from ", "import ")):
        return line
    line = _ASYNC_AS.sub(r"\1", line)
    return _ASYNC_MODULE.sub(lambda m: m.group(1) or m.group(2), line)


def _finish(source_name: str, source: str, text: str) -> str:
    """After unasync: alignment, imports, the async-only and sync-only lines, the header."""
    lines = []
    for line in _realign(source, text).splitlines():
        if line.rstrip().endswith("# async-only"):
            continue
        found = _SYNC_ONLY.match(line)
        if found:
            line = found.group(1) + found.group(2)
        lines.append(_sync_imports(line))
    body = _sort_imports(target(source_name), "\n".join(lines) + "\n")
    return HEADER.format(source=source_name) + body


def generated(package: Path | None = None) -> dict[str, str]:
    """{generated module's path: its text} for every async source (paths relative to the
    folder holding the package)."""
    import unasync

    root = PACKAGE if package is None else package
    names = sources(root)
    out: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp, "async"), Path(tmp, "sync")
        src.mkdir()
        flat = {name: name.replace("/", "__") for name in names}
        for name in names:
            (src / flat[name]).write_bytes((root / name).read_bytes())
        rule = unasync.Rule(fromdir=f"{src}/", todir=f"{dst}/", additional_replacements=RENAMES)
        unasync.unasync_files([str(src / flat[name]) for name in names], rules=[rule])
        for name in names:
            out[target(name)] = _finish(name, (root / name).read_text(encoding="utf-8"),
                                        (dst / flat[name]).read_text(encoding="utf-8"))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/generate.py",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 naming each sync module that is stale")
    args = parser.parse_args(argv)
    stale = []
    for name, text in generated().items():
        path = PACKAGE / name
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        if current == text:
            continue
        if args.check:
            stale.append(name)
            diff = difflib.unified_diff(current.splitlines(), text.splitlines(),
                                        name, f"generated from {name.removesuffix('.py')}_async.py",
                                        lineterm="", n=1)
            print("\n".join(list(diff)[:40]), file=sys.stderr)
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {name}")
    if stale:
        print(f"stale: {', '.join(stale)}; run `python tools/generate.py`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
