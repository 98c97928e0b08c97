"""How many jobs a worker may hold: its handler slots by lane, plus what it leases ahead.

A lane is a class of handler slots and the kinds a lease takes for them. A worker whose App
has handlers of one sort (plain `def`, or `async def`) has one lane taking every kind. One
with both has two: the handler threads' lane takes the plain `def` kinds, the event loop's the
rest (its async kinds, and kinds it has no handler for, which are parked at once). Each lane
leases only what its own slots will start soon: its free slots plus its prefetch. Leased as
one, the 100 coroutine slots of a mixed App counted for jobs only its 4 threads could run, and
a worker held 30 such jobs, one of them unstarted for 33 s.

The counts live here; HeldLeases (held.py) keeps them under its lock and owns the jobs.
"""
from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import NamedTuple

#: Automatic prefetch (the default): as many jobs ahead of a lane's handlers as they finish in
#: AUTO_PREFETCH_SECONDS, from the mean time a handler took (slots x seconds / mean), at most
#: AUTO_PREFETCH_MAX. Known after the first jobs, so a deep queue of short jobs is leased in
#: batches of thousands from the second lease on (few round trips and commits per job), while
#: a lane whose jobs take seconds holds a few ahead, and one with jobs of minutes none.
AUTO_PREFETCH_SECONDS = 0.25
AUTO_PREFETCH_MAX = 4000
#: The weight of each new handler time in the mean (an exponential moving average).
DURATION_WEIGHT = 0.1


@dataclass(frozen=True)
class Lane:
    """A class of handler slots: how many, and which kinds a lease takes for them (`kinds`:
    only these; `not_kinds`: every kind but these, jobs without a kind included; neither:
    every kind)."""

    name: str
    slots: int
    kinds: tuple[str, ...] | None = None
    not_kinds: tuple[str, ...] | None = None

    def takes(self, kind: str | None) -> bool:
        """Whether a job of `kind` is this lane's."""
        if self.kinds is not None:
            return kind in self.kinds
        return self.not_kinds is None or kind not in self.not_kinds


def lanes_for(thread_slots: int, loop_slots: int, sync_kinds: Collection[str]) -> list[Lane]:
    """The lanes of a worker with these slots: one when its slots are of one sort, else the
    threads' (its plain def kinds) and the loop's (the rest)."""
    if not thread_slots or not loop_slots:
        return [Lane("all", thread_slots + loop_slots)]
    kinds = tuple(sorted(sync_kinds))
    return [Lane("threads", thread_slots, kinds=kinds),
            Lane("loop", loop_slots, not_kinds=kinds)]


class Reservation(NamedTuple):
    """Capacity promised to one lease call of one lane: `want` jobs, of which the first
    `start` go to handlers that are free now (the lease says they started; the others are
    leased ahead until a renewal says their handler started)."""

    want: int
    start: int
    #: refused because another loop's lease of the lane, whose jobs start at once, is in
    #: flight: wait for it (HeldLeases.wait_started), not for the wake-up, which it does not
    #: bump
    blocked: bool = False
    lane: int = 0


class LaneCount:
    """One lane's figures (under HeldLeases' lock, but `mean_run`: see `ran`)."""

    def __init__(self, lane: Lane) -> None:
        self.lane = lane
        self.held = 0
        self.reserved = 0
        #: a lease whose jobs start at once is in flight
        self.starting = False
        #: the mean handler time in seconds (None: no job ran yet); written by handler
        #: threads without a lock (a lost update among racing threads only skips a sample)
        self.mean_run: float | None = None


class Capacity:
    """Every lane's counts, and the rule of how much a lease call may take."""

    def __init__(self, lanes: Sequence[Lane], *, prefetch: int | None, lease_loops: int) -> None:
        """
        :param prefetch: jobs each lane holds beyond its slots, leased ahead; None:
            automatic (AUTO_PREFETCH_SECONDS).
        :param lease_loops: how many lease loops share each lane's capacity.
        """
        if not lanes:
            raise ValueError("a worker needs at least one lane of slots")
        self.lanes = [LaneCount(lane) for lane in lanes]
        self._prefetch = prefetch
        self._loops = lease_loops

    @property
    def slots(self) -> int:
        return sum(c.lane.slots for c in self.lanes)

    def index_of(self, kind: str | None) -> int:
        """The lane a job of `kind` belongs to."""
        for i, count in enumerate(self.lanes):
            if count.lane.takes(kind):
                return i
        return len(self.lanes) - 1

    def prefetch(self, i: int = 0) -> int:
        """How many jobs lane `i` may hold ahead of its handlers now."""
        if self._prefetch is not None:
            return self._prefetch
        count = self.lanes[i]
        mean = count.mean_run
        if mean is None:
            return 0
        return int(min(AUTO_PREFETCH_MAX, count.lane.slots * AUTO_PREFETCH_SECONDS
                       / max(mean, 1e-6)))

    def reserve(self, i: int, busy: int) -> Reservation:
        """Under the lock: capacity for one lease call of lane `i`, whose handlers have
        `busy` jobs (held, and not waiting for their ack). See HeldLeases.reserve."""
        count = self.lanes[i]
        if count.starting:
            return Reservation(0, 0, blocked=True, lane=i)
        capacity = count.lane.slots + self.prefetch(i)
        share = -(-capacity // self._loops)
        want = min(share, capacity - count.held - count.reserved)
        if want <= 0:
            return Reservation(0, 0, lane=i)
        start = 0
        if count.reserved == 0:
            start = max(0, min(want, count.lane.slots - busy))
        count.reserved += want
        count.starting = start > 0
        return Reservation(want, start, lane=i)

    def ran(self, kind: str | None, seconds: float) -> None:
        """A handler of `kind` ran a job for `seconds`: its lane's mean follows."""
        count = self.lanes[self.index_of(kind)]
        mean = count.mean_run
        count.mean_run = seconds if mean is None else mean + DURATION_WEIGHT * (seconds - mean)
