"""Wake-ups: how an idle lease loop learns there may be work before its poll interval ends.

Two things wake the lease loops: a job enqueued on one of the worker's streams (Postgres
LISTEN/NOTIFY, received by the listener thread here) and capacity freed by a finished job
(held.py). Both set one `Wakeup`, which several lease loops wait on at once. Polling stays
the fallback, so a lost notification only costs latency. The listener also hears an
operator's cancel of a leased job (pgqueue_cancel, the lease id): the worker holding it renews
at once, and that renewal (which reads the job's row: anyone may send a notification) tells
the handler; the regular renewal does when the notification is lost.

The listener reconnects quietly (DEBUG) when its connection fails, and logs anything else with
its traceback; either way it goes on after a backoff.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

import psycopg

from pgqueue.db import connection, run
from pgqueue.errors import PgQueueError
from pgqueue.telemetry.outage import FIRST_DELAY_SECONDS, next_delay

# The worker's logger: these lines are the worker's, and operators filter on its name.
log = logging.getLogger("pgqueue.worker")

NOTIFY_CHANNEL = run.NOTIFY_CHANNEL
#: An operator asked to cancel a leased job (pgqueue.cancel); the payload is its lease id.
CANCEL_CHANNEL = "pgqueue_cancel"


class Wakeup:
    """A wake-up signal several lease loops can wait on without losing one: a waiter passes
    the generation it saw before it looked for work, and returns as soon as it changed."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self.generation = 0

    def set(self) -> None:
        with self._cond:
            self.generation += 1
            self._cond.notify_all()

    def wait(self, seen: int, timeout: float) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self.generation != seen, timeout)


def listen_loop(wake: Wakeup, streams: Sequence[str], *, dsn: Callable[[], str],
                finished: threading.Event, worker_id: Callable[[], int],
                on_cancel: Callable[[int], None] | None = None,
                connect_timeout: float | None = None) -> None:
    """The listener thread: set `wake` on every notification about one of `streams`, and call
    `on_cancel(lease_id)` on every cancel request (the renewal is the fallback), until
    `finished`. It reconnects with backoff, and to the new leader when `dsn()` changes."""
    delay = FIRST_DELAY_SECONDS
    while not finished.is_set():
        try:
            current = dsn()
            with connection.connect(current, connect_timeout=connect_timeout) as conn:
                run.listen(conn, NOTIFY_CHANNEL)
                if on_cancel is not None:
                    run.listen(conn, CANCEL_CHANNEL)
                delay = FIRST_DELAY_SECONDS
                while not finished.is_set() and current == dsn():
                    for note in conn.notifies(timeout=1.0):
                        if note.channel == CANCEL_CHANNEL:
                            if on_cancel is not None and note.payload.isdigit():
                                on_cancel(int(note.payload))
                        elif note.payload in streams:
                            wake.set()
        except (PgQueueError, psycopg.Error) as exc:  # the connection: reconnect
            log.debug("worker %s: listener reconnecting: %s", worker_id(), exc)
            finished.wait(delay)
            delay = next_delay(delay)
        except Exception:
            log.exception("worker %s: listener failed unexpectedly; reconnecting in %.1fs",
                          worker_id(), delay)
            finished.wait(delay)
            delay = next_delay(delay)
