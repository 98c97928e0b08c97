"""The worker's lease loops: lease jobs up to the free capacity and hand them to the handlers.

Each loop reserves capacity (held.py), leases that many jobs of one stream after the other in
one statement (saying how many start at once), holds them and hands them out, in the order
returned. It wakes on LISTEN/NOTIFY (wakeup.py), a freed slot, or the poll interval. A failed
lease call is retried with backoff; an unexpected error is logged and the loop goes on after
a pause, so the worker never stops leasing while its handlers, renewals and acks still run.
The worker (worker.py) runs one loop on its main thread, and a second on a thread of its own
when its capacity is large.
"""
from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Sequence

from pgqueue.client import lease
from pgqueue.client.position import LeasePosition
from pgqueue.db import queries
from pgqueue.errors import ConnectionFailed, PgQueueError
from pgqueue.models import Lease
from pgqueue.runtime.app import App
from pgqueue.runtime.held import HeldLeases, Reservation, RetryDb
from pgqueue.runtime.running import Held
from pgqueue.runtime.wakeup import Wakeup
from pgqueue.telemetry.outage import FIRST_DELAY_SECONDS, Outage, jittered, next_delay

# The worker's logger: these lines are the worker's, and operators filter on its name.
log = logging.getLogger("pgqueue.worker")

#: The pause before a loop that failed unexpectedly runs again.
RESTART_SECONDS = 1.0


class LeaseLoops:
    """What every lease loop of one worker shares; `forever(turn)` is one loop."""

    def __init__(self, *, app: App, streams: Sequence[str], leases: HeldLeases, wake: Wakeup,
                 stopping: threading.Event, retry_db: RetryDb,
                 hand_out: Callable[[Held], None], poll_interval: float,
                 visibility_timeout: float, node: int, worker_id: Callable[[], int],
                 outage: Outage) -> None:
        """
        :param hand_out: queues a held job for the slots of its kind (the worker's).
        :param worker_id: the worker's registry id (it changes on failover).
        """
        self._app = app
        self._outage = outage
        self._streams = list(streams)
        self._leases = leases
        self._wake = wake
        self._stopping = stopping
        self._retry_db = retry_db
        self._hand_out = hand_out
        self._poll_interval = poll_interval
        self._visibility_timeout = visibility_timeout
        self._node = node
        self._worker_id = worker_id

    def loop(self, turn: int = 0) -> None:
        """Lease while there is capacity, for each stream and lane in turn (a lane: the
        slots of one sort and the kinds they run, capacity.py), until stop. Each stream's
        next lease of a lane starts where this loop's last one ended (LeasePosition). A
        round over every stream and lane that leased nothing it had room for waits for a
        NOTIFY, a freed slot, or the poll interval."""
        delay = FIRST_DELAY_SECONDS
        lanes = range(len(self._leases.lanes))
        pairs = [(stream, lane) for lane in lanes for stream in self._streams]
        positions = {pair: LeasePosition() for pair in pairs}
        seen, progress = self._wake.generation, False
        idle = False  # the last round leased nothing: waiting for news
        while not self._stopping.is_set():
            stream, lane = pairs[turn % len(pairs)]
            turn += 1
            reservation = self._leases.reserve(lane)
            if reservation.blocked:
                self._leases.wait_started(self._poll_interval, lane)
                turn -= 1  # the same stream and lane again
                continue
            if reservation.want:
                try:
                    got = self.take(stream, reservation, positions[stream, lane])
                    delay = FIRST_DELAY_SECONDS
                    self._outage.ok("lease")
                except PgQueueError as exc:
                    if isinstance(exc, ConnectionFailed):
                        self._outage.failed("lease", exc)
                    else:
                        log.warning("worker %s: lease failed (%s); retrying in %.1fs",
                                    self._worker_id(), exc, delay)
                    self._stopping.wait(jittered(delay))
                    delay = next_delay(delay)
                    continue
                progress = progress or got >= reservation.want
            if turn % len(pairs) == 0:
                if not progress:  # nothing more to lease, or no room: wait for news
                    if not idle:  # said once per stretch of waiting, not at every poll
                        log.debug("worker %s: a lease loop found nothing to lease; it waits "
                                  "for work", self._worker_id(),
                                  extra={"pgqueue": {"event": "idle"}})
                    idle = True
                    self._wake.wait(seen, self._poll_interval)
                else:
                    idle = False
                seen, progress = self._wake.generation, False

    def take(self, stream: str, reservation: Reservation,
             position: LeasePosition | None = None) -> int:
        """Lease up to the reserved number of jobs of `stream` (saying how many start at
        once), after `position` (moved to the last one), and hand them to the handlers; the
        reservation is given back whatever happens. Returns how many were leased."""
        fresh: list[Held] = []
        # One token for the call and its re-sends: a lease whose reply was lost returns the
        # leases its first attempt granted, which are not left to expire and be charged.
        request = uuid.uuid4()
        sent: list[bool] = []  # the first call is not a re-send; every later one is

        lane = self._leases.lanes[reservation.lane]

        def take(conn: queries.Conn) -> list[Lease]:
            resent = bool(sent)
            sent.append(True)
            return lease.lease(conn, stream, reservation.want, self._visibility_timeout,
                               self._node, self._worker_id(), request, resent, reservation.start,
                               position, kinds=lane.kinds, not_kinds=lane.not_kinds)

        try:
            got = self._retry_db(take, "lease", until=self._stopping) or []
            for leased in got:
                handler = self._app.handlers.get(leased.kind or "")
                visibility = (handler.visibility_timeout if handler and handler.visibility_timeout
                              else self._visibility_timeout)
                fresh.append(Held(leased, visibility))
        finally:
            self._leases.admit(reservation, fresh, self._hand_out)
        return len(fresh)

    def forever(self, turn: int) -> None:
        """A lease loop (the main thread's is turn 0) until stop(): an unexpected error is
        logged and the loop goes on after a pause, so the worker neither stops leasing nor
        ends with its handlers, renewals and acks still running."""
        while not self._stopping.is_set():
            try:
                self.loop(turn)
            except Exception:
                log.exception("worker %s: lease loop %d failed unexpectedly; restarting it in "
                              "%.0fs", self._worker_id(), turn, RESTART_SECONDS)
                self._stopping.wait(RESTART_SECONDS)
