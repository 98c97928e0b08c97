"""App: the handlers a worker can run, by kind.

A plain job is one function. A step job is an ordered list of steps; its step-set hash is a
hash of the ordered step names and versions (never of source code, so cosmetic deploys do not
strand in-flight jobs), and its schema_version is the payload's version, with upcasters to
bring older payloads forward.
"""
from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from pgqueue import validate
from pgqueue.models import NewJob

if TYPE_CHECKING:
    from pgqueue.queue import Queue
    from pgqueue.steps import JobContext, StepContext

F = TypeVar("F", bound=Callable[..., Any])


def plain_function(fn: Any, what: str) -> None:
    """Refuse what a handler thread cannot run: a non-callable, or an `async def` (called on a
    thread it returns a coroutine nobody awaits, and the job would be acked with its work
    never done)."""
    if not callable(fn):
        raise TypeError(f"{what} must be a function, got {type(fn).__name__}")
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        name = getattr(fn, "__qualname__", repr(fn))
        raise TypeError(f"{what} {name} is an async def: pgqueue runs handlers on threads, and "
                        f"a coroutine would never be awaited (its job acked undone); make it "
                        f"a plain def (it may call asyncio.run for async code)")


@dataclass(frozen=True)
class Step:
    """One declared step of a step job."""

    name: str
    version: int
    fn: Callable[[StepContext], None]


@dataclass
class Handler:
    """Settings shared by both kinds of handler (None: the worker's or the job's default)."""

    kind: str
    max_attempts: int | None = None
    visibility_timeout: float | None = None
    quarantine_after: int | None = None


@dataclass
class JobHandler(Handler):
    """A plain job: one function."""

    fn: Callable[[JobContext], None] | None = None


@dataclass
class StepJob(Handler):
    """A job made of ordered steps, resumable at the exact step after a crash."""

    schema_version: int = 1
    steps: list[Step] = field(default_factory=list)
    upcasters: dict[int, Callable[[bytes], bytes]] = field(default_factory=dict)

    def step(self, name: str, *, version: int = 1) -> Callable[[F], F]:
        """Register the next step (steps run in registration order)."""
        if not isinstance(name, str) or not name:
            raise ValueError("step name must be a non-empty str")
        validate.step_name(name)
        validate.integer(version, "version", low=1)
        if any(s.name == name for s in self.steps):
            raise ValueError(f"step {name!r} is already declared for {self.kind!r}")

        def register(fn: F) -> F:
            plain_function(fn, f"step {name!r} of {self.kind!r}")
            self.steps.append(Step(name=name, version=version, fn=fn))
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
            plain_function(fn, f"the upcaster from version {from_version} of {self.kind!r}")
            self.upcasters[from_version] = fn
            return fn

        return register

    @property
    def step_list(self) -> list[dict[str, Any]]:
        """The ordered steps as recorded in the database."""
        return [{"name": s.name, "version": s.version} for s in self.steps]

    @property
    def step_set_hash(self) -> str:
        """A hash of the ordered step names and versions."""
        text = json.dumps([[s.name, s.version] for s in self.steps], separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:32]


class App:
    """A registry of handlers by kind."""

    def __init__(self) -> None:
        self.handlers: dict[str, JobHandler | StepJob] = {}

    def _check_new(self, kind: str, max_attempts: int | None, visibility_timeout: float | None,
                   quarantine_after: int | None) -> None:
        validate.kind(kind)
        if kind in self.handlers:
            raise ValueError(f"kind {kind!r} already has a handler")
        if max_attempts is not None:
            validate.integer(max_attempts, "max_attempts", low=0)
        if visibility_timeout is not None:
            validate.seconds(visibility_timeout, "visibility_timeout", positive=True)
        if quarantine_after is not None:
            validate.integer(quarantine_after, "quarantine_after", low=1)

    def job(self, kind: str, *, max_attempts: int | None = None,
            visibility_timeout: float | None = None,
            quarantine_after: int | None = None) -> Callable[[F], F]:
        """Register a plain job handler for `kind`."""
        self._check_new(kind, max_attempts, visibility_timeout, quarantine_after)

        def register(fn: F) -> F:
            plain_function(fn, f"the handler of {kind!r}")
            self.handlers[kind] = JobHandler(kind=kind, fn=fn, max_attempts=max_attempts,
                                             visibility_timeout=visibility_timeout,
                                             quarantine_after=quarantine_after)
            return fn

        return register

    def step_job(self, kind: str, *, schema_version: int = 1, max_attempts: int | None = None,
                 visibility_timeout: float | None = None,
                 quarantine_after: int | None = None) -> StepJob:
        """Declare a step job for `kind`; add steps with `@job.step(name)`."""
        self._check_new(kind, max_attempts, visibility_timeout, quarantine_after)
        validate.integer(schema_version, "schema_version", low=1)
        handler = StepJob(kind=kind, schema_version=schema_version, max_attempts=max_attempts,
                          visibility_timeout=visibility_timeout, quarantine_after=quarantine_after)
        self.handlers[kind] = handler
        return handler

    def new_job(self, kind: str, payload: Any, **options: Any) -> NewJob:
        """A NewJob for `kind` with the handler's defaults (max_attempts, schema_version)."""
        handler = self.handlers.get(kind)
        if handler is None:
            raise ValueError(f"kind {kind!r} has no handler in this app")
        if handler.max_attempts is not None:
            options.setdefault("max_attempts", handler.max_attempts)
        if isinstance(handler, StepJob):
            options.setdefault("schema_version", handler.schema_version)
        return NewJob(payload, kind=kind, **options)

    def enqueue(self, queue: Queue, kind: str, payload: Any, *, conn: object | None = None,
                **options: Any) -> int:
        """Enqueue a job of `kind` with the handler's defaults (in the caller's transaction
        with `conn`, as Queue.enqueue)."""
        return queue.enqueue_many([self.new_job(kind, payload, **options)], conn=conn)[0]
