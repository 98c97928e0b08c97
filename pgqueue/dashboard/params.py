"""The dashboard's inputs, checked: every bad one is a BadInput naming the parameter (a 400),
before anything reaches the database."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pgqueue import validate
from pgqueue.models import JOB_STATES, VERBS
from pgqueue.observe import MAX_PAGE

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


def state(value: str | None) -> str | None:
    if value is not None and value not in JOB_STATES:
        raise BadInput(f"state must be one of {', '.join(JOB_STATES)}, got {value[:40]!r}")
    return value


def kind(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return validate.kind(value)
    except (TypeError, ValueError) as exc:
        raise BadInput(f"kind: {exc}") from None


def verb(value: str) -> str:
    if value not in VERBS:
        raise BadInput(f"action must be one of {', '.join(VERBS)}, got {value[:40]!r}")
    return value


def step(value: str | None, action: str) -> str | None:
    """The step to rewind to: required by rewind, refused with any other action."""
    if action != "rewind":
        if value:
            raise BadInput(f"to_step is for rewind only, not {action}")
        return None
    if not value:
        raise BadInput("to_step is required: the name of the step to rewind to")
    try:
        return validate.step_name(value, "to_step")
    except (TypeError, ValueError) as exc:
        raise BadInput(str(exc)) from None


@dataclass(frozen=True)
class JobFilter:
    """Which jobs a list or a bulk action is about (None: any)."""

    stream: str | None = None
    state: str | None = None
    kind: str | None = None

    @classmethod
    def parse(cls, values: Mapping[str, str]) -> JobFilter:
        return cls(stream(_optional(values, "stream")), state(_optional(values, "state")),
                   kind(_optional(values, "kind")))

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
