"""What a job kind declares: a plain handler (one function) or a step job (ordered steps, a
payload version and its upcasters), with the settings both share.

A step job's step-set hash is a hash of the ordered step names and versions (never of source
code, so cosmetic deploys do not strand in-flight jobs), and its schema_version is the
payload's version, with upcasters to bring older payloads forward. The App (app.py) registers
these by kind; the compatibility rule (compat.py) reads them.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from pgqueue import validate

if TYPE_CHECKING:
    from pgqueue.runtime.running import JobContext

F = TypeVar("F", bound=Callable[..., Any])


def is_async(fn: Any) -> bool:
    """Whether `fn` is an `async def` (functools.partial and wrappers that keep the marker
    included): the worker runs it on its event loop instead of a handler thread."""
    return inspect.iscoroutinefunction(fn)


def time_limit(value: Any, arg: str = "timeout") -> float | None:
    """A handler's or a step's time limit in seconds (None: none), as a job's would be
    stored: positive, in whole milliseconds, at most 24.8 days."""
    return None if value is None else validate.timeout_ms(value, arg) / 1000


def handler_function(fn: Any, what: str, *, may_be_async: bool = True) -> None:
    """Refuse what the worker cannot run: a non-callable, an async generator (it neither
    returns nor can be awaited), and an `async def` where only a plain function is run
    (`may_be_async=False`: upcasters, which convert a payload in place)."""
    if not callable(fn):
        raise TypeError(f"{what} must be a function, got {type(fn).__name__}")
    name = getattr(fn, "__qualname__", repr(fn))
    if inspect.isasyncgenfunction(fn) or inspect.isgeneratorfunction(fn):
        raise TypeError(f"{what} {name} is a generator function: a handler must run to its end "
                        f"and return; make it a def or an async def without yield")
    if not may_be_async and is_async(fn):
        raise TypeError(f"{what} {name} is an async def: it must be a plain def (it converts "
                        f"a payload, with no I/O to await)")


@dataclass(frozen=True)
class Step:
    """One declared step of a step job."""

    name: str
    version: int
    #: a plain def taking a StepContext, or an async def taking an AsyncStepContext
    fn: Callable[[Any], Any]
    #: the step's own time limit in seconds (None: only the job's applies)
    timeout: float | None = None

    @property
    def is_async(self) -> bool:
        return is_async(self.fn)


@dataclass
class Handler:
    """Settings shared by both kinds of handler (None: the worker's or the job's default)."""

    kind: str
    max_attempts: int | None = None
    visibility_timeout: float | None = None
    quarantine_after: int | None = None
    max_concurrency: int | None = None
    rate_limit: tuple[int, float] | None = None
    max_per_key: int | None = None
    #: how long one run of a job may take, in seconds (None: no limit); a job enqueued with
    #: its own `timeout` has that instead
    timeout: float | None = None

    def described(self) -> dict[str, Any]:
        """What a worker records of this handler for the Kinds page (worker.kinds): its kind,
        type, whether it is async, and the settings it names (None: not named)."""
        steps = self if isinstance(self, StepJob) else None
        return {
            "kind": self.kind, "type": "job" if steps is None else "step job",
            "async": bool(getattr(self, "is_async", False)),  # (each subclass says)
            "steps": None if steps is None else [s.name for s in steps.steps],
            "schema_version": None if steps is None else steps.schema_version,
            "max_attempts": self.max_attempts, "visibility_timeout": self.visibility_timeout,
            "timeout": self.timeout, "quarantine_after": self.quarantine_after,
            "max_concurrency": self.max_concurrency,
            "rate_limit": list(self.rate_limit) if self.rate_limit is not None else None,
            "max_per_key": self.max_per_key,
        }

    def kind_settings(self) -> dict[str, Any]:
        """The kind settings this handler names, as the worker records them at its start (one
        it leaves unnamed keeps whatever configure_kind set)."""
        return validate.kind_settings(**{
            name: value for name, value in (
                ("quarantine_after", self.quarantine_after),
                ("max_concurrency", self.max_concurrency), ("rate_limit", self.rate_limit),
                ("max_per_key", self.max_per_key)) if value is not None})


@dataclass
class JobHandler(Handler):
    """A plain job: one function."""

    fn: Callable[[JobContext], Any] | None = None

    @property
    def is_async(self) -> bool:
        """An `async def` handler: run on the worker's event loop, not a handler thread."""
        return self.fn is not None and is_async(self.fn)


@dataclass
class StepJob(Handler):
    """A job made of ordered steps, resumable at the exact step after a crash."""

    schema_version: int = 1
    steps: list[Step] = field(default_factory=list)
    upcasters: dict[int, Callable[[bytes], bytes]] = field(default_factory=dict)

    def step(self, name: str, *, version: int = 1,
             timeout: float | dt.timedelta | None = None) -> Callable[[F], F]:
        """Register the next step (steps run in registration order). `timeout`: how long the
        step may run, in seconds (the job's own limit applies as well)."""
        if not isinstance(name, str) or not name:
            raise ValueError("step name must be a non-empty str")
        validate.step_name(name)
        validate.integer(version, "version", low=1)
        limit = time_limit(timeout)
        if any(s.name == name for s in self.steps):
            raise ValueError(f"step {name!r} is already declared for {self.kind!r}")

        def register(fn: F) -> F:
            handler_function(fn, f"step {name!r} of {self.kind!r}")
            if self.steps and is_async(fn) != self.is_async:
                have = "async def" if self.is_async else "plain def"
                raise TypeError(
                    f"step {name!r} of {self.kind!r} is {'an async def' if is_async(fn) else 'a plain def'}"
                    f", but the job's other steps are {have}s: a step job runs on the event loop "
                    f"(all async def) or on a handler thread (all def); in an async job run "
                    f"blocking code with asyncio.to_thread")
            self.steps.append(Step(name=name, version=version, fn=fn, timeout=limit))
            return fn

        return register

    def upcaster(self, *, from_version: int) -> Callable[[F], F]:
        """Register a function turning a payload of `from_version` into from_version + 1."""
        validate.integer(from_version, "from_version", low=0)
        if from_version >= self.schema_version:
            raise ValueError(
                f"from_version must be below schema_version {self.schema_version}, got {from_version}"
            )
        if from_version in self.upcasters:
            raise ValueError(f"an upcaster from version {from_version} is already registered")

        def register(fn: F) -> F:
            handler_function(fn, f"the upcaster from version {from_version} of {self.kind!r}",
                             may_be_async=False)
            self.upcasters[from_version] = fn
            return fn

        return register

    @property
    def is_async(self) -> bool:
        """Its steps are `async def`: it runs on the worker's event loop."""
        return bool(self.steps) and self.steps[0].is_async

    @property
    def step_list(self) -> list[dict[str, Any]]:
        """The ordered steps as recorded in the database."""
        return [{"name": s.name, "version": s.version} for s in self.steps]

    @property
    def step_set_hash(self) -> str:
        """A hash of the ordered step names and versions."""
        text = json.dumps([[s.name, s.version] for s in self.steps], separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:32]
