"""Time limits: one watchdog thread that tells a job it ran past its limit, and gives up on
a handler that does not stop.

A job's limit (its handler's `timeout`, a step's, or the job's own from enqueue) is a deadline
on `time.monotonic()` kept in its Held (running.py), which tells this watchdog of each new one.
At the deadline the job is told: `Held.time_out` sets its flag, so a plain handler's next
`ctx.advance()`, `ctx.check_cancelled()` or step boundary raises JobTimeout, and an async
handler's task is cancelled. The handler fails like any other (its job retried by its policy).

One that has not returned a grace period later (the worker's `grace_period`) is given up on:
`abandon` records the failure for it (JobTimeout, with where it was), so its job is retried by
its policy now, and frees its slot for other jobs. Python cannot stop a thread, so a stuck plain
handler's thread runs on until the handler returns; its lease is gone by then, so whatever it
does afterwards about the job is refused (docs: Workers and steps, Time limits).

No job without a limit costs anything here: nothing is armed, and the thread starts with the
first limit. A deadline that changed (a step ended) or a job that ended is skipped when due,
and dropped sooner when the heap has doubled since it was last pruned (jobs of an hour's limit
that end in a millisecond would otherwise keep an hour's worth of entries).
"""
from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

from pgqueue.runtime.running import Held

log = logging.getLogger("pgqueue.worker")

#: Entries in the heap before the first pruning of those no longer due to act.
PRUNE_AT = 1024


class Deadlines:
    """A heap of (due time, job) and the thread that acts when each comes due."""

    def __init__(self, grace: Callable[[], float], abandon: Callable[[Held, float], None]) -> None:
        """
        :param grace: the worker's grace period now (a second signal zeroes it).
        :param abandon: called with a job whose handler is still running `grace` seconds past
            its limit: record its failure and free its slot (worker.py).
        """
        self._grace = grace
        self._abandon = abandon
        self._heap: list[tuple[float, int, bool, Held]] = []
        self._order = itertools.count()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._prune_at = PRUNE_AT

    def __len__(self) -> int:
        """Entries in the heap (those due to act, and stale ones not pruned yet)."""
        with self._cond:
            return len(self._heap)

    def arm(self, held: Held, at: float) -> None:
        """`held`'s limit in force ends at `at` (time.monotonic()); any thread."""
        self._push(at, False, held)

    def _push(self, at: float, giving_up: bool, held: Held) -> None:
        with self._cond:
            if self._stopped:
                return
            heapq.heappush(self._heap, (at, next(self._order), giving_up, held))
            if len(self._heap) >= self._prune_at:
                self._heap = [e for e in self._heap if _due_to_act(*e)]
                heapq.heapify(self._heap)
                self._prune_at = max(PRUNE_AT, 2 * len(self._heap))
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="pgqueue-deadlines",
                                                daemon=True)
                self._thread.start()
            elif self._heap[0][3] is held:
                self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._heap.clear()
            self._cond.notify()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and (not self._heap
                                             or self._heap[0][0] > time.monotonic()):
                    self._cond.wait(None if not self._heap
                                    else self._heap[0][0] - time.monotonic())
                if self._stopped:
                    return
                at, _, giving_up, held = heapq.heappop(self._heap)
            try:
                self._due(at, giving_up, held)
            except Exception:  # never let the watchdog die: limits would silently stop
                log.exception("time limits: acting on job %s failed", held.lease.job_id)

    def _due(self, at: float, giving_up: bool, held: Held) -> None:
        if not _due_to_act(at, 0, giving_up, held) or held.lost.is_set():
            return  # it ended, or a step ended meanwhile (its limit no longer holds)
        if not giving_up:
            if held.time_out():
                self._push(time.monotonic() + self._grace(), True, held)
        elif not held.finishing.is_set():
            self._abandon(held, self._grace())


def _due_to_act(at: float, _order: int, giving_up: bool, held: Held) -> bool:
    """Whether a heap entry still means something: its job's handler is still running and,
    for a limit (not the giving up a grace period later), that limit is still the one in force."""
    limit = held.time_limit
    return limit is not None and not limit.ended and (giving_up or limit.deadline == at)
