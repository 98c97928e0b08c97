"""How a failure is recorded: a one-line summary and the handler's traceback.

A job's failure is stored twice over (schema 0010): `error_summary`, one line an operator
reads in a list (`ExceptionType: message`, at most MAX_SUMMARY_CHARS), and `last_error`, the
traceback of the handler's own frames. The frames the worker ran before the handler (pgqueue's
own, and the standard library's threads and event loop) say nothing about the job and are left
out; every frame from the first of the handler's on is kept, chained exceptions included.
"""
from __future__ import annotations

import os
import sysconfig
import traceback
from pathlib import Path
from types import FrameType

#: The longest summary kept (pgqueue.error_summary bounds it in the database as well).
MAX_SUMMARY_CHARS = 200
#: The most of a traceback kept: its end, where the exception is.
MAX_TRACEBACK_CHARS = 8000

def _dirs(*names: str) -> tuple[str, ...]:
    """Installation directories by sysconfig name, each ending in a separator (so a prefix
    match never takes a sibling whose name merely starts the same)."""
    return tuple({os.path.join(str(Path(sysconfig.get_paths()[n]).resolve()), "")
                  for n in names})


_OWN = os.path.join(str(Path(__file__).resolve().parent), "")
_STDLIB = _dirs("stdlib", "platstdlib")
#: Where installed packages live: inside the standard library's directory on a system-wide
#: install (/usr/lib/python3.11/site-packages), and the user's code may be there.
_PACKAGES = _dirs("purelib", "platlib")


def exception_name(exc: BaseException) -> str:
    """The exception's type as a traceback names it: `ValueError`, `myapp.errors.Declined`."""
    kind = type(exc).__qualname__
    if type(exc).__module__ not in ("builtins", "__main__", "pgqueue.errors"):
        kind = f"{type(exc).__module__}.{kind}"
    return kind


def one_line(text: str, limit: int) -> str:
    """`text` on one line (whitespace runs made one space), at most `limit` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def summary(exc: BaseException, limit: int = MAX_SUMMARY_CHARS) -> str:
    """`ExceptionType: message` on one line (the message's first line only would hide a
    multi-line message's point: all of it, joined), at most `limit` characters."""
    message = str(exc)
    return one_line(f"{exception_name(exc)}: {message}" if message.strip()
                    else exception_name(exc), limit)


def _worker_frame(filename: str) -> bool:
    """A frame of pgqueue's own code or of the standard library (not an installed package)."""
    try:
        path = str(Path(filename).resolve())
    except (OSError, ValueError):
        return False
    return path.startswith(_OWN) or (path.startswith(_STDLIB)
                                     and not path.startswith(_PACKAGES))


def _from_handler(frames: list[traceback.FrameSummary]) -> traceback.StackSummary:
    """The frames from the first that is not the worker's on (all of them when none is: a
    failure inside pgqueue itself keeps its whole story)."""
    first = next((i for i, f in enumerate(frames) if not _worker_frame(f.filename)), 0)
    return traceback.StackSummary.from_list(frames[first:])


def _trim(te: traceback.TracebackException, seen: set[int]) -> None:
    """Drop the leading frames that are not the handler's, in `te` and its chain."""
    if id(te) in seen:
        return
    seen.add(id(te))
    te.stack = _from_handler(list(te.stack))
    for linked in (te.__cause__, te.__context__, *(getattr(te, "exceptions", None) or ())):
        if linked is not None:
            _trim(linked, seen)


def stack_of(frame: FrameType) -> str:
    """Where a thread is now (its frame), as a traceback's header and frames from the
    handler's first on: what a stuck handler was doing when the worker gave up on it."""
    return ("Stack of the handler when the worker stopped waiting (most recent call last):\n"
            + "".join(_from_handler(list(traceback.extract_stack(frame))).format()))


def handler_traceback(exc: BaseException, limit: int = MAX_TRACEBACK_CHARS) -> str:
    """The exception's traceback from the handler's first frame on (chained exceptions and
    notes included), its last `limit` characters."""
    stack = getattr(exc, "stack", None)  # JobTimeout: where a handler was left running
    if isinstance(stack, str) and exc.__traceback__ is None:
        text = stack + "".join(traceback.format_exception_only(exc))
    else:
        te = traceback.TracebackException.from_exception(exc)
        _trim(te, set())
        text = "".join(te.format())
    return text if len(text) <= limit else "…" + text[-(limit - 1):]
