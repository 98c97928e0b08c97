"""App: the handlers a worker can run, by kind (their declarations: jobdefs.py).

A plain job is one function; a step job an ordered list of steps. `App.verdict` is the
compatibility rule (compat.py) for this App's handlers: what the worker decides for a job it
leases, and what `Queue.deploy_check` asks before a deploy.
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pgqueue import validate
from pgqueue.models import Checkpoint, NewJob, Verdict
from pgqueue.runtime import compat
from pgqueue.runtime.jobdefs import F, JobHandler, Step, StepJob, handler_function, time_limit

if TYPE_CHECKING:
    from pgqueue.client.queue import Queue
    from pgqueue.client.queue_async import AsyncQueue

__all__ = ["App", "JobHandler", "Step", "StepJob"]


class App:
    """A registry of handlers by kind."""

    def __init__(self) -> None:
        self.handlers: dict[str, JobHandler | StepJob] = {}

    def verdict(self, kind: str | None, cp: Checkpoint,
                step_list: Callable[[str], list[dict[str, Any]] | None]) -> Verdict | None:
        """What a worker running this App would decide for a job of `kind` with checkpoint
        `cp`: None (it would run it) or why it would park it as undecodable (compat.verdict).

        :param step_list: a recorded step list by hash (called only when the rule needs one).
        """
        return compat.verdict(self.handlers, kind, cp, step_list)

    @property
    def has_async(self) -> bool:
        """Whether any handler is `async def` (the worker then runs an event loop for them)."""
        return any(h.is_async for h in self.handlers.values())

    @property
    def has_sync(self) -> bool:
        """Whether any handler is a plain def (run on handler threads)."""
        return any(not h.is_async for h in self.handlers.values())

    def _check_new(self, kind: str, max_attempts: int | None, visibility_timeout: float | None,
                   quarantine_after: int | None, limits: dict[str, Any]) -> None:
        validate.kind(kind)
        if kind in self.handlers:
            raise ValueError(f"kind {kind!r} already has a handler")
        if max_attempts is not None:
            validate.integer(max_attempts, "max_attempts", low=0)
        if visibility_timeout is not None:
            validate.seconds(visibility_timeout, "visibility_timeout", positive=True)
        validate.kind_settings(**{k: v for k, v in (*limits.items(),
                                                     ("quarantine_after", quarantine_after))
                                  if v is not None})

    def job(self, kind: str, *, max_attempts: int | None = None,
            visibility_timeout: float | None = None, quarantine_after: int | None = None,
            max_concurrency: int | None = None, rate_limit: tuple[int, float] | None = None,
            max_per_key: int | None = None,
            timeout: float | dt.timedelta | None = None) -> Callable[[F], F]:
        """Register a plain job handler for `kind`. The limits (see Queue.configure_kind) are
        recorded for the kind when a worker running this App starts. `timeout`: how long one
        run may take, in seconds (docs: Workers and steps, Time limits); a job enqueued with
        its own has that."""
        limits: dict[str, Any] = {"max_concurrency": max_concurrency, "rate_limit": rate_limit,
                                  "max_per_key": max_per_key}
        self._check_new(kind, max_attempts, visibility_timeout, quarantine_after, limits)
        limit = time_limit(timeout)

        def register(fn: F) -> F:
            handler_function(fn, f"the handler of {kind!r}")
            self.handlers[kind] = JobHandler(kind=kind, fn=fn, max_attempts=max_attempts,
                                             visibility_timeout=visibility_timeout,
                                             quarantine_after=quarantine_after, timeout=limit,
                                             **limits)
            return fn

        return register

    def step_job(self, kind: str, *, schema_version: int = 1, max_attempts: int | None = None,
                 visibility_timeout: float | None = None, quarantine_after: int | None = None,
                 max_concurrency: int | None = None, rate_limit: tuple[int, float] | None = None,
                 max_per_key: int | None = None,
                 timeout: float | dt.timedelta | None = None) -> StepJob:
        """Declare a step job for `kind`; add steps with `@job.step(name)`. Limits as for
        `job`; `timeout` bounds one run of the job (each step may have its own as well)."""
        limits: dict[str, Any] = {"max_concurrency": max_concurrency, "rate_limit": rate_limit,
                                  "max_per_key": max_per_key}
        self._check_new(kind, max_attempts, visibility_timeout, quarantine_after, limits)
        validate.integer(schema_version, "schema_version", low=1)
        handler = StepJob(kind=kind, schema_version=schema_version, max_attempts=max_attempts,
                          visibility_timeout=visibility_timeout, quarantine_after=quarantine_after,
                          timeout=time_limit(timeout), **limits)
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
        """Enqueue a job of `kind` with the handler's defaults (its max_attempts and
        schema_version), in the caller's transaction with `conn`, as Queue.enqueue. With an
        AsyncQueue: `await app.aenqueue(...)`."""
        from pgqueue.client.queue_async import AsyncQueue

        if isinstance(queue, AsyncQueue):
            raise TypeError("app.enqueue takes a Queue; with an AsyncQueue, "
                            "await app.aenqueue(queue, kind, payload, ...)")
        return queue.enqueue_many([self.new_job(kind, payload, **options)], conn=conn)[0]

    async def aenqueue(self, queue: AsyncQueue, kind: str, payload: Any, *,
                       conn: object | None = None, **options: Any) -> int:
        """`enqueue` for an AsyncQueue: a job of `kind` with the handler's defaults."""
        from pgqueue.client.queue_async import AsyncQueue

        if not isinstance(queue, AsyncQueue):
            raise TypeError("app.aenqueue takes an AsyncQueue; with a Queue, call "
                            "app.enqueue(queue, kind, payload, ...)")
        return (await queue.enqueue_many([self.new_job(kind, payload, **options)], conn=conn))[0]
