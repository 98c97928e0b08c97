"""WorkerSettings: a worker's whole configuration, one frozen value checked once.

`Worker`, `AsyncWorker` and `pgqueue worker` all take one (the CLI builds it from its flags),
so a setting has one name, one unit (seconds for every duration) and one check, wherever it
is given. The checks that need the App (an async handler needs async slots; renewals must
come before the shortest visibility timeout) are made by `for_app`, which fills the settings
left to it.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

from pgqueue import validate
from pgqueue.db import connection

if TYPE_CHECKING:
    from pgqueue.runtime.app import App

#: Coroutines in flight when the App has async handlers and the settings name no number.
DEFAULT_ASYNC_CONCURRENCY = 100


@dataclasses.dataclass(frozen=True)
class WorkerSettings:
    """How a worker runs. Every duration is in seconds; each field is checked when the
    settings are made, and a bad one raises ValueError or TypeError naming it."""

    #: The streams it leases from (a str is one stream); kept as a tuple.
    streams: Sequence[str] = ("default",)
    #: Handler threads: plain `def` handlers run on them, one job each at a time.
    concurrency: int = 4
    #: Coroutines in flight for the App's `async def` handlers, apart from the threads.
    #: None: DEFAULT_ASYNC_CONCURRENCY when the App has any, else none.
    async_concurrency: int | None = None
    #: Jobs leased ahead of a free slot (0: none). None: automatic, about a quarter second
    #: of work at the handlers' recent rate. A job leased ahead costs nothing if the worker
    #: dies before its handler starts.
    prefetch: int | None = None
    #: How long a lease lasts without a renewal; a handler's own visibility_timeout wins.
    visibility_timeout: float = 30.0
    #: How often held leases are renewed (and checkpoints written). None: a third of the
    #: shortest visibility timeout.
    renew_interval: float | None = None
    #: How often the lease loop looks for jobs when no notification woke it.
    poll_interval: float = 1.0
    #: Whether this worker runs the maintenance passes (reclaim, cron, pruning), elected.
    maintenance: bool = True
    #: Seconds between maintenance passes.
    maintenance_interval: float = 1.0
    #: How long a drain waits for running handlers before giving their jobs back.
    grace_period: float = 30.0
    #: This machine's node number, recorded on every lease.
    node: int = 0
    #: Serve the worker's Prometheus metrics on this port (0: any free port); None: none.
    metrics_port: int | None = None
    #: The address the metrics listen on.
    metrics_host: str = "127.0.0.1"
    #: How long reaching the server may take. A database that does not exist or refuses the
    #: role stops the worker at once; an unreachable one is an outage it waits out.
    connect_timeout: float = connection.CONNECT_TIMEOUT
    #: A direct connection for LISTEN when the DSN goes through a pooler in transaction
    #: mode (which delivers no notification). None: the DSN itself, or polling behind a pooler.
    listen_dsn: str | None = None
    #: Whether the DSN goes through such a pooler (then no statement is prepared). None:
    #: detected when connecting.
    pooled: bool | None = None

    def __post_init__(self) -> None:
        streams: Any = self.streams
        if isinstance(streams, str):
            streams = [streams]
        if not isinstance(streams, Sequence):
            raise TypeError(f"streams must be a stream name or a sequence of them, got "
                            f"{type(streams).__name__}")
        checked = tuple(validate.stream(s, "streams") for s in streams)
        if not checked:
            raise ValueError("streams must name at least one stream")
        self._set("streams", checked)
        self._set("concurrency", validate.integer(self.concurrency, "concurrency", low=1,
                                                  high=10_000))
        if self.async_concurrency is not None:
            self._set("async_concurrency", validate.integer(
                self.async_concurrency, "async_concurrency", low=0, high=100_000))
        if self.prefetch is not None:
            self._set("prefetch", validate.integer(self.prefetch, "prefetch", low=0,
                                                   high=100_000))
        for name in ("visibility_timeout", "poll_interval", "maintenance_interval",
                     "connect_timeout"):
            self._set(name, validate.seconds(getattr(self, name), name, positive=True))
        if self.renew_interval is not None:
            self._set("renew_interval", validate.seconds(self.renew_interval, "renew_interval",
                                                         positive=True))
        self._set("grace_period", validate.seconds(self.grace_period, "grace_period"))
        if not isinstance(self.maintenance, bool):
            raise TypeError(f"maintenance must be True or False, got {self.maintenance!r}")
        self._set("node", validate.integer(self.node, "node", low=0, high=2**31 - 1))
        if self.metrics_port is not None:
            self._set("metrics_port", validate.integer(self.metrics_port, "metrics_port", low=0,
                                                       high=65535))
        if not isinstance(self.metrics_host, str) or not self.metrics_host:
            raise TypeError("metrics_host must be a non-empty str (an address to listen on)")
        if self.listen_dsn is not None and (not isinstance(self.listen_dsn, str)
                                            or not self.listen_dsn):
            raise TypeError("listen_dsn must be a non-empty connection string, or None")
        if self.pooled is not None and not isinstance(self.pooled, bool):
            raise TypeError(f"pooled must be True, False or None, got {self.pooled!r}")

    def _set(self, name: str, value: object) -> None:
        """Store a checked (normalised) value on the frozen instance, during __post_init__."""
        object.__setattr__(self, name, value)

    @classmethod
    def given(cls, settings: WorkerSettings | None, options: Mapping[str, Any]
              ) -> WorkerSettings:
        """What a constructor was given: `settings` (or the defaults) with the fields named
        in `options` replaced."""
        if settings is not None and not isinstance(settings, WorkerSettings):
            raise TypeError(f"settings must be a pgqueue.WorkerSettings, got "
                            f"{type(settings).__name__}")
        base = cls() if settings is None else settings
        return base.replace(**options) if options else base

    def replace(self, **changes: Any) -> WorkerSettings:
        """A copy with `changes` applied, checked again (an unknown name is a TypeError)."""
        unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            raise TypeError(f"WorkerSettings has no setting {', '.join(map(repr, unknown))}")
        return dataclasses.replace(self, **changes)

    def for_app(self, app: App) -> WorkerSettings:
        """These settings with what was left to the App filled in (async_concurrency,
        renew_interval), checked against it: async handlers need async slots, and renewals
        must come before the shortest visibility timeout of the worker and its handlers."""
        async_kinds = sorted(k for k, h in app.handlers.items() if h.is_async)
        slots = self.async_concurrency
        if slots is None:
            slots = DEFAULT_ASYNC_CONCURRENCY if async_kinds else 0
        if async_kinds and not slots:
            raise ValueError(f"async_concurrency must be at least 1: the app's handlers of "
                             f"{', '.join(map(repr, async_kinds))} are async def")
        shortest = min([self.visibility_timeout] + [
            h.visibility_timeout for h in app.handlers.values() if h.visibility_timeout])
        renew = shortest / 3.0 if self.renew_interval is None else self.renew_interval
        if renew >= shortest:
            raise ValueError(f"renew_interval ({renew}s) must be shorter than the visibility "
                             f"timeout ({shortest}s), or leases expire between renewals")
        return dataclasses.replace(self, async_concurrency=slots, renew_interval=renew)


class WorkerOptions(TypedDict, total=False):
    """WorkerSettings' fields as keywords of `Worker(app, dsn, concurrency=8)` and
    `AsyncWorker`, so that a type checker checks each name and value there as it does in
    WorkerSettings(...); tests/unit/test_worker_settings.py keeps the two field for field."""

    streams: Sequence[str] | str
    concurrency: int
    async_concurrency: int | None
    prefetch: int | None
    visibility_timeout: float
    renew_interval: float | None
    poll_interval: float
    maintenance: bool
    maintenance_interval: float
    grace_period: float
    node: int
    metrics_port: int | None
    metrics_host: str
    connect_timeout: float
    listen_dsn: str | None
    pooled: bool | None


class _Setting:
    """A read-only attribute that is one of its owner's `settings` (Worker keeps the names
    it had before WorkerSettings, for code that reads them)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, owner_object: Any, owner: type | None = None) -> Any:
        return self if owner_object is None else getattr(owner_object.settings, self.name)


def setting() -> Any:
    """`concurrency = setting()` in a class body: the attribute reads settings.concurrency."""
    return _Setting()
