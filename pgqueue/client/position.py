"""Where a lease loop's last lease of a stream ended, so that its next lease starts there.

A lease from the start of a stream steps over the index entries of every job leased before it
that vacuum has not removed yet, and while something holds the vacuum horizon back (a session
idle in transaction, a long REPEATABLE READ report, a replication slot) that is every job
leased in the last few seconds: thousands of entries per lease at a busy queue's rate, read
again by every lease. A lease given its caller's position starts after it instead
(pgqueue.take_ready_after). What becomes ready behind a position (a job retried, reclaimed or
given back keeps its id; a transaction that enqueued may commit after later ones did), and
the entries of a lease that rolled back (a lease after a position passes over entries another
lease touched, revision 0016), are found by the next lease from the start: the position is
trusted for RESCAN_SECONDS after the last such lease, and a higher priority is always read
from its start.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from pgqueue.models import Lease

#: How long a position is trusted: a lease this long after the last one from the start of the
#: stream looks from the start again. What became ready behind the position waits at most this
#: long for it; each look from the start steps over what a held horizon left.
RESCAN_SECONDS = 1.0


class LeasePosition:
    """The (priority, job id) the last lease of one lease loop and stream ended at. Not
    thread-safe: one per loop and stream."""

    def __init__(self, rescan_seconds: float = RESCAN_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not rescan_seconds >= 0:
            raise ValueError(f"rescan_seconds must be >= 0, got {rescan_seconds!r}")
        self._rescan = rescan_seconds
        self._clock = clock
        self._at: tuple[int, int] | None = None
        self._looked = float("-inf")  # when a lease last read from the start

    def after(self) -> tuple[int, int] | None:
        """Where the next lease starts, or None: from the start of the stream (no lease yet,
        or the last from the start was RESCAN_SECONDS ago)."""
        if self._at is None or self._clock() - self._looked >= self._rescan:
            return None
        return self._at

    def moved(self, after: tuple[int, int] | None, leased: Sequence[Lease]) -> None:
        """Record a lease asked with `after` (what after() said) that returned `leased`, in
        lease order: the position moves to its last job."""
        if after is None:
            self._looked = self._clock()
        if leased:
            last = leased[-1]
            self._at = (last.priority, last.job_id)
