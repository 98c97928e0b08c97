"""The worker's wake-up signal: several lease loops wait on it and none may miss a wake-up; and
the listener thread, which never dies."""
from __future__ import annotations

import logging
import threading
import time

import pytest

from pgqueue.runtime.wakeup import listen_loop
from pgqueue.runtime.worker import Wakeup


def test_a_wakeup_between_looking_and_waiting_is_not_lost() -> None:
    wake = Wakeup()
    seen = wake.generation
    wake.set()  # arrives after the waiter looked for work, before it waits
    started = time.monotonic()
    wake.wait(seen, 5.0)
    assert time.monotonic() - started < 1.0


class Watched(threading.Condition):
    """A Condition that says when `expected` threads wait on it at once."""

    def __init__(self, expected: int) -> None:
        super().__init__(threading.Lock())
        self.expected, self.waiting = expected, 0
        self.all_waiting = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        self.waiting += 1  # the lock is held here, and again once the wait returns
        if self.waiting == self.expected:
            self.all_waiting.set()
        try:
            return super().wait(timeout)
        finally:
            self.waiting -= 1


def test_every_waiter_is_woken_and_a_current_generation_waits_for_the_timeout() -> None:
    wake = Wakeup()
    watched = wake._cond = Watched(3)
    seen = wake.generation
    woken: list[float] = []

    def waiter() -> None:
        wake.wait(seen, 5.0)
        woken.append(time.monotonic())

    threads = [threading.Thread(target=waiter) for _ in range(3)]
    for t in threads:
        t.start()
    assert watched.all_waiting.wait(5), "the three never waited together"
    assert woken == []
    set_at = time.monotonic()
    wake.set()
    for t in threads:
        t.join(2.0)
    assert len(woken) == 3 and all(w - set_at < 1.0 for w in woken)

    started = time.monotonic()
    wake.wait(wake.generation, 0.2)  # nothing new: waits out its timeout
    assert time.monotonic() - started >= 0.19


# -- the listener thread: it never dies, and says so when something unexpected happens --------


def test_the_listener_logs_an_unexpected_error_and_keeps_going(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="pgqueue.worker")
    finished = threading.Event()
    calls: list[float] = []

    def dsn() -> str:
        calls.append(time.monotonic())
        if len(calls) == 2:
            finished.set()
        raise RuntimeError("a bug in the listener")

    listen_loop(Wakeup(), ["default"], dsn=dsn, finished=finished, worker_id=lambda: 7)
    assert len(calls) == 2  # it went on after the first error
    failed = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(failed) == 2
    assert all(r.exc_info is not None and "a bug in the listener" in str(r.exc_info[1])
               for r in failed)


def test_the_listener_reconnects_quietly_when_the_server_is_unreachable(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="pgqueue.worker")
    finished = threading.Event()
    calls: list[float] = []

    def dsn() -> str:
        calls.append(time.monotonic())
        if len(calls) == 2:
            finished.set()
        return "host=/nonexistent-pgqueue-socket-dir port=1 dbname=x connect_timeout=1"

    listen_loop(Wakeup(), ["default"], dsn=dsn, finished=finished, worker_id=lambda: 7)
    assert len(calls) == 2
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert any("reconnecting" in r.getMessage() for r in caplog.records)
