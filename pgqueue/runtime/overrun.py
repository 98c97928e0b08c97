"""A handler past its job's time limit and the grace after it: the worker gives up on it.

It records the failure for the handler (JobTimeout, with the stack where the handler was),
lets go of the job (anything the handler writes about it later is refused) and puts a new
handler thread or coroutine runner in its place. Python cannot stop a thread, so the old one
runs on until its handler returns; long handlers should call ctx.check_cancelled().
"""
from __future__ import annotations

import logging
import sys
import threading

from pgqueue import failures
from pgqueue.runtime.app import App
from pgqueue.runtime.coroutines import AsyncHandlers
from pgqueue.runtime.handlers import HandlerThreads, failed
from pgqueue.runtime.held import HeldLeases, label
from pgqueue.runtime.running import Held
from pgqueue.runtime.settler import JobSettler

log = logging.getLogger("pgqueue.worker")


def give_up(held: Held, grace: float, *, app: App, settler: JobSettler, leases: HeldLeases,
            handlers: HandlerThreads, coroutines: AsyncHandlers | None, worker_id: int) -> None:
    """Give up on the handler of `held`, still running `grace` seconds past its limit."""
    runner = None if held.time_limit is None else held.time_limit.runner
    stack = None
    if isinstance(runner, threading.Thread) and runner.ident is not None:
        frame = sys._current_frames().get(runner.ident)
        stack = None if frame is None else failures.stack_of(frame)
    handler = app.handlers.get(held.lease.kind or "")
    failed(settler, worker_id, held, handler, held.timeout_error(stack, grace))
    held.lost.set()  # whatever the handler does next about the job is refused
    leases.release(held)
    if isinstance(runner, threading.Thread):
        running = handlers.abandon(runner)
        log.error("worker %s: %s: its handler is still running %gs past its time limit: "
                  "the worker stopped waiting for it and a new handler thread took its "
                  "place (%d such thread(s) still running; Python cannot stop a thread: "
                  "have long handlers call ctx.check_cancelled())", worker_id,
                  label(held), grace, running,
                  extra={"pgqueue": {"event": "abandoned", "job_id": held.lease.job_id,
                                     "count": running}})
    elif coroutines is not None and runner is not None:
        coroutines.abandon(runner)
        log.error("worker %s: %s: its async handler ignored its cancellation for %gs: the "
                  "worker stopped waiting for it and a new runner took its place",
                  worker_id, label(held), grace,
                  extra={"pgqueue": {"event": "abandoned", "job_id": held.lease.job_id}})
