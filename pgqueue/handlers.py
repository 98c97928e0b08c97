"""Handler threads: run each held job to its end, then let go of it.

The worker's `concurrency` handler threads take held jobs off the work queue the lease
loops fill, run each with `steps.run` and the worker's settler, and nack a job whose handler
raised. A job that ends without an ack (nack, lost lease, undecodable) is released here; an
acked one stays held until the acker has written its ack (held.py). Kept apart from the
worker's lifecycle so the path one job takes through a handler thread reads in one place.
"""
from __future__ import annotations

import logging
import queue as queue_mod
import threading
import traceback
from collections.abc import Callable

from pgqueue import steps
from pgqueue.app import App
from pgqueue.errors import LeaseLost
from pgqueue.held import HeldLeases
from pgqueue.settler import JobSettler
from pgqueue.steps import Held

# The worker's logger: these lines are the worker's, and operators filter on its name.
log = logging.getLogger("pgqueue.worker")

MAX_ERROR_CHARS = 4000


class HandlerThreads:
    """A worker's handler threads and the work queue that feeds them."""

    def __init__(self, app: App, leases: HeldLeases, settler: JobSettler, *,
                 stopping: threading.Event, worker_id: Callable[[], int]) -> None:
        """
        :param stopping: set when the worker drains: a job not started by then is skipped
            (the drain gives its lease back).
        :param worker_id: the worker's registry id, for log lines (it changes on failover).
        """
        self._app = app
        self._leases = leases
        self._settler = settler
        self._stopping = stopping
        self._worker_id = worker_id
        # SimpleQueue (C) rather than Queue: two hand-offs per job, no task_done/join needed
        self.work: queue_mod.SimpleQueue[Held | None] = queue_mod.SimpleQueue()
        self._threads: list[threading.Thread] = []

    def start(self, count: int) -> None:
        for i in range(count):
            t = threading.Thread(target=self._loop, name=f"pgqueue-handler-{i}", daemon=True)
            t.start()
            self._threads.append(t)

    def finish(self) -> None:
        """Each thread finishes its job, skips what is queued behind it, and exits. Call it
        once nothing more is put on the work queue."""
        for _ in self._threads:
            self.work.put(None)

    def busy(self) -> bool:
        """Whether a thread has not exited yet (after `finish`: is still running a job)."""
        return any(t.is_alive() for t in self._threads)

    def _loop(self) -> None:
        while True:
            held = self.work.get()
            if held is None:
                return
            if held.lost.is_set():
                self._leases.release(held)  # lost before it started: nothing to do for it
                continue
            if self._stopping.is_set():
                continue  # not started: the drain returns it without costing an attempt
            try:
                self._execute(held)
            except Exception:
                log.exception("worker %s: job %s: unexpected error", self._worker_id(),
                              held.lease.job_id)
            finally:
                if not held.acking.is_set():  # an acked job is released by the acker
                    self._leases.release(held)

    def _execute(self, held: Held) -> None:
        kind = held.lease.kind
        handler = self._app.handlers.get(kind or "")
        try:
            if handler is None:
                self._settler.mark_undecodable(held, "unknown_kind", {
                    "message": f"no handler for kind {kind!r} in this worker",
                    "kind": kind, "known_kinds": sorted(self._app.handlers)})
                return
            steps.run(handler, held, self._settler)
        except LeaseLost as exc:
            log.warning("worker %s: job %s: %s; result discarded", self._worker_id(),
                        held.lease.job_id, exc)
        except Exception as exc:
            if held.lost.is_set():
                log.warning("worker %s: job %s failed after its lease was lost: %s",
                            self._worker_id(), held.lease.job_id, exc)
                return
            error = "".join(traceback.format_exception(exc))[-MAX_ERROR_CHARS:]
            self._settler.nack(held, error, handler.max_attempts if handler is not None else None)
