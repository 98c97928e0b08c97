"""AsyncQueue behind Queue's blocking interface, so that one test body checks both APIs.

Queue is generated from AsyncQueue's source (tools/generate.py); the sync tests alone would
check the generated code and not its source. A module marked
`pytest.mark.flavours("sync", "async")` runs each test that takes `q` or `queue_api` once
with Queue and once with `BlockingAsyncQueue`, which runs every coroutine of an AsyncQueue on
one event loop in a thread of its own and hands back its value or raises its exception, as
the generated Queue would. Like Queue, it connects in its constructor.
"""
from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import pgqueue

T = TypeVar("T")


class _Loop:
    """One event loop in a daemon thread, shared by every bridged queue of a process."""

    _lock = threading.Lock()
    _loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def get(cls) -> asyncio.AbstractEventLoop:
        with cls._lock:
            if cls._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="asyncbridge",
                                 daemon=True).start()
                cls._loop = loop
            return cls._loop


def call(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine on the bridge's loop and wait for its outcome."""
    return asyncio.run_coroutine_threadsafe(coro, _Loop.get()).result()


class BlockingAsyncQueue:
    """An AsyncQueue whose methods block: the same arguments, values and errors as Queue."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        inner = kwargs.pop("_inner", None)
        self._q: pgqueue.AsyncQueue = inner or pgqueue.AsyncQueue(*args, **kwargs)
        if inner is None:
            call(self._q.__aenter__())  # Queue connects in its constructor

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._q, name)
        if not callable(attr):
            return attr

        def blocking(*args: Any, **kwargs: Any) -> Any:
            result = attr(*args, **kwargs)
            if inspect.iscoroutine(result):
                return call(result)
            if isinstance(result, pgqueue.AsyncQueue):
                return BlockingAsyncQueue(_inner=result)
            return result

        return blocking

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "_q":
            object.__setattr__(self, name, value)
        else:
            setattr(self._q, name, value)

    @contextlib.contextmanager
    def connection(self) -> Iterator[Any]:
        """The AsyncQueue's connection (an AsyncConnection: a test that runs its own statements
        on it is a sync-only test)."""
        cm = self._q.connection()
        conn = call(cm.__aenter__())
        try:
            yield conn
        except BaseException as exc:
            if not call(cm.__aexit__(type(exc), exc, exc.__traceback__)):
                raise
        else:
            call(cm.__aexit__(None, None, None))

    def close(self) -> None:
        call(self._q.close())

    def __enter__(self) -> BlockingAsyncQueue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: What opens a test's queues (the `queue_api` fixture): Queue or BlockingAsyncQueue.
QueueApi = Callable[..., pgqueue.Queue]
