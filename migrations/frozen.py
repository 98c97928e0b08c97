"""Frozen code as deltas: each revision's file holds only the functions and views it changed.

The code of a revision (every function and view it defines, then its grants) is a script of
*chunks*: one statement with the comment lines above it. `versions/code/NNNN.sql` holds what
revision NNNN changed against the code of the frozen revision below it (empty below the
first): hunks, each a header line naming the chunks it replaces, then the chunks that take
their place, as plain SQL a DBA can read.

    -- @@ 12+1 replaces: CREATE OR REPLACE FUNCTION pgqueue.lease(
    CREATE OR REPLACE FUNCTION pgqueue.lease(...) ... $$;

`12+1`: one chunk from index 12 (counted in the code below) is replaced by the text up to
the next header. The code of a revision is rebuilt by applying every frozen file up to it in
order, exactly, byte for byte: a downgrade loads the same script it loaded before the
files were made deltas.
"""
from __future__ import annotations

import difflib
import re
from pathlib import Path

_HUNK = re.compile(r"^-- @@ (\d+)\+(\d+)\b.*\n", re.MULTILINE)
_DOLLAR = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)?\$")


def _statement_ends(line: str, quote: str | None) -> tuple[bool, str | None]:
    """Whether `line` ends a statement (a `;` outside quotes and comments), and the dollar
    quote still open after it."""
    i, ends = 0, False
    in_string = False
    while i < len(line):
        if quote is not None:
            at = line.find(quote, i)
            if at < 0:
                return False, quote
            i, quote = at + len(quote), None
            continue
        char = line[i]
        if in_string:
            in_string = char != "'"
            i += 1
            continue
        if line.startswith("--", i):
            break
        if char == "'":
            in_string = True
        elif char == "$" and (found := _DOLLAR.match(line, i)):
            quote = found.group(0)
            i = found.end()
            ends = False
            continue
        elif char == ";":
            ends = True
        elif not char.isspace():
            ends = False
        i += 1
    return ends, quote


def chunks(code: str) -> list[str]:
    """`code` cut after each statement (with the comments and blank lines before it); the
    pieces joined give `code` back exactly."""
    out: list[str] = []
    current: list[str] = []
    quote: str | None = None
    for line in code.splitlines(keepends=True):
        current.append(line)
        ends, quote = _statement_ends(line, quote)
        if ends and quote is None:
            out.append("".join(current))
            current = []
    if current:
        out.append("".join(current))
    return out


def _title(chunk: str) -> str:
    """The first line of a chunk's statement (what a hunk header names)."""
    for line in chunk.splitlines():
        if line.strip() and not line.lstrip().startswith("--"):
            return line.strip()[:80]
    return chunk.strip().splitlines()[0][:80] if chunk.strip() else "(blank)"


def delta(old: str, new: str) -> str:
    """The hunks turning the code `old` into `new` (empty when they are the same)."""
    before, after = chunks(old), chunks(new)
    out = []
    matcher = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        gone = ", ".join(_title(c) for c in before[i1:i2]) or "nothing (adds)"
        body = "".join(after[j1:j2])
        if body and not body.endswith("\n"):
            raise ValueError("code must end with a newline")
        out.append(f"-- @@ {i1}+{i2 - i1} replaces: {gone}\n{body}")
    return "".join(out)


def apply(old: str, hunks: str) -> str:
    """The code `old` with the hunks of a frozen file applied."""
    before = chunks(old)
    found = list(_HUNK.finditer(hunks))
    pieces: list[str] = []
    at = 0
    for n, header in enumerate(found):
        start, count = int(header.group(1)), int(header.group(2))
        end = found[n + 1].start() if n + 1 < len(found) else len(hunks)
        if start < at or start + count > len(before):
            raise ValueError(f"hunk {header.group(0).strip()!r} does not fit the code below it")
        pieces += before[at:start]
        pieces.append(hunks[header.end():end])
        at = start + count
    pieces += before[at:]
    return "".join(pieces)


def frozen_files(versions: Path, upto: str) -> list[Path]:
    """The frozen files of revisions up to `upto`, in order."""
    return sorted(p for p in (versions / "code").glob("[0-9][0-9][0-9][0-9].sql")
                  if int(p.stem) <= int(upto))


def rebuild(versions: Path, upto: str) -> str:
    """The code of the newest frozen revision up to `upto`: every delta applied in order."""
    code = ""
    for path in frozen_files(versions, upto):
        code = apply(code, path.read_text(encoding="utf-8"))
    return code
