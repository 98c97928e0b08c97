"""The settler: the database writes a running job makes about itself.

`steps.run` calls back into a `steps.Settler` while it runs a job: a checkpoint write when a
step is entered or finished (or `checkpoint_now`), the ack, parking the job as undecodable,
upcasting its payload, looking up a recorded step list. The worker's handler threads also
nack through it. `JobSettler` is the worker's implementation; it is an object of its own so
that what a job writes can be read, and replaced in tests, apart from the worker's threads.

Every write about one job holds that job's ``write_lock`` (the lock order is in docs/internals.md)
and is retried until the lease would have expired: after that another worker owns the job.
Acks are not written here but handed to the acker, which writes them in batches.

After a nack the job's row is read back for the log line about the failure (the attempt
limit the database applied, and when a retry is due): one primary-key read, on the failure
path only, and only while the worker's WARNING lines are on.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from psycopg.types.json import Jsonb

from pgqueue.client import lease, settle
from pgqueue.db import queries
from pgqueue.errors import PgQueueError
from pgqueue.runtime.held import HeldLeases, RetryDb, label
from pgqueue.runtime.running import Held

# The worker's logger: these lines are the worker's, and operators filter on its name.
log = logging.getLogger("pgqueue.worker")

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Nacked:
    """What a nack did, for the log line about the failure."""

    #: The state the job went to: "pending" or "scheduled" (retried), "dead", "cancelled" (a
    #: cancel was requested); None: nothing was recorded (the lease was no longer current, or
    #: the database stayed unreachable).
    state: str | None
    #: The attempt limit the job has now (0: no limit).
    max_attempts: int
    #: When a retried job becomes due (None when not known).
    retry_at: dt.datetime | None = None

    @property
    def dead(self) -> bool | None:
        """True: dead; False: retried or cancelled; None: nothing recorded."""
        return None if self.state is None else self.state == "dead"


class JobSettler:
    """Settles the jobs of one worker (a `steps.Settler`)."""

    def __init__(self, leases: HeldLeases, retry_db: RetryDb,
                 worker_id: Callable[[], int]) -> None:
        """
        :param leases: the worker's held leases; acks are handed to their acker.
        :param worker_id: the worker's registry id, for log lines (it changes on failover).
        """
        self._leases = leases
        self._retry_db = retry_db
        self._worker_id = worker_id

    def write(self, held: Held, what: str, fn: Callable[[queries.Conn], T],
              ends: Callable[[T], bool] | None = None) -> T | None:
        """A write about a held job: serialised with its renewals, retried until its lease
        would have expired. Raises LeaseLost when the lease is already known to be gone.
        `ends`: whether what it returned says the write ended the lease (held.ended, set
        before the lock is let go)."""
        deadline = time.monotonic() + held.visibility_timeout
        with held.write_lock:
            held.check()
            done = self._retry_db(fn, f"{what} of job {held.lease.job_id}", deadline=deadline)
            if done is not None and ends is not None and ends(done):
                held.ended.set()
            return done

    # -- steps.Settler -----------------------------------------------------------------------

    def write_checkpoint(self, held: Held) -> None:
        """Write the held job's checkpoint now (and extend its lease)."""
        def write(conn: queries.Conn) -> bool:
            checkpoint, version = held.snapshot()
            renewed = lease.renew_leases(conn, [(held.lease, held.visibility_timeout,
                                                 checkpoint)],
                                         [True])  # its handler is running: it has started
            got = renewed.get(held.lease.lease_id)
            if got is None:
                return False
            held.mark_flushed(version)
            held.start_said = True
            if got.cancel_requested:
                held.request_cancel()
            return True

        if self.write(held, "checkpoint", write) is not True:
            held.lost.set()
            held.check()

    def ack(self, held: Held) -> None:
        """Hand the job to the acker (batched acks); its lease keeps renewing until then."""
        held.check()
        self._leases.ack(held)

    def mark_undecodable(self, held: Held, reason: str, detail: dict[str, Any]) -> None:
        marked = self.write(held, "mark undecodable", lambda c: queries.scalar(
            c, "mark_undecodable", {"stream": held.lease.stream, "job_id": held.lease.job_id,
                                    "lease_id": held.lease.lease_id,
                                    "reason": reason, "detail": Jsonb(detail)}),
            ends=lambda got: got in ("undecodable", "cancelled"))
        if marked == "undecodable":
            held.outcome = "undecodable"
            log.warning("worker %s: %s is undecodable (%s), parked without using an attempt: %s",
                        self._worker_id(), label(held), reason, detail.get("message", ""),
                        extra={"pgqueue": {
                            "event": "undecodable", "stream": held.lease.stream,
                            "kind": held.lease.kind, "job_id": held.lease.job_id,
                            "attempt": held.lease.attempts + 1, "outcome": "undecodable",
                            "reason": reason}})
        elif marked == "cancelled":  # an operator had asked to cancel it: no need to park it
            held.outcome = "cancelled"
            log.info("worker %s: %s cancelled by an operator (it was undecodable: %s)",
                     self._worker_id(), label(held), reason)
        else:
            held.lost.set()
            log.warning("worker %s: %s could not be parked: its lease %s was lost (or the "
                        "database stayed unreachable)", self._worker_id(), label(held),
                        held.lease.lease_id)

    def upcast(self, held: Held, payload: bytes, schema_version: int) -> None:
        done = self.write(held, "upcast", lambda c: queries.scalar(
            c, "upcast_job", {"stream": held.lease.stream, "job_id": held.lease.job_id,
                              "lease_id": held.lease.lease_id,
                              "payload": payload, "schema_version": schema_version}))
        if not done:
            held.lost.set()
            held.check()
        held.payload = payload
        held.set_checkpoint(dataclasses.replace(held.checkpoint, schema_version=schema_version))

    def step_list(self, step_set_hash: str) -> list[dict[str, Any]] | None:
        row = self._retry_db(lambda c: queries.fetch_one(
            c, "step_set_by_hash", {"hash": step_set_hash}), "step set lookup")
        return None if row is None else list(row["steps"])

    # -- the handler threads -----------------------------------------------------------------

    def nack(self, held: Held, error: str | BaseException, max_attempts: int | None) -> Nacked:
        """Record one failure of the job (retry with backoff, or dead): an exception as its
        summary and the handler's traceback."""
        state = self.write(held, "nack", lambda c: settle.nack(c, held.lease, error, None,
                                                               max_attempts),
                           ends=lambda got: got is not None)
        row = (self._read_back(held) if state in ("pending", "scheduled", "dead")
               and log.isEnabledFor(logging.WARNING) else None)
        if row is None:  # what the lease said before the nack
            return Nacked(state, held.lease.max_attempts)
        # the database decides which limit applies (the job's own or the handler's)
        return Nacked(state, int(row["max_attempts"]),
                      None if state == "dead" else row["not_before"])

    def start_rated(self, held: Held) -> str | None:
        """Before the handler starts a job of a rate-limited kind leased ahead: count it in
        the kind's window ("started"), or the database gave it back until the window has room
        ("deferred"), or ended it because it was cancelled ("cancelled"); None: its lease was
        lost (or the database stayed unreachable)."""
        got = self.write(held, "rate-limited start", lambda c: queries.scalar(
            c, "start_rated", {"stream": held.lease.stream, "job_id": held.lease.job_id,
                               "lease_id": held.lease.lease_id}),
            ends=lambda state: state in ("deferred", "cancelled"))
        if got == "started":
            held.start_said = True
            held.started.set()
        return None if got is None else str(got)

    def end_cancelled(self, held: Held) -> bool:
        """The handler stopped on its job's cancel (or raised Cancelled): the job ends as
        cancelled. False: its lease was lost first (whoever took it ends it cancelled)."""
        def end(conn: queries.Conn) -> bool:
            if settle.end_cancelled(conn, held.lease):
                return True
            # a re-sent call whose first attempt committed before its reply was lost
            return bool(queries.scalar(conn, "cancelled_before", {
                "stream": held.lease.stream, "job_id": held.lease.job_id,
                "lease_id": held.lease.lease_id}))

        return bool(self.write(held, "end as cancelled", end, ends=bool))

    def _read_back(self, held: Held) -> dict[str, Any] | None:
        """The job's row (any set, payload left out); None when it cannot be read at once."""
        try:
            return self._retry_db(lambda c: queries.fetch_one(
                c, "job_preview_by_id", {"job_id": held.lease.job_id, "preview": 0}),
                f"read-back of job {held.lease.job_id}", deadline=time.monotonic())
        except PgQueueError:
            return None
