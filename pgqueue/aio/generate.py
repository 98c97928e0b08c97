"""Generate pgqueue's sync I/O modules from their async sources in pgqueue/aio.

    python -m pgqueue.aio.generate          # rewrite pgqueue/X.py from pgqueue/aio/X.py
    python -m pgqueue.aio.generate --check  # exit 1 naming each stale module (the test suite)

Tokens are rewritten by `unasync` (a development dependency: it removes `async` and `await`
and renames the names below); then import paths move from pgqueue.aio to pgqueue, a line
ending in `# async-only` is dropped, a comment line `# sync-only: CODE` becomes CODE, and a
header says where the module comes from.
"""
from __future__ import annotations

import argparse
import difflib
import re
import subprocess
import sys
import tempfile
from pathlib import Path

AIO = Path(__file__).resolve().parent
PACKAGE = AIO.parent

#: The async sources, in pgqueue/aio, of generated modules in pgqueue/.
MODULES = ("run.py", "connection.py", "enqueue.py", "lease.py", "settle.py", "reclaim.py",
           "failover.py", "queue.py", "schedule.py", "operate.py", "deadletter.py",
           "observe.py", "oplog.py", "queue_operate.py", "sqlalchemy_conn.py", "steps.py", "deploy.py",
           "kinds.py")

#: Names unasync renames (beyond its own: __aenter__, AsyncIterator, asynccontextmanager...).
RENAMES = {
    "AsyncConn": "Conn",
    "AsyncConnection": "Connection",
    "AsyncConnectionPool": "ConnectionPool",
    "AsyncRowFactory": "RowFactory",
    "AsyncQueue": "Queue",
    "AsyncSession": "Session",
    "AsyncSettler": "Settler",
    "AsyncStepContext": "StepContext",
    "AsyncQueueOperations": "QueueOperations",
    "AsyncIterator": "Iterator",
    "AsyncGenerator": "Generator",
    "AbstractAsyncContextManager": "AbstractContextManager",
    "asyncio": "threading",
}

HEADER = "# Generated from pgqueue/aio/{name} (python -m pgqueue.aio.generate): edit that file.\n"
_SYNC_ONLY = re.compile(r"^(\s*)# sync-only: (.*)$")


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
        input=text, capture_output=True, text=True, check=False, cwd=PACKAGE.parent)
    if done.returncode not in (0, 1) or not done.stdout:
        raise RuntimeError(f"ruff could not sort the imports of {name}: {done.stderr}")
    return done.stdout


def _finish(name: str, source: str, text: str) -> str:
    """After unasync: alignment, imports, the async-only and sync-only lines, the header."""
    lines = []
    for line in _realign(source, text).splitlines():
        if line.rstrip().endswith("# async-only"):
            continue
        found = _SYNC_ONLY.match(line)
        if found:
            line = found.group(1) + found.group(2)
        line = line.replace("from pgqueue.aio import ", "from pgqueue import ")
        line = line.replace("pgqueue.aio.", "pgqueue.")
        lines.append(line)
    body = _sort_imports(name, "\n".join(lines) + "\n")
    return HEADER.format(name=name) + body


def generated() -> dict[str, str]:
    """{module file name: the sync module's text} for every async source."""
    import unasync

    out: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp, "aio"), Path(tmp, "sync")
        src.mkdir()
        for name in MODULES:
            (src / name).write_bytes((AIO / name).read_bytes())
        rule = unasync.Rule(fromdir=f"{src}/", todir=f"{dst}/", additional_replacements=RENAMES)
        unasync.unasync_files([str(src / name) for name in MODULES], rules=[rule])
        for name in MODULES:
            out[name] = _finish(name, (AIO / name).read_text(encoding="utf-8"),
                                (dst / name).read_text(encoding="utf-8"))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pgqueue.aio.generate",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 naming each sync module that is stale")
    args = parser.parse_args(argv)
    stale = []
    for name, text in generated().items():
        target = PACKAGE / name
        current = target.read_text(encoding="utf-8") if target.exists() else ""
        if current == text:
            continue
        if args.check:
            stale.append(name)
            diff = difflib.unified_diff(current.splitlines(), text.splitlines(),
                                        f"pgqueue/{name}", f"generated from pgqueue/aio/{name}",
                                        lineterm="", n=1)
            print("\n".join(list(diff)[:40]), file=sys.stderr)
        else:
            target.write_text(text, encoding="utf-8")
            print(f"wrote pgqueue/{name}")
    if stale:
        print(f"stale: {', '.join('pgqueue/' + s for s in stale)}; run "
              f"`python -m pgqueue.aio.generate`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
