"""The renewer: every renewal interval, one statement renews every lease the worker holds.

Each dirty checkpoint rides the same UPDATE (the write a step's `advance` waits for), and so
does the news that a job leased ahead has started (held.py); back comes, per lease, whether an
operator asked to cancel its job, which the handler then sees (`ctx.cancelled`); a NOTIFY of
such a cancel pokes the renewer to look that up at once (a read: any login may NOTIFY, and a
flood of them must not turn into renewals and their ops). A lease the
database no longer has is marked lost, and its handler learns it at its next `advance` or
write. The worker's
registry heartbeat rides along every HEARTBEAT_SECONDS. Write locks are taken in ascending
lease id, the order held.py sets for every thread that takes many.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from pgqueue.client import lease
from pgqueue.errors import ConnectionFailed, PgQueueError
from pgqueue.runtime.held import HEARTBEAT_SECONDS, Db, HeldLeases, label, lease_fields
from pgqueue.runtime.running import Held
from pgqueue.telemetry.outage import Outage

# The worker's logger: these lines are the worker's, and operators filter on its name.
log = logging.getLogger("pgqueue.worker")

#: Rounds follow each other at least this far apart, however often the renewer is poked.
POKE_GAP = 0.05
#: How often a renewer with nothing to do looks whether the worker finished.
FINISH_CHECK = 0.5


class Renewer:
    """The renewer thread's work, over one worker's held leases."""

    def __init__(self, leases: HeldLeases, db: Db, worker_id: Callable[[], int],
                 outage: Outage) -> None:
        """
        :param worker_id: the worker's registry id, for log lines (it changes on failover).
        """
        self._leases = leases
        self._db = db
        self._outage = outage
        self._worker_id = worker_id
        self._poked = threading.Event()
        self._heard: set[int] = set()  # lease ids named by a NOTIFY since the last look
        self._heard_lock = threading.Lock()

    def poke(self, lease_id: int) -> None:
        """Look now, not at the next renewal, whether the job of `lease_id` is to be
        cancelled: the listener heard that an operator asked (NOTIFY pgqueue_cancel). Only
        the job's row tells the handler: a notification anyone may send cannot stop a job."""
        with self._heard_lock:
            self._heard.add(lease_id)
        self._poked.set()

    def loop(self, interval: float, finished: threading.Event,
             heartbeat: Callable[[], None]) -> None:
        """The renewer thread: a renewal round every `interval` until `finished`, and one as
        soon as it is poked (at most every POKE_GAP seconds); the worker's registry heartbeat
        rides along every HEARTBEAT_SECONDS."""
        last_beat = time.monotonic()
        due = time.monotonic() + interval
        while True:
            # woken by a poke, or every FINISH_CHECK seconds to see whether the worker finished
            self._poked.wait(min(max(due - time.monotonic(), 0.0), FINISH_CHECK))
            if finished.is_set():
                return
            poked = self._poked.is_set()
            if poked:
                self._poked.clear()
            renew = time.monotonic() >= due
            if not (poked or renew):
                continue
            try:
                if renew:
                    due = time.monotonic() + interval
                    self.round()  # says of each lease whether a cancel was asked, too
                    if time.monotonic() - last_beat >= HEARTBEAT_SECONDS:
                        heartbeat()
                        last_beat = time.monotonic()
                else:
                    self.look_for_cancels()
                self._outage.ok("renewal")
            except ConnectionFailed as exc:
                self._outage.failed("renewal", exc)
            except PgQueueError as exc:
                log.warning("worker %s: renewal failed: %s", self._worker_id(), exc)
            except Exception:
                # never let the renewer die: every lease would expire under running handlers;
                # the next round (one interval on) is the retry
                log.exception("worker %s: renewal round failed unexpectedly; retrying in %.1fs",
                              self._worker_id(), interval)
            # a flood of notifications costs at most one look per POKE_GAP
            finished.wait(POKE_GAP)

    def look_for_cancels(self) -> None:
        """Of the leases NOTIFYs named since the last look, those this worker holds whose
        job's cancel was asked: their handlers are told (a read by primary key, no op)."""
        with self._heard_lock:
            heard, self._heard = self._heard, set()
        held = [h for h in self._leases.snapshot()
                if h.lease.lease_id in heard and not h.cancelled.is_set()]
        if not held:
            return
        asked = self._db(lambda c: lease.cancel_requested(c, [h.lease for h in held]))
        for h in held:
            if h.lease.lease_id in asked:
                h.request_cancel()

    def round(self) -> None:
        """Renew every held lease in one statement, acks in flight included, carrying each
        dirty checkpoint; a lease the database no longer has is marked lost. One attempt:
        the renewer's next round is the retry."""
        held = sorted(self._leases.snapshot(), key=lambda h: h.lease.lease_id)
        if not held:
            return
        cancelled: list[Held] = []
        locked = held
        for h in locked:
            h.write_lock.acquire()
        try:
            # a nack (or another write ending the lease) may have committed while this waited
            # for its lock: that lease is not renewed, nor said to be lost
            held = [h for h in locked if not h.ended.is_set()]
            snapshots = [h.snapshot() for h in held]
            items = [(h.lease, h.visibility_timeout, cp if h.dirty else None)
                     for h, (cp, _v) in zip(held, snapshots, strict=True)]
            # jobs leased ahead whose handlers have started since: said in the same UPDATE
            started = [h.start_unsaid() for h in held]
            renewed = self._db(lambda c: lease.renew_leases(
                c, items, started if any(started) else None)) if items else {}
            for h, (_cp, version), said in zip(held, snapshots, started, strict=True):
                got = renewed.get(h.lease.lease_id)
                if got is not None:
                    h.mark_flushed(version)
                    if said:
                        h.start_said = True
                    if got.cancel_requested and not h.cancelled.is_set():
                        cancelled.append(h)
                elif not h.acking.is_set():  # an ack that raced this renewal removed the row
                    h.lost.set()
                    log.warning("worker %s: %s: its lease %s was lost (expired and reclaimed, "
                                "or changed by an operator); its result will be discarded",
                                self._worker_id(), label(h), h.lease.lease_id,
                                extra=lease_fields(h, "lost"))
        finally:
            for h in locked:
                h.write_lock.release()
        for h in cancelled:  # outside the write locks: an async job's hook reaches its loop
            h.request_cancel()
