"""What every command shares: where the DSN comes from, how errors become exit codes, and how
records are printed (rich tables for people, JSON for scripts).

The CLI talks only to the pgqueue library, never to SQL or the driver, so the library's error
classes are the whole vocabulary of failure here and map one-to-one onto exit codes.
"""
from __future__ import annotations

import base64
import datetime as dt
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, Any, NoReturn

import click
from rich.console import Console
from rich.table import Table

import pgqueue
from pgqueue import connection, embedded

#: Exit codes scripts can trust (also documented in `pgqueue --help`).
EXIT_OK = 0
EXIT_FAILED = 1  # not found, refused (dedup conflict, lease lost, replica), any other queue error
EXIT_USAGE = 2  # bad option or argument: click's own checks and pgqueue's argument checks
EXIT_UNAVAILABLE = 3  # cannot connect, or the schema is missing / older / newer than the library

EXIT_CODES_HELP = (
    "\b\nExit codes:\n"
    "  0  success\n"
    "  1  not found, or the operation was refused (e.g. dedup conflict)\n"
    "  2  usage error: a bad option or argument\n"
    "  3  cannot connect to Postgres, or its pgqueue schema is missing or too new\n"
    "Errors are one line on stderr (pgqueue: error: ...); PGQUEUE_DEBUG=1 shows tracebacks.\n"
)

#: When set, errors propagate with their traceback (for debugging the CLI itself).
DEBUG_ENV = "PGQUEUE_DEBUG"


class Failure(click.ClickException):
    """A one-line error on stderr (`pgqueue: error: ...`); exit code 1 (refused, not found)."""

    exit_code = EXIT_FAILED

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"pgqueue: error: {self.format_message()}", err=True, file=file)


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
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


@contextmanager
def translated_errors() -> Iterator[None]:
    """Turn pgqueue's errors, ValueError and TypeError into a one-line `Failure`."""
    try:
        yield
    except (pgqueue.PgQueueError, ValueError, TypeError) as exc:
        if os.environ.get(DEBUG_ENV):
            raise
        fail(_one_line(exc), exit_code_for(exc))


class Group(click.Group):
    """The root group: every subcommand runs inside `translated_errors`, so no command can
    forget to translate an error into a one-line message and an exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        with translated_errors():
            return super().invoke(ctx)


# -- the DSN ----------------------------------------------------------------------------------


@dataclass
class Settings:
    """The root group's options, on `ctx.obj`. The DSN resolves lazily, so commands that
    never connect (`db sql`, `sql show`) never start the embedded server."""

    dsn_option: str | None = None
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
        if os.environ.get(DEBUG_ENV):
            raise
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
    with pgqueue.Queue(database or dsn(), stream=stream, pool_size=pool_size) as q:
        yield q


def shown_dsn(value: str) -> str:
    """A DSN fit to print: never with its password."""
    return connection.redact(value)


# -- output -----------------------------------------------------------------------------------


def console() -> Console:
    """A rich console on the current stdout (looked up per call, so test runners capture it)."""
    return Console(highlight=False)


def err_console() -> Console:
    """A rich console on stderr, for progress bars that must not pollute stdout."""
    return Console(stderr=True, highlight=False)


def print_json(value: Any) -> None:
    """One JSON document on stdout."""
    click.echo(json.dumps(value, indent=2, ensure_ascii=False, default=_json_default))


def _json_default(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    raise TypeError(f"cannot print a {type(value).__name__} as JSON")


def encode_bytes(value: bytes | None) -> tuple[str | None, str | None]:
    """(text, encoding): UTF-8 text when the bytes decode, else base64; (None, None) for None."""
    if value is None:
        return None, None
    try:
        return value.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(value).decode("ascii"), "base64"


def iso(value: dt.datetime | None) -> str | None:
    """An ISO 8601 timestamp, or None."""
    return None if value is None else value.isoformat()


def checkpoint_json(cp: pgqueue.Checkpoint) -> dict[str, Any]:
    """A checkpoint as JSON (cursor as text or base64, like payloads)."""
    cursor, cursor_encoding = encode_bytes(cp.cursor)
    return {
        "last_completed_step": cp.last_completed_step,
        "cursor_step": cp.cursor_step,
        "cursor": cursor,
        "cursor_encoding": cursor_encoding,
        "updated_at_ms": cp.updated_at_ms,
        "schema_version": cp.schema_version,
        "step_set_hash": cp.step_set_hash,
        "crashes_by_step": dict(cp.crashes_by_step),
    }


def job_json(job: pgqueue.JobInfo) -> dict[str, Any]:
    """Every field of a job snapshot as JSON; bytes say how they are encoded."""
    payload, payload_encoding = encode_bytes(job.payload)
    dedup_key, dedup_key_encoding = encode_bytes(job.dedup_key)
    return {
        "job_id": job.job_id,
        "stream": job.stream,
        "kind": job.kind,
        "state": job.state,
        "state_reason": job.state_reason,
        "state_detail": job.state_detail,
        "priority": job.priority,
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "payload": payload,
        "payload_encoding": payload_encoding,
        "dedup_key": dedup_key,
        "dedup_key_encoding": dedup_key_encoding,
        "enqueued_at": iso(job.enqueued_at),
        "not_before": iso(job.not_before),
        "last_error": job.last_error,
        "lease_id": job.lease_id,
        "lease_expires_at": iso(job.lease_expires_at),
        "worker_node": job.worker_node,
        "worker_instance": job.worker_instance,
        "died_at": iso(job.died_at),
        "checkpoint": checkpoint_json(job.checkpoint),
    }


def preview(value: bytes | None, width: int = 40) -> str:
    """A short, one-line rendering of bytes for a table cell."""
    text, encoding = encode_bytes(value)
    if text is None:
        return ""
    if encoding == "base64":
        text = f"base64:{text}"
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


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


def table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]],
          *, right: Sequence[str] = (), nowrap: Sequence[str] = ()) -> Table:
    """A rich table; columns named in `right` are right-aligned (numbers), those in `nowrap`
    keep their width (ids, states) while the others fold when the terminal is narrow."""
    t = Table(title=title, title_justify="left")
    for name in columns:
        t.add_column(name, justify="right" if name in right else "left",
                     no_wrap=name in nowrap, overflow="ellipsis" if name in nowrap else "fold")
    for row in rows:
        t.add_row(*("" if cell is None else str(cell) for cell in row))
    return t


def jobs_table(title: str | None, jobs: Sequence[pgqueue.JobInfo]) -> Table:
    """Job snapshots as a table for people."""
    return table(
        title,
        ["id", "stream", "kind", "state", "prio", "tries", "payload", "last error"],
        [
            (j.job_id, j.stream, j.kind or "", j.state, j.priority,
             f"{j.attempts}/{j.max_attempts or '∞'}", preview(j.payload),
             preview(None if j.last_error is None else j.last_error.encode(), 30))
            for j in jobs
        ],
        right=["id", "prio", "tries"],
        nowrap=["id", "state", "prio", "tries"],
    )


def kv_table(title: str | None, pairs: Mapping[str, Any]) -> Table:
    """A two-column field/value table (for one record)."""
    return table(title, ["field", "value"], [(k, v) for k, v in pairs.items()])
