"""Frozen code as deltas keyed by object: each revision's file holds only the functions,
views, triggers and grants it changed, each under the name of what it defines.

The code of a revision (every function and view it defines, then its grants) is a script of
*chunks*: one statement with the comment lines above it, each known by its object's key
(`function pgqueue.lease`, `view pgqueue.jobs`, `trigger job_counts`, or the statement itself
for a grant). `versions/code/NNNN.sql` holds what revision NNNN changed against the code of
the frozen revision below it (empty below the first): an entry per object changed, added,
moved or removed, as plain SQL a DBA can read, so `git diff` between two revisions' files,
or a look at one, names the objects that changed.

    -- @@ function pgqueue.lease
    -- @@ after function pgqueue.pick_within_limits
    CREATE OR REPLACE FUNCTION pgqueue.lease(...) ... $$;

    -- @@ function pgqueue.old_helper
    -- @@ removed

An entry's text replaces the object's chunk, placed after the chunk it names (`(start)`: the
first). The code of a revision is rebuilt by applying every frozen file up to it in order,
exactly, byte for byte: a downgrade loads the same script it loaded when it was current.
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


_OBJECT = re.compile(r"^CREATE\s+(?:OR\s+REPLACE\s+)?(FUNCTION|PROCEDURE|VIEW|TRIGGER|AGGREGATE)"
                     r"\s+([\w.\"]+)", re.IGNORECASE)
_ENABLE = re.compile(r"^ALTER\s+TABLE\s+\S+\s+ENABLE\s+ALWAYS\s+TRIGGER\s+(\w+)", re.IGNORECASE)
_ENTRY = re.compile(r"^-- @@ (.+)\n-- @@ (after .+|removed)\n", re.MULTILINE)
_START = "(start)"


def _statement(chunk: str) -> str:
    """A chunk's statement without its comment lines, its white space collapsed."""
    lines = [line for line in chunk.splitlines() if not line.lstrip().startswith("--")]
    return " ".join(" ".join(lines).split())


def key(chunk: str) -> str:
    """What a chunk defines or acts on: `function NAME` (views, triggers, procedures,
    aggregates alike), `enable trigger NAME`, else its statement (a grant, a comment), cut
    to 100 characters; `(comments)` for a chunk that holds no statement."""
    statement = _statement(chunk)
    if found := _OBJECT.match(statement):
        return f"{found.group(1).lower()} {found.group(2)}"
    if found := _ENABLE.match(statement):
        return f"enable trigger {found.group(1)}"
    return statement[:100] or "(comments)"


def keyed(code: str) -> list[tuple[str, str]]:
    """`code`'s chunks with their keys, made unique in order (` #2` for the second chunk of a
    key: overloads, a repeated grant)."""
    seen: dict[str, int] = {}
    out = []
    for chunk in chunks(code):
        base = key(chunk)
        seen[base] = seen.get(base, 0) + 1
        out.append((base if seen[base] == 1 else f"{base} #{seen[base]}", chunk))
    return out


def delta(old: str, new: str) -> str:
    """The entries turning the code `old` into `new` (empty when they are the same): every
    object removed, then every object changed, added or moved, in `new`'s order."""
    before, after = keyed(old), keyed(new)
    if new and not new.endswith("\n"):
        raise ValueError("code must end with a newline")
    old_text = dict(before)
    matcher = difflib.SequenceMatcher(a=[k for k, _ in before], b=[k for k, _ in after],
                                      autojunk=False)
    stable = {after[j + n][0] for _i, j, size in matcher.get_matching_blocks()
              for n in range(size) if old_text[after[j + n][0]] == after[j + n][1]}
    gone = {k for k, _ in before} - {k for k, _ in after}
    out = [f"-- @@ {k}\n-- @@ removed\n" for k, _ in before if k in gone]
    previous = _START
    for name, chunk in after:
        if name not in stable:
            if re.search(r"^-- @@ ", chunk, re.MULTILINE):
                raise ValueError(f"{name}: a line of its text starts with '-- @@ '")
            out.append(f"-- @@ {name}\n-- @@ after {previous}\n{chunk}")
        previous = name
    return "".join(out)


def apply(old: str, entries: str) -> str:
    """The code `old` with the entries of a frozen file applied."""
    code = keyed(old)
    order = [k for k, _ in code]
    text = dict(code)
    found = list(_ENTRY.finditer(entries))
    for n, entry in enumerate(found):
        name, action = entry.group(1), entry.group(2)
        if name in text:
            order.remove(name)
            del text[name]
        elif action == "removed":
            raise ValueError(f"entry {name!r} removes what the code below does not hold")
        if action == "removed":
            continue
        previous = action.removeprefix("after ")
        if previous != _START and previous not in text:
            raise ValueError(f"entry {name!r} comes after {previous!r}, which the code lacks")
        end = found[n + 1].start() if n + 1 < len(found) else len(entries)
        order.insert(0 if previous == _START else order.index(previous) + 1, name)
        text[name] = entries[entry.end():end]
    return "".join(text[k] for k in order)


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
