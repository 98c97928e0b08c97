"""What every command shares: where the DSN comes from, how errors become exit codes, and how
records are printed (rich tables for people, JSON for scripts).

The CLI talks only to the pgqueue library, never to SQL or the driver, so the library's error
classes are the whole vocabulary of failure here and map one-to-one onto exit codes.

Job data (kinds, payloads, dedup keys, errors, names, hosts, op bodies) is whatever producers
wrote, so everything shown to people goes through here and is shown literally: `console()`
reads no string as rich markup or emoji codes and escapes control characters in every string
it renders (`literal`: ESC as \\x1b, a newline as \\n), `table`/`kv_table` build their cells
the same way, and plain lines go out through `say`. As a backstop, every command runs with
sys.stdout/sys.stderr behind a `LiteralStream` (see `Group`), so a line written with
click.echo or print cannot carry a raw control character either. JSON stays exact:
`print_json` only spells the controls JSON would leave raw (DEL, C1, bidi) as \\uNNNN
escapes, which parse back to the same values.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import sys
import traceback
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, Any, NoReturn

import click
from rich.table import Table
from rich.text import Text

import pgqueue
from pgqueue.client import observe
from pgqueue.db import connection, embedded
from pgqueue.db import dsn as dsn_text
from pgqueue.jsonview import AnyJob as AnyJob
from pgqueue.jsonview import checkpoint_json as checkpoint_json
from pgqueue.jsonview import encode_bytes as encode_bytes
from pgqueue.jsonview import iso as iso
from pgqueue.jsonview import job_json as job_json
from pgqueue.jsonview import unwrap as unwrap

# Re-exported: every command takes its exit codes (exits.py: `pgqueue --help` reads them
# without this module) and its output helpers from here.
from .exits import EXIT_CODES_HELP as EXIT_CODES_HELP
from .exits import EXIT_FAILED as EXIT_FAILED
from .exits import EXIT_OK as EXIT_OK
from .exits import EXIT_UNAVAILABLE as EXIT_UNAVAILABLE
from .exits import EXIT_USAGE as EXIT_USAGE
from .literal import _JSON_ESCAPES, literal_streams
from .literal import LiteralConsole as LiteralConsole
from .literal import LiteralStream as LiteralStream
from .literal import console as console
from .literal import err_console as err_console
from .literal import literal as literal
from .literal import say as say
from .literal import say_lines as say_lines

#: A job id argument: 1 to 2^63-1, an id out of that range refused as such (it was "not found").
JOB_ID = click.IntRange(1, 2**63 - 1)

#: When set, errors propagate with their traceback (for debugging the CLI itself).
DEBUG_ENV = "PGQUEUE_DEBUG"


class Failure(click.ClickException):
    """A one-line error on stderr (`pgqueue: error: ...`); exit code 1 (refused, not found)."""

    exit_code = EXIT_FAILED

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"pgqueue: error: {literal(self.format_message())}", err=True, file=file)


class UsageFailure(Failure):
    """A bad argument the library (not click) refused: exit code 2, like click's own."""

    exit_code = EXIT_USAGE


class Unavailable(Failure):
    """Cannot connect, or the schema does not fit this library: exit code 3."""

    exit_code = EXIT_UNAVAILABLE


_FAILURES: dict[int, type[Failure]] = {
    EXIT_FAILED: Failure, EXIT_USAGE: UsageFailure, EXIT_UNAVAILABLE: Unavailable,
}


def fail(message: str, exit_code: int = EXIT_FAILED) -> NoReturn:
    """Stop the command with a one-line error and `exit_code` (1, 2 or 3)."""
    raise _FAILURES[exit_code](message)


def exit_code_for(exc: BaseException) -> int:
    """The exit code for an error the library raised."""
    if isinstance(exc, pgqueue.ConnectionFailed | pgqueue.SchemaError):
        return EXIT_UNAVAILABLE
    if isinstance(exc, ValueError | TypeError):
        return EXIT_USAGE
    return EXIT_FAILED


def _one_line(exc: BaseException) -> str:
    """An error as one line, with any password it quotes masked (a backstop: the library's
    messages name servers, never passwords)."""
    text = dsn_text.hide_secrets(" ".join(str(exc).split()))
    return text or type(exc).__name__


@contextmanager
def translated_errors() -> Iterator[None]:
    """Turn pgqueue's errors, ValueError and TypeError into a one-line `Failure`."""
    try:
        yield
    except (pgqueue.PgQueueError, ValueError, TypeError) as exc:
        _debug_traceback(exc)
        fail(_one_line(exc), exit_code_for(exc))


def _debug_traceback(exc: BaseException) -> None:
    """With $PGQUEUE_DEBUG set, the traceback on stderr; the error still becomes its one line
    and its exit code (re-raising it would turn every code into Python's 1)."""
    if os.environ.get(DEBUG_ENV):
        traceback.print_exception(exc, file=sys.stderr)


@contextmanager
def guarded() -> Iterator[None]:
    """What every command runs inside: `translated_errors`, so no command can forget to
    translate an error into a one-line message and an exit code, and `literal_streams`, so no
    line it writes can carry a raw control character."""
    with literal_streams(), translated_errors():
        yield


class Group(click.Group):
    """A group whose subcommands run `guarded` (the root group, cli/__init__.py, does the
    same without importing this module until a command runs)."""

    def invoke(self, ctx: click.Context) -> Any:
        with guarded():
            return super().invoke(ctx)


# -- the DSN ----------------------------------------------------------------------------------


@dataclass
class Settings:
    """The root group's options, on `ctx.obj`. The DSN resolves lazily, so commands that
    never connect (`db sql`, `sql show`) never start the embedded server."""

    dsn_option: str | None = None
    #: --connect-timeout (seconds): every connection a command opens waits at most this long
    connect_timeout: float = 5.0
    #: --pooled/--not-pooled: whether the DSN goes through a pooler (None: detected)
    pooled: bool | None = None
    _resolved: str | None = field(default=None, init=False, repr=False)

    def dsn(self) -> str:
        """--dsn, else $PGQUEUE_DSN (click reads it into --dsn), else the embedded server."""
        if self._resolved is None:
            self._resolved = self.dsn_option or embedded_dsn()
        return self._resolved


def embedded_dsn() -> str:
    """The per-user embedded server's DSN (started on demand; it announces itself on stderr)."""
    try:
        return embedded.default_dsn()
    except (pgqueue.PgQueueError, ValueError, TypeError):
        raise
    except Exception as exc:  # the server did not start: its binaries report as they can
        _debug_traceback(exc)
        fail(f"cannot start the embedded Postgres in {embedded.default_data_dir()}: "
             f"{_one_line(exc)}", EXIT_UNAVAILABLE)


def settings() -> Settings:
    """The current invocation's settings."""
    return click.get_current_context().ensure_object(Settings)


def dsn() -> str:
    """The DSN this invocation works on."""
    return settings().dsn()


@contextmanager
def open_queue(stream: str = "default", *, database: str | None = None,
               pool_size: int = 2) -> Iterator[pgqueue.Queue]:
    """A Queue on `stream` of the invocation's database (or of `database`), closed after."""
    with pgqueue.Queue(database or dsn(), stream=stream, pool_size=pool_size,
                       connect_timeout=settings().connect_timeout,
                       pooled=settings().pooled) as q:
        yield q


def shown_dsn(value: str) -> str:
    """A DSN fit to print: never with its password."""
    return connection.redact(value)


def print_json(value: Any) -> None:
    """One JSON document on stdout: the exact values (controls JSON leaves raw are escaped
    as \\uNNNN, which parses back to the same string)."""
    text = json.dumps(value, indent=2, ensure_ascii=False, default=_json_default)
    click.echo(text.translate(_JSON_ESCAPES))


def _json_default(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    raise TypeError(f"cannot print a {type(value).__name__} as JSON")


#: How much of a payload people (and JSON without --full) see: the database cuts it.
PREVIEW_BYTES = observe.PREVIEW_BYTES

def size_note(size: int, shown: int | None) -> str:
    """A payload's size for people, saying how much of it is shown when not all."""
    if shown is None:
        return f"{size:,} bytes"
    return f"{size:,} bytes (showing the first {shown:,}; --full shows all)"


def preview(value: bytes | None, width: int = 40, *, prefix: bool = False) -> str:
    """A short, one-line rendering of bytes for a table cell (shown literally)."""
    text, encoding = encode_bytes(value, prefix=prefix)
    if text is None:
        return ""
    if encoding == "base64":
        text = f"base64:{text}"
    text = literal(text[: width + 1])  # escaping only lengthens: enough to fill `width`
    if len(text) > width:
        return text[: width - 1] + "…"
    return text + "…" if prefix else text


def ago(value: dt.datetime | None) -> str:
    """A timestamp as a short local-independent string (UTC, seconds)."""
    if value is None:
        return ""
    return value.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def age(seconds: float | None) -> str:
    """A duration for people: 4.2s, 3m12s, 2h05m, 3d04h."""
    if seconds is None:
        return ""
    s = max(0.0, seconds)
    if s < 60:
        return f"{s:.1f}s"
    whole = int(s)
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"


def cell(value: Any) -> Text:
    """A table cell shown literally, on any console."""
    return Text(literal(value))


def table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]],
          *, right: Sequence[str] = (), nowrap: Sequence[str] = ()) -> Table:
    """A rich table whose title and cells are shown literally; columns named in `right` are
    right-aligned (numbers), those in `nowrap` keep their width (ids, states). When the
    terminal is narrow the others shrink and wrap between words: a word longer than its
    column ends in an ellipsis, never cut in two ("timezon" over "e")."""
    t = Table(title=None if title is None else Text(literal(title), style="table.title"),
              title_justify="left")
    for name in columns:
        t.add_column(literal(name), justify="right" if name in right else "left",
                     no_wrap=name in nowrap, overflow="ellipsis")
    for row in rows:
        t.add_row(*(cell(value) for value in row))
    t.whole = True  # type: ignore[attr-defined]  # into a pipe: at its natural width (literal.py)
    return t


def jobs_table(title: str | None, jobs: Sequence[AnyJob]) -> Table:
    """Job snapshots as a table for people; when some are scheduled, the time each runs."""
    infos = [unwrap(job) for job in jobs]
    scheduled = any(j.state == "scheduled" for j, _size, _cut in infos)
    rows = []
    for j, _size, truncated in infos:
        runs = [ago(j.not_before) if j.state == "scheduled" else ""] if scheduled else []
        state = f"{j.state} ({j.state_reason})" if j.state_reason else j.state  # why parked
        rows.append((j.job_id, j.stream, j.kind or "", state, *runs, j.priority,
                     f"{j.attempts}/{j.max_attempts or '∞'}",
                     preview(j.payload, prefix=truncated),
                     j.error_summary or ""))
    return table(
        title,
        ["id", "stream", "kind", "state", *(["runs at (UTC)"] if scheduled else []), "prio",
         "tries", "payload", "last error"],
        rows,
        right=["id", "prio", "tries"],
        nowrap=["id", "state", "prio", "tries"],
    )


def kv_table(title: str | None, pairs: Mapping[str, Any]) -> Table:
    """A two-column field/value table (for one record): its values wrap, even into a pipe
    (a payload preview is a thousand characters)."""
    t = table(title, ["field", "value"], [(k, v) for k, v in pairs.items()])
    t.whole = False  # type: ignore[attr-defined]
    return t
