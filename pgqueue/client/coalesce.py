"""Concurrent `AsyncQueue.enqueue` calls share transactions when the pool is busy.

A service with many tasks enqueuing one job each is bound by commits: one transaction per job.
While every pooled connection is busy with a batch, the calls that arrive wait in a list, and
the next free connection sends them together as one `enqueue_many` (one round trip, one
commit). Each call still returns only once the transaction holding its job has committed,
with that job's id; a lone call, or one arriving while a connection is free, runs alone
exactly as before (what it gains: docs/benchmarks.md, "In the client").

Nothing changes for the caller but speed:
- the ids follow the calls' order, and a dedup key repeated within a batch gives the first
  call's id to both, as it would one after the other;
- when a batch fails for any reason but a lost connection (a payload over its stream's limit,
  say), nothing of it was written, and each of its calls runs alone, so each gets the error
  (or the id) it would have had without the others;
- a lost connection after which the batch may have committed is re-sent by enqueue_many with
  its request token (the database returns the first attempt's ids); if that fails too, every
  call of the batch gets the error;
- a call cancelled before its batch was sent is left out of it.

Only AsyncQueue does this (this module is async-only, not generated): in threads, Queue's
calls run as they come.
"""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from pgqueue.errors import ConnectionFailed
from pgqueue.models import NewJob

#: The most jobs one shared transaction carries.
MAX_BATCH = 1000
#: A call's trace context (tracing.py), or None.
Trace = dict[str, str] | None


class EnqueueBatcher:
    """The calls waiting for a connection, and the batches in flight (at most `batches`)."""

    def __init__(self, *, alone: Callable[[NewJob, Trace], Awaitable[int]],
                 together: Callable[[list[NewJob], list[Trace]], Awaitable[list[int]]],
                 batches: int) -> None:
        """
        :param alone: enqueue one job (what a call does without company), with the trace
            context of the call's producer span.
        :param together: enqueue jobs in one transaction, ids in order, each with its call's
            trace context.
        :param batches: how many batches may be in flight (the pool's size).
        """
        self._alone = alone
        self._together = together
        self._batches = batches
        self._waiting: list[tuple[NewJob, Trace, asyncio.Future[int]]] = []
        self._senders: set[asyncio.Task[None]] = set()

    async def submit(self, job: NewJob, trace: Trace) -> int:
        """Enqueue `job`, alone or with the calls waiting beside it; its id. `trace`: the trace
        context its call's producer span gives the job (tracing.py; None: none)."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiting.append((job, trace, future))
        if len(self._senders) < self._batches:
            sender = asyncio.ensure_future(self._send())
            self._senders.add(sender)
            sender.add_done_callback(self._senders.discard)
        return await future

    async def _send(self) -> None:
        """Send what is waiting, batch after batch, until nothing is."""
        while self._waiting:
            taken, self._waiting = self._waiting[:MAX_BATCH], self._waiting[MAX_BATCH:]
            batch = [item for item in taken if not item[2].done()]
            if len(batch) == 1:
                await self._settle_alone(*batch[0])
            elif batch:
                await self._settle_together(batch)

    async def _settle_alone(self, job: NewJob, trace: Trace, future: asyncio.Future[int]) -> None:
        try:
            result = await self._alone(job, trace)
        except Exception as exc:  # the call's own error, as without company
            if not future.done():
                future.set_exception(exc)
        else:
            if not future.done():
                future.set_result(result)

    async def _settle_together(self, batch: list[tuple[NewJob, Trace, asyncio.Future[int]]]
                               ) -> None:
        try:
            ids = await self._together([job for job, _, _ in batch], [t for _, t, _ in batch])
        except ConnectionFailed as exc:  # it may have committed: running each again could not
            for _, _, future in batch:
                if not future.done():
                    future.set_exception(exc)
        except Exception:  # nothing was written: each call runs alone, to its own outcome
            for job, trace, future in batch:
                await self._settle_alone(job, trace, future)
        else:
            for (_, _, future), job_id in zip(batch, ids, strict=True):
                if not future.done():
                    future.set_result(job_id)
