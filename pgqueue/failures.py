"""How a failure is recorded: a one-line summary and the handler's traceback.

A job's failure is stored twice over (schema 0010): `error_summary`, one line an operator
reads in a list (`ExceptionType: message`, at most MAX_SUMMARY_CHARS), and `last_error`, the
traceback of the handler's own frames. The frames the worker ran before the handler (pgqueue's
own, and the standard library's threads and event loop) say nothing about the job and are left
out; every frame from the first of the handler's on is kept, chained exceptions included.
"""
from __future__ import annotations

import sysconfig
import traceback
from pathlib import Path
from types import FrameType

#: The longest summary kept (pgqueue.error_summary bounds it in the database as well).
MAX_SUMMARY_CHARS = 200
#: The most of a traceback kept: its end, where the exception is.
MAX_TRACEBACK_CHARS = 8000

_OWN = str(Path(__file__).resolve().parent)
_STDLIB = tuple({str(Path(sysconfig.get_paths()[name]).resolve())
                 for name in ("stdlib", "platstdlib")})


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
    try:
        path = str(Path(filename).resolve())
    except (OSError, ValueError):
        return False
    return path.startswith(_OWN) or path.startswith(_STDLIB)


def _trim(te: traceback.TracebackException, seen: set[int]) -> None:
    """Drop the leading frames that are not the handler's, in `te` and its chain."""
    if id(te) in seen:
        return
    seen.add(id(te))
    frames = list(te.stack)
    first = next((i for i, f in enumerate(frames) if not _worker_frame(f.filename)), None)
    if first:  # None: no frame of the handler's (pgqueue's own failure): keep them all
        te.stack = traceback.StackSummary.from_list(frames[first:])
    for linked in (te.__cause__, te.__context__, *(getattr(te, "exceptions", None) or ())):
        if linked is not None:
            _trim(linked, seen)


def stack_of(frame: FrameType) -> str:
    """Where a thread is now (its frame), as a traceback's header and frames from the
    handler's first on: what a stuck handler was doing when the worker gave up on it."""
    frames = [f for f in traceback.extract_stack(frame)]
    first = next((i for i, f in enumerate(frames) if not _worker_frame(f.filename)), 0)
    return ("Stack of the handler when the worker stopped waiting (most recent call last):\n"
            + "".join(traceback.StackSummary.from_list(frames[first:]).format()))


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
