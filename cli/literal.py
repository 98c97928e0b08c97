"""Everything the CLI shows people is shown literally: job data (kinds, payloads, dedup keys,
errors, names, op bodies) can neither restyle nor retitle the operator's terminal.

One place for it, used by every command through cli/common.py: `literal` spells out control
characters, the rich console never reads markup, and a stream guard escapes any line a command
prints around them.
"""
from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

import click
from rich.console import Console
from rich.measure import Measurement
from rich.text import Text


def _escapes() -> dict[int, str]:
    """Code point -> its visible spelling: C0, DEL and C1 controls as \\xNN (tab, newline and
    carriage return as \\t \\n \\r), and the invisible bidi and line-separator characters
    (which reorder or break what an operator reads) as \\uNNNN."""
    table = {cp: f"\\x{cp:02x}" for cp in (*range(0x00, 0x20), *range(0x7F, 0xA0))}
    table.update({0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"})
    for cp in (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A),
               0x2028, 0x2029):
        table[cp] = f"\\u{cp:04x}"
    return table


_ESCAPES = _escapes()
#: The same, but newline and tab pass (text whose layout is the CLI's own).
_LAYOUT_KEPT = {cp: text for cp, text in _ESCAPES.items() if cp not in (0x09, 0x0A)}
#: The same, but newline passes (job data shown line by line: a failure's traceback).
_LINES_KEPT = {cp: text for cp, text in _ESCAPES.items() if cp != 0x0A}
#: What JSON text must still escape for a terminal: json.dumps already escapes C0 (as \u00NN).
_JSON_ESCAPES = {cp: f"\\u{cp:04x}" for cp in _ESCAPES if cp >= 0x7F}


def literal(value: Any) -> str:
    """`value` as text fit for a terminal: shown as it is, with every control character
    spelled out (ESC as \\x1b, a newline as \\n). Backslashes stay as they are, so text that
    had no controls is unchanged (and escaping twice changes nothing). None is ""."""
    return ("" if value is None else str(value)).translate(_ESCAPES)


def say(message: Any = "", *, err: bool = False) -> None:
    """One line for people on stdout (or stderr), shown literally (see `literal`)."""
    click.echo(literal(message), err=err)


def say_lines(text: str, *, job_data: bool = False) -> None:
    """Text of several lines, its layout kept: newlines and tabs of text the CLI composed
    (SQL files); with `job_data` (a failure's traceback) newlines only, every other control
    character spelt out as `literal` does (a tab in job data could hide what follows)."""
    click.echo(text.translate(_LINES_KEPT if job_data else _LAYOUT_KEPT))


class LiteralConsole(Console):
    """A rich console that shows every string literally: never as markup or emoji codes, its
    control characters escaped. rich turns each str it meets (print arguments, table cells
    and titles) into Text through `render_str`, so one override covers them all; Text built
    by the CLI itself (styled headings) is its own.

    Into a pipe or a file (`piped`), a table of many records (one marked `whole`, see
    common.table) is laid out at its natural width, never cut to 80 columns (nor to
    $COLUMNS, which a shell exports for its terminal): a 120-character kind is printed
    whole, on its row. One record's fields wrap at 80 columns as on a terminal."""

    def __init__(self, *args: Any, piped: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._piped = piped

    def render_str(self, text: str, **kwargs: Any) -> Text:
        kwargs.update(markup=False, emoji=False)
        return super().render_str(literal(text), **kwargs)

    def print(self, *objects: Any, **kwargs: Any) -> None:
        whole = [o for o in objects if getattr(o, "whole", False)]
        if not (self._piped and whole):
            super().print(*objects, **kwargs)
            return
        wide = self.options.update(width=WIDE, max_width=WIDE)
        natural = max([self.width, *(Measurement.get(self, wide, o).maximum for o in whole)])
        before = self.width
        self.width = natural  # for this print only (rich caps a print's width at the console's)
        try:
            super().print(*objects, **kwargs)
        finally:
            self.width = before


#: What rich may lay a piped table out in while measuring it.
WIDE = 100_000


def _piped(stream: Any) -> bool:
    try:
        return not stream.isatty()
    except (AttributeError, ValueError):
        return True


def console() -> Console:
    """A literal console on the current stdout (looked up per call, so test runners capture
    it). It writes to the real stream: its own styles are escape sequences."""
    out = _raw(sys.stdout)
    return LiteralConsole(file=out, highlight=False, markup=False, emoji=False,
                          piped=_piped(out))


def err_console() -> Console:
    """A literal console on stderr, for progress bars that must not pollute stdout."""
    return LiteralConsole(file=_raw(sys.stderr), highlight=False, markup=False, emoji=False)


class LiteralStream:
    """A text stream that spells out control characters (but newline and tab) before they
    reach the real one: the backstop for a line a command writes with click.echo or print
    instead of `say`. Bytes are decoded (UTF-8, invalid bytes replaced) and escaped too; it
    has no `buffer`, so nothing reaches the real stream around it."""

    def __init__(self, raw: IO[str]) -> None:
        self.raw = raw

    def write(self, text: str | bytes) -> int:
        if isinstance(text, bytes | bytearray):
            text = bytes(text).decode("utf-8", "replace")
        return self.raw.write(text.translate(_LAYOUT_KEPT))

    def flush(self) -> None:
        self.raw.flush()

    def __getattr__(self, name: str) -> Any:
        if name == "buffer":
            raise AttributeError(name)
        return getattr(self.raw, name)


def _raw(stream: Any) -> IO[str]:
    raw: IO[str] = stream.raw if isinstance(stream, LiteralStream) else stream
    return raw


@contextmanager
def literal_streams() -> Iterator[None]:
    """sys.stdout and sys.stderr behind a `LiteralStream` while a command runs."""
    out, err = sys.stdout, sys.stderr
    if not isinstance(out, LiteralStream):
        sys.stdout = LiteralStream(out)
    if not isinstance(err, LiteralStream):
        sys.stderr = LiteralStream(err)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err
