"""A database outage as the logs tell it: one line when it starts, at most one a minute while
it lasts, one when it ends with its length.

Every loop of a worker (leasing, renewal, registration, maintenance) meets the same outage at
once and retries on its own; each reports here instead of logging, so a two-minute outage is
four lines, not one per loop per retry. The backoff (`next_delay`, `jittered`) is capped and
jittered, so workers that lost the same server do not come back in step.
"""
from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable

#: At most one line a minute while an outage lasts.
REPEAT_SECONDS = 60.0
#: Just after an outage ends, the connections a pool kept from before it fail once each on
#: their next use: failures within this many seconds of the end start a new outage only if
#: they last that long (a lone stale connection is not an outage).
SETTLE_SECONDS = 10.0
#: The longest wait between two attempts. Short: a call that cannot get a connection already
#: waits its connect timeout in the pool, so the pauses only space out calls that failed fast
#: (a connection the server dropped), and one pause too long delays the recovery by as much.
MAX_DELAY_SECONDS = 1.0


#: The first wait after a failure.
FIRST_DELAY_SECONDS = 0.1


def next_delay(previous: float) -> float:
    """The wait after `previous`: doubled, up to MAX_DELAY_SECONDS."""
    return min(previous * 2, MAX_DELAY_SECONDS)


def jittered(wait: float) -> float:
    """`wait` less up to half of it, at random: processes that lost the same server do not
    come back in step."""
    return wait * random.uniform(0.5, 1.0)


class Outage:
    """The outage one process is in, if any, shared by its threads."""

    def __init__(self, log: logging.Logger, who: Callable[[], str], *,
                 repeat: float = REPEAT_SECONDS, clock: Callable[[], float] = time.monotonic,
                 back_on: str | None = None) -> None:
        """
        :param who: the prefix of each line (`worker 7`, `maintenance`).
        :param back_on: what must reach the database again for the outage to end (a worker's
            "lease": it is back when it leases again, not when its maintenance thread is);
            None: any call.
        """
        self._log = log
        self._who = who
        self._back_on = back_on
        self._repeat = repeat
        self._clock = clock
        self._lock = threading.Lock()
        self.since: float | None = None
        self._said = 0.0
        self._announced = False
        self._ended: float | None = None
        self.failures = 0

    def failed(self, what: str, exc: BaseException) -> None:
        """`what` could not reach the database: the first failure of an outage is logged, and
        then one a minute at most (right after an outage ended, only once it has lasted
        SETTLE_SECONDS, or once a call waited its whole connect timeout for a connection: a
        stale connection fails at once)."""
        now = self._clock()
        waited = bool(getattr(exc, "waited", False))
        with self._lock:
            self.failures += 1
            if self.since is None:
                self.since = now
                self._announced = False
                settling = self._ended is not None and now - self._ended < SETTLE_SECONDS
                if settling and not waited:
                    return  # right after the last outage: said only if it lasts
            if not self._announced:
                if self._ended is not None and now - self.since < SETTLE_SECONDS \
                        and self.since - self._ended < SETTLE_SECONDS and not waited:
                    return
                self._announced = True
                self._said = now
                line = (f"{self._who()}: the database is unreachable ({what}: {exc}); retrying "
                        f"with backoff, saying so at most once a minute")
                event = "outage_started"
            elif now - self._said >= self._repeat:
                self._said = now
                line = (f"{self._who()}: the database is still unreachable after "
                        f"{now - self.since:.0f}s ({what}: {exc})")
                event = "outage_continues"
            else:
                return
        self._log.warning(line, extra={"pgqueue": {"event": event, "error": str(exc)}})

    def ok(self, what: str | None = None) -> None:
        """A call (`what`) reached the database: an outage in progress ends, logged with its
        length, unless it waits for another call (back_on)."""
        if self.since is None:  # the common case: no lock taken
            return
        if self._back_on is not None and what != self._back_on:
            return
        now = self._clock()
        with self._lock:
            if self.since is None:
                return
            lasted, self.since, announced = now - self.since, None, self._announced
            self._ended = now
        if not announced:
            return
        self._log.warning(f"{self._who()}: the database is back after {lasted:.1f}s",
                          extra={"pgqueue": {"event": "outage_ended", "seconds": round(lasted, 3)}})
