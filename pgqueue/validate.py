"""Argument checks shared by the stages: each raises ValueError or TypeError naming the
argument, before anything is sent to the database (so a bad call changes nothing).

Postgres text cannot hold a NUL character (nor can jsonb, which carries every op), so a name
(stream, kind, schedule name, step name) with one is refused here by name; bytes (payloads,
dedup keys) are stored as bytea and may hold any byte. Free text that must never make its
call fail, a failure's error message, is made storable instead (error_text)."""
from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Sequence
from typing import Any

from pgqueue.models import UNSET

MAX_STREAM_LEN = 200
MAX_KIND_LEN = 200
MAX_DEDUP_KEY_BYTES = 1024
#: Durations beyond this (about 100 years) are refused rather than overflowing in SQL.
MAX_SECONDS = 100 * 365 * 86400.0
MAX_BIGINT = 2**63 - 1
MAX_INT = 2**31 - 1


def _storable(value: str, arg: str) -> str:
    """A str Postgres text can hold: no NUL character, and a UTF-8 form."""
    if "\x00" in value:
        raise ValueError(f"{arg} must not contain a NUL character (\\x00), found at position "
                         f"{value.index(chr(0))}")
    if not value.isascii():
        utf8(value, arg)  # only checked: the driver encodes it
    return value


def stream(name: Any, arg: str = "stream") -> str:
    """A stream name (or a schedule's): a non-empty str of at most 200 characters, storable
    as text."""
    if not isinstance(name, str):
        raise TypeError(f"{arg} must be a str, got {type(name).__name__}")
    if not name or len(name) > MAX_STREAM_LEN:
        raise ValueError(f"{arg} must be 1 to {MAX_STREAM_LEN} characters, got {len(name)}")
    return _storable(name, arg)


def step_name(value: Any, arg: str = "step name") -> str:
    """A step name: a non-empty str storable as text (no NUL, a UTF-8 form)."""
    if not isinstance(value, str):
        raise TypeError(f"{arg} must be a str, got {type(value).__name__}")
    if not value:
        raise ValueError(f"{arg} must not be empty")
    return _storable(value, arg)


#: What a NUL in an error text becomes (U+FFFD REPLACEMENT CHARACTER).
REPLACEMENT = "\ufffd"


def error_text(value: str | None) -> str | None:
    """A failure's error message as it can be stored: a NUL becomes U+FFFD, and a lone
    surrogate (no UTF-8 form) becomes "?". Never refuses: recording a failure must not fail
    because of what the failure said."""
    if value is None:
        return None
    if "\x00" in value:
        value = value.replace("\x00", REPLACEMENT)
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            value = value.encode("utf-8", "replace").decode("utf-8")
    return value


def integer(value: Any, arg: str, *, low: int | None = None, high: int | None = None) -> int:
    """An int (not a bool) within [low, high]."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{arg} must be an int, got {type(value).__name__}")
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = f"{low} to {high}" if high is not None else f">= {low}"
        raise ValueError(f"{arg} must be {bounds}, got {value}")
    return value


def seconds(value: Any, arg: str, *, positive: bool = False, most: float | None = None,
            most_said: str = "100 years") -> float:
    """A duration in seconds (int, float or timedelta), not negative (or > 0 when positive),
    at most `most` seconds (MAX_SECONDS: `most_said` is how the message names it)."""
    if isinstance(value, dt.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{arg} must be a number of seconds or a timedelta, got {type(value).__name__}")
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"{arg} must be a finite number of seconds, got {value}")
    if value < 0 or (positive and value == 0):
        raise ValueError(f"{arg} must be {'> 0' if positive else '>= 0'} seconds, got {value}")
    limit = MAX_SECONDS if most is None else most
    if value > limit:
        shown = f"{limit:.3f}".rstrip("0").rstrip(".")
        raise ValueError(f"{arg} must be at most {shown} seconds ({most_said}), got {value}")
    return float(value)


def to_ms(value: Any, arg: str, *, positive: bool = False) -> int:
    """A duration as whole milliseconds (rounded up, so a positive value never becomes 0)."""
    return math.ceil(seconds(value, arg, positive=positive) * 1000)


#: The longest time limit a job may have: what an int of milliseconds holds (24.8 days).
MAX_TIMEOUT_MS = 2**31 - 1


def timeout_ms(value: Any, arg: str = "timeout") -> int:
    """A time limit (seconds or a timedelta, > 0) as whole milliseconds, at most 24.8 days."""
    secs = seconds(value, arg, positive=True, most=MAX_TIMEOUT_MS / 1000, most_said="24.8 days")
    return min(math.ceil(secs * 1000), MAX_TIMEOUT_MS)


def aware_datetime(value: Any, arg: str) -> dt.datetime:
    """A timezone-aware datetime (a naive one is ambiguous, so it is refused)."""
    if not isinstance(value, dt.datetime):
        raise TypeError(f"{arg} must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{arg} must be timezone-aware (e.g. datetime.now(timezone.utc))")
    return value


def utf8(value: str, arg: str) -> bytes:
    """A str as UTF-8; a str that has no UTF-8 form (a lone surrogate) is refused by name."""
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{arg} must be encodable as UTF-8: {exc.reason} at position "
                         f"{exc.start}") from None


def payload(value: Any, arg: str = "payload") -> bytes:
    """The payload as stored: bytes as is, str as UTF-8, anything else as JSON text."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return utf8(value, arg)
    try:
        text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"{arg} must be bytes, str or JSON-serialisable, got {type(value).__name__}: {exc}"
        ) from None
    return utf8(text, arg)


def dedup_key(value: Any, arg: str = "dedup_key") -> bytes | None:
    """A dedup key: str (stored as UTF-8) or bytes, at most 1 KiB; None for no key."""
    if value is None:
        return None
    if isinstance(value, str):
        value = utf8(value, arg)
    elif isinstance(value, bytearray | memoryview):
        value = bytes(value)
    elif not isinstance(value, bytes):
        raise TypeError(f"{arg} must be str or bytes, got {type(value).__name__}")
    if len(value) > MAX_DEDUP_KEY_BYTES:
        raise ValueError(f"{arg} must be at most {MAX_DEDUP_KEY_BYTES} bytes, got {len(value)}")
    return bytes(value)


def kind(value: Any, arg: str = "kind") -> str | None:
    """A job kind: None or a str of 1 to 200 characters (the SQL side checks the same:
    pgqueue.check_name)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{arg} must be a str, got {type(value).__name__}")
    if not value:
        raise ValueError(f"{arg} must not be empty (use None for no kind)")
    if len(value) > MAX_KIND_LEN:
        raise ValueError(f"{arg} must be 1 to {MAX_KIND_LEN} characters, got {len(value)}")
    return _storable(value, arg)


def concurrency_key(value: Any, arg: str = "concurrency_key") -> str | None:
    """A concurrency key: None, or a str of 1 to 200 characters storable as text."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{arg} must be a str, got {type(value).__name__}")
    if not 1 <= len(value) <= 200:
        raise ValueError(f"{arg} must be 1 to 200 characters, got {len(value)}")
    return _storable(value, arg)


def kind_settings(*, quarantine_after: Any = UNSET, max_concurrency: Any = UNSET,
                  rate_limit: Any = UNSET, max_per_key: Any = UNSET) -> dict[str, Any]:
    """The kind settings given (UNSET: left out; None: cleared), checked, as the columns of
    pgqueue.kind_config: a limit is a whole number from 1, a rate limit (count, seconds) with
    window > 0 (whole milliseconds, rounded up)."""
    out: dict[str, Any] = {}
    for name, value in (("quarantine_after", quarantine_after),
                        ("max_concurrency", max_concurrency), ("max_per_key", max_per_key)):
        if value is not UNSET:
            out[name] = None if value is None else integer(value, name, low=1, high=MAX_INT)
    if rate_limit is None:
        out.update(rate_count=None, rate_ms=None)
    elif rate_limit is not UNSET:
        if not isinstance(rate_limit, tuple | list) or len(rate_limit) != 2:
            raise TypeError(f"rate_limit must be (count, seconds), got {rate_limit!r}")
        count, window = rate_limit
        out["rate_count"] = integer(count, "rate_limit count", low=1, high=MAX_INT)
        out["rate_ms"] = to_ms(window, "rate_limit seconds", positive=True)
    return out


def no_such_stream(name: str, known: Sequence[str]) -> str:
    """What to say of a stream `name` that is not among `known`: that it does not exist, and
    the closest known names (a typo: `paymnets` for `payments`), or the known ones."""
    import difflib

    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    if close:
        hint = "did you mean " + " or ".join(repr(c) for c in close) + "?"
    elif known:
        shown = list(known[:10])
        hint = "the streams are " + ", ".join(repr(s) for s in shown) + (
            f" and {len(known) - 10} more" if len(known) > 10 else "")
    else:
        hint = "the database has no stream yet (enqueueing to one creates it)"
    return f"no stream {name!r}: {hint}"
