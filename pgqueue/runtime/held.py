"""Held leases: the worker's table of the jobs it has leased and not yet let go of.

A lease is held from the lease call that returned it until its ack is written, its handler
ends without an ack (nack, undecodable, lost), or the drain gives it back. While held it
counts against the worker's capacity and is renewed. This module owns that table and the
thread roles that work on many held leases at once: capacity reservations for the lease
loops, the acker's batched acks, and the drain's give-back (the renewer's batched renewal
is renewer.py). The lifecycle that starts these threads is in worker.py; the per-job writes
a running job makes are in settler.py.

The worker's threads, the one order in which they take its locks, and who touches this
table when are written down in docs/internals.md ("Inside the worker"); keep it true when a
thread, a lock or a flag changes.
"""
from __future__ import annotations

import logging
import queue as queue_mod
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from pgqueue.client import lease, settle
from pgqueue.db import queries
from pgqueue.models import by_stream
from pgqueue.runtime.capacity import AUTO_PREFETCH_MAX as AUTO_PREFETCH_MAX
from pgqueue.runtime.capacity import AUTO_PREFETCH_SECONDS as AUTO_PREFETCH_SECONDS
from pgqueue.runtime.capacity import Capacity, Lane
from pgqueue.runtime.capacity import Reservation as Reservation
from pgqueue.runtime.running import Held

if TYPE_CHECKING:
    from pgqueue.telemetry.metrics import WorkerMetrics

# The worker's logger: these lines are the worker's, and operators filter on its name.
log = logging.getLogger("pgqueue.worker")


T = TypeVar("T")

#: Acks carry on past the worker's finish (the drain waits for them), up to their deadline.
_NEVER = threading.Event()
ACK_BATCH = 1000
HEARTBEAT_SECONDS = 5.0


def attempt_of(attempt: int, max_attempts: int) -> str:
    """`attempt 2 of 25`, or `attempt 2, no limit` (max_attempts 0)."""
    return (f"attempt {attempt} of {max_attempts}" if max_attempts > 0
            else f"attempt {attempt}, no limit")


def label(held: Held, max_attempts: int | None = None) -> str:
    """How the worker's log lines name a held job: `job 17 (kind mail, attempt 1 of 25)`,
    never with its payload. The attempt is this lease's; `max_attempts` replaces the job's."""
    lease_ = held.lease
    limit = lease_.max_attempts if max_attempts is None else max_attempts
    return f"job {lease_.job_id} (kind {lease_.kind}, {attempt_of(lease_.attempts + 1, limit)})"


def lease_fields(held: Held, event: str) -> dict[str, dict[str, object]]:
    """A log record's structured fields about a lost lease (`--log-format json`)."""
    lease_ = held.lease
    return {"pgqueue": {"event": event, "stream": lease_.stream, "kind": lease_.kind,
                        "job_id": lease_.job_id, "attempt": lease_.attempts + 1,
                        "outcome": "lost", "lease_id": lease_.lease_id}}


class Db(Protocol):
    """One database call on the worker's pool, failing over when it finds a replica."""

    def __call__(self, fn: Callable[[queries.Conn], T], /) -> T: ...


class RetryDb(Protocol):
    """A database call retried with backoff; None when it gave up: the worker finished (or
    `until` was set) or the deadline passed."""

    def __call__(self, fn: Callable[[queries.Conn], T], what: str, /, *,
                 deadline: float | None = None,
                 until: threading.Event | None = None) -> T | None: ...


class HeldLeases:
    """The leases one worker holds, by lease id, and the batched writes about them."""

    def __init__(self, *, lanes: Sequence[Lane], prefetch: int | None, lease_loops: int,
                 db: Db, retry_db: RetryDb, freed: Callable[[], None],
                 worker_id: Callable[[], int], metrics: WorkerMetrics | None = None) -> None:
        """
        :param lanes: the worker's handler slots by lane, and the kinds each lane's leases
            take (capacity.py): at most its slots' worth of held jobs run at once.
        :param prefetch: jobs each lane holds beyond its slots, leased ahead; None:
            automatic (see AUTO_PREFETCH_SECONDS).
        :param lease_loops: how many lease loops share the capacity.
        :param freed: called after leases were let go of (wakes the lease loops).
        :param worker_id: the worker's registry id, for log lines (it changes on failover).
        """
        self._capacity = Capacity(lanes, prefetch=prefetch, lease_loops=lease_loops)
        self.lanes = [count.lane for count in self._capacity.lanes]
        self._metrics = metrics
        self._db = db
        self._retry_db = retry_db
        self._freed = freed
        self._worker_id = worker_id
        self._lock = threading.Lock()
        # a lane's `starting` went back to False
        self._started = threading.Condition(self._lock)
        self._held: dict[int, Held] = {}
        self._processed = 0
        # SimpleQueue (C) rather than Queue: two hand-offs per job, no task_done/join needed
        self._acks: queue_mod.SimpleQueue[Held | None] = queue_mod.SimpleQueue()

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)

    @property
    def processed(self) -> int:
        """Jobs let go of so far (acked, nacked, lost or undecodable)."""
        with self._lock:
            return self._processed

    # -- the lease loops ---------------------------------------------------------------------

    @property
    def prefetch(self) -> int:
        """How many jobs may be held ahead of the handlers now (of the first lane)."""
        with self._lock:
            return self._capacity.prefetch(0)

    def begin(self, held: Held) -> bool:
        """A handler (thread or coroutine) is about to run `held`: True when it won the job's
        claim (the drain may have given it back first), and the job counts as started."""
        if not held.claim():
            return False
        if not held.lease.rate_at_start:  # else once pgqueue.start_rated counted it
            held.started.set()  # the renewer's next round says so, if the lease did not
        return True

    def end(self, held: Held, seconds: float) -> None:
        """The handler is done with `held` after `seconds`: let go of it unless the acker has
        it (the acker releases acked jobs once their ack is written)."""
        self.ran(held, seconds)
        if not held.acking.is_set():
            self.release(held)

    def ran(self, held: Held, seconds: float) -> None:
        """A handler ran a job for `seconds` (the automatic prefetch of its lane follows the
        mean; the metrics, when on, record it and the job's wait from its due time to its
        start)."""
        self._capacity.ran(held.lease.kind, seconds)
        if self._metrics is not None:
            self._metrics.ran(held.lease, seconds)

    def reserve(self, lane: int = 0) -> Reservation:
        """Capacity for one lease call of `lane`: what is free, at most one lease loop's share,
        and how many of those jobs free handlers start at once. The caller must `admit` it,
        whatever the lease call does.

        `start` is what the lane's handlers leave free once they have taken the jobs queued
        for them (a job waiting for its ack holds no slot). It is given only to a lease with
        no other of the lane in flight, and no other lease of the lane is made until its jobs
        are queued, so no job leased ahead can be queued before them."""
        with self._lock:
            if len(self._capacity.lanes) == 1:
                busy = len(self._held) - self._acks.qsize()
            else:
                busy = sum(1 for h in self._held.values() if not h.acking.is_set()
                           and self._capacity.index_of(h.lease.kind) == lane)
            return self._capacity.reserve(lane, busy)

    def admit(self, reservation: Reservation, fresh: list[Held],
              hand_out: Callable[[Held], None]) -> None:
        """Give back a reservation, hold the leases its lease call returned and queue them
        for the handlers, in the order returned (the first `start` were said started)."""
        counts = self._capacity.lanes
        with self._lock:
            counts[reservation.lane].reserved -= reservation.want
            for held in fresh:
                self._held[held.lease.lease_id] = held
                counts[self._capacity.index_of(held.lease.kind)].held += 1
        try:
            for held in fresh:
                hand_out(held)
        finally:
            if reservation.start:
                # Other lease loops refused meanwhile wait on this, not on the wake-up: a bump
                # of its generation would also end this loop's own wait at once, and an idle
                # worker would call the lease without pause.
                with self._lock:
                    counts[reservation.lane].starting = False
                    self._started.notify_all()

    def wait_started(self, timeout: float, lane: int = 0) -> None:
        """Wait until no lease of `lane` whose jobs start at once is in flight (at most
        `timeout`)."""
        count = self._capacity.lanes[lane]
        with self._lock:
            self._started.wait_for(lambda: not count.starting, timeout)

    # -- letting go --------------------------------------------------------------------------

    def release(self, *done: Held) -> None:
        """Stop holding these jobs: their capacity is free again (each counted under the
        outcome that was decided for it)."""
        counts = self._capacity.lanes
        with self._lock:  # a job given up on (deadlines.py) is released again when it ends
            gone = [h for h in done if self._held.pop(h.lease.lease_id, None) is not None]
            for h in gone:
                counts[self._capacity.index_of(h.lease.kind)].held -= 1
            self._processed += len(gone)
        if self._metrics is not None:
            for held in gone:
                self._metrics.job_finished(held.lease, held.outcome)
        self._freed()

    def held_by_stream(self) -> dict[str, int]:
        """How many leases this worker holds now, by stream."""
        with self._lock:
            snapshot = list(self._held.values())
        counts: dict[str, int] = {}
        for h in snapshot:
            counts[h.lease.stream] = counts.get(h.lease.stream, 0) + 1
        return counts

    def holds(self, lease_id: int) -> bool:
        """Whether this worker holds the lease `lease_id` (a NOTIFY of a cancel names the
        lease; every worker hears it, only its holder renews at once)."""
        with self._lock:
            return lease_id in self._held

    def ack(self, held: Held) -> None:
        """Hand a finished job to the acker; it stays held (and renewed) until then."""
        held.acking.set()
        self._acks.put(held)

    def stop_acker(self) -> None:
        """The acker writes what it was handed so far, then returns."""
        self._acks.put(None)

    def ack_loop(self) -> None:
        """The acker thread: one statement for whatever finished meanwhile."""
        while True:
            first = self._acks.get()
            batch = [] if first is None else [first]
            stop = first is None
            while len(batch) < ACK_BATCH:
                try:
                    more = self._acks.get_nowait()
                except queue_mod.Empty:
                    break
                if more is None:
                    stop = True
                    break
                batch.append(more)
            if batch:
                try:
                    self._ack_batch(batch)
                except Exception:
                    # never let the acker die: these leases expire and their jobs are
                    # reclaimed (at-least-once), later acks go on
                    log.exception("worker %s: ack of %d job(s) failed", self._worker_id(),
                                  len(batch))
                    for h in batch:
                        h.lost.set()
                    self.release(*batch)
            if stop:
                return

    def _ack_batch(self, batch: list[Held]) -> None:
        deadline = time.monotonic() + min(h.visibility_timeout for h in batch)
        acked = self._retry_db(lambda c: settle.ack_many(c, [h.lease for h in batch]),
                               f"ack of {len(batch)} job(s)", deadline=deadline, until=_NEVER)
        for h in batch:
            if acked is not None and h.lease.job_id in acked:
                h.outcome = "acked"
            else:
                h.lost.set()
                why = "" if acked is not None else " (it expired before the ack was written)"
                log.warning("worker %s: %s finished, but its lease %s was lost%s: it will run "
                            "again", self._worker_id(), label(h), h.lease.lease_id, why,
                            extra=lease_fields(h, "lost"))
        self.release(*batch)

    # -- the renewer (renewer.py) and the drain ---------------------------------------------

    def snapshot(self) -> list[Held]:
        """The leases held now (a copy: the caller takes their write locks, never the table's)."""
        with self._lock:
            return list(self._held.values())

    def acks_pending(self) -> bool:
        """Whether a job handed to the acker is still waiting for its ack to be written."""
        with self._lock:
            snapshot = list(self._held.values())
        return any(h.acking.is_set() for h in snapshot)

    def unfinished(self) -> list[Held]:
        """The held jobs not handed to the acker."""
        with self._lock:
            snapshot = list(self._held.values())
        return [h for h in snapshot if not h.acking.is_set()]

    def give_back(self, remaining: Iterable[Held]) -> None:
        """Flush the checkpoints of unfinished jobs and give their leases back (no attempt).
        Each job's claim is taken first: one not started yet never will be; one already
        running (past the grace period) learns at its next write that its lease is gone."""
        held = sorted(remaining, key=lambda h: h.lease.lease_id)
        running = [h for h in held if not h.claim()]
        for h in running:
            log.warning("worker %s: %s still running after the grace period: its lease is "
                        "given back and its result will be discarded", self._worker_id(),
                        label(h))
        for h in held:
            h.write_lock.acquire()
            h.lost.set()  # from here on the handler's advance() raises: no work past the snapshot
        try:
            items = [(h.lease, h.visibility_timeout, h.snapshot()[0]) for h in held]

            def give(conn: queries.Conn) -> list[dict[str, Any]]:
                lease.renew_many(conn, items)
                return [r for rows in queries.fetch_each(conn, "return_leases", [
                    {"stream": stream, "job_ids": [g.job_id for g in group],
                     "lease_ids": [g.lease_id for g in group]}
                    for stream, group in by_stream([h.lease for h in held]).items()])
                        for r in rows]

            returned = self._retry_db(give, "return leases", deadline=time.monotonic() + 10.0)
            log.info("worker %s: returned %d unfinished job(s)", self._worker_id(),
                     len(returned or []), extra={"pgqueue": {
                         "event": "returned", "count": len(returned or [])}})
            if self._metrics is not None and returned:
                given = {int(r["id"]): str(r["state"]) for r in returned}
                for h in held:
                    if h.lease.job_id in given:  # pending: returned; or cancelled
                        self._metrics.job_finished(
                            h.lease, "cancelled" if given[h.lease.job_id] == "cancelled"
                            else "returned")
        finally:
            for h in held:
                h.write_lock.release()
