"""The dashboard's inputs, checked: every bad one is a BadInput naming the parameter (a 400),
before anything reaches the database."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pgqueue import validate
from pgqueue.client import observe_async as observe
from pgqueue.client import operate_async as operate
from pgqueue.client.observe_async import MAX_PAGE

#: Jobs per page unless `limit` says otherwise.
PAGE = 50


class BadInput(ValueError):
    """An input the dashboard cannot use; the message names the parameter."""


def job_id(text: str, name: str = "id") -> int:
    """A job id from a path or form: a whole number from 1 to 2^63-1."""
    if not text.isascii() or not text.isdigit():
        raise BadInput(f"{name} must be a job id (a positive whole number), got {text[:40]!r}")
    value = int(text)
    if not 1 <= value <= validate.MAX_BIGINT:
        raise BadInput(f"{name} must be from 1 to {validate.MAX_BIGINT}, got {text[:40]}")
    return value


def _optional(values: Mapping[str, str], name: str) -> str | None:
    value = values.get(name, "")
    return value if value != "" else None


def stream(value: str | None, name: str = "stream") -> str | None:
    if value is None:
        return None
    try:
        return validate.stream(value)
    except (TypeError, ValueError) as exc:
        raise BadInput(f"{name}: {exc}") from None


def action(verb: str, to_step: str | None) -> tuple[str, str | None]:
    """An action's verb and the step it rewinds to (empty: none), by the library's rule."""
    return verb, operate.check_verb(verb, to_step or None, name="action")


@dataclass(frozen=True)
class JobFilter:
    """Which jobs a list or a bulk action is about (None: any)."""

    stream: str | None = None
    state: str | None = None
    kind: str | None = None

    @classmethod
    def parse(cls, values: Mapping[str, str]) -> JobFilter:
        """The filter of a query or form (empty: any), checked by the library's rule."""
        return cls(**observe.job_filter(_optional(values, "stream"), _optional(values, "state"),
                                        _optional(values, "kind")))

    def query(self) -> dict[str, str]:
        """The filter as query parameters (for links)."""
        return {k: v for k, v in (("stream", self.stream), ("state", self.state),
                                  ("kind", self.kind)) if v is not None}


@dataclass(frozen=True)
class Page:
    """Where a page of jobs starts (`after`: below this id) and how long it is."""

    after: int | None
    limit: int

    @classmethod
    def parse(cls, values: Mapping[str, str]) -> Page:
        after_text = _optional(values, "after")
        after = None if after_text is None else job_id(after_text, "after")
        limit_text = _optional(values, "limit")
        if limit_text is None:
            return cls(after, PAGE)
        if not limit_text.isascii() or not limit_text.isdigit() or not 1 <= int(limit_text) <= MAX_PAGE:
            raise BadInput(f"limit must be a whole number from 1 to {MAX_PAGE}, got {limit_text[:40]!r}")
        return cls(after, int(limit_text))


def through(values: Mapping[str, str]) -> int | None:
    """A bulk action's bound: the newest job id counted when it was confirmed."""
    text = _optional(values, "through")
    return None if text is None else job_id(text, "through")
