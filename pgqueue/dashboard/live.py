"""Live refresh: server-sent events woken by LISTEN/NOTIFY.

One listener connection per dashboard process LISTENs on the channel every enqueue notifies
(run.NOTIFY_CHANNEL); each open page holds an event stream that says `refresh` when a
notification came (at most once a second, however many jobs arrive) and at least every
REFRESH_SECONDS (acks, failures and operator actions notify nothing). The page's script
closes its stream while the tab is hidden, so a hidden tab costs nothing.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable

import psycopg

from pgqueue.db import connection_async as connection
from pgqueue.db import run_async as run
from pgqueue.errors import PgQueueError

log = logging.getLogger("pgqueue.dashboard")

#: A page refreshes at least this often, notified or not.
REFRESH_SECONDS = 10.0
#: And at most once per this many seconds.
DEBOUNCE_SECONDS = 1.0
#: How often the listener asks which database is the leader (given several DSNs).
LEADER_CHECK_SECONDS = 30.0


class Broadcaster:
    """Counts notifications; streams wait for the count to change. While the listener cannot
    reach the database, `away` says why, and the streams say `away` instead of `refresh`
    (the page shows it, and keeps what it shows: nothing hangs on the database)."""

    def __init__(self, leader: Callable[[], Awaitable[str]], *,
                 connect_timeout: float | None = None) -> None:
        self._leader = leader
        self._connect_timeout = connect_timeout
        #: why the database is unreachable (None: it is reachable, as far as the listener knows)
        self.away: str | None = None
        self.generation = 0
        self._changed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start listening (once; the first event stream starts it when the app is mounted in
        another, whose lifespan does not run this one's)."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._listen(), name="pgqueue-dashboard-listener")

    async def stop(self) -> None:
        """Cancel the listener and wait for it, re-cancelling should a library swallow the
        cancellation (a bounded wait: a stop never hangs)."""
        task = self._task
        if task is None:
            return
        for _ in range(20):
            task.cancel()
            done, _pending = await asyncio.wait({task}, timeout=0.25)
            if done:
                break
        else:
            log.warning("dashboard listener did not stop within 5 s; leaving it")
            return
        with contextlib.suppress(asyncio.CancelledError, Exception):
            task.result()

    async def _bump(self) -> None:
        async with self._changed:
            self.generation += 1
            self._changed.notify_all()

    async def _listen(self) -> None:
        delay = 0.5
        while True:
            try:
                current = await self._leader()
                async with await connection.connect(
                        current, connect_timeout=self._connect_timeout) as conn:
                    await run.listen(conn, run.NOTIFY_CHANNEL)
                    delay = 0.5
                    if self.away is not None:
                        self.away = None
                        await self._bump()  # back: every page refreshes
                    while True:
                        async for _ in conn.notifies(timeout=LEADER_CHECK_SECONDS):
                            await self._bump()
                        if await self._leader() != current:
                            break  # a failover moved the leader: listen there
                continue
            except (PgQueueError, psycopg.Error, OSError) as exc:
                log.debug("dashboard listener reconnecting in %.1fs: %s", delay, exc)
                if self.away is None:
                    self.away = " ".join(str(exc).split()) or type(exc).__name__
                    await self._bump()  # every page says so at once
            await asyncio.sleep(delay)  # reconnect backoff, not synchronisation
            delay = min(delay * 2, 10.0)

    async def wait(self, seen: int, timeout: float) -> int:
        """The generation once it differs from `seen`, or after `timeout` seconds."""
        async with self._changed:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(
                    self._changed.wait_for(lambda: self.generation != seen), timeout)
            return self.generation

    async def events(self) -> AsyncGenerator[str, None]:
        """One page's event stream: `refresh` when something happened, and now and then."""
        self.start()
        seen = self.generation
        yield "retry: 3000\n\n"
        while True:
            seen = await self.wait(seen, REFRESH_SECONDS)
            if self.away is not None:
                yield f"event: away\ndata: {json.dumps({'message': self.away})}\n\n"
                continue
            yield "event: refresh\ndata: {}\n\n"
            await asyncio.sleep(DEBOUNCE_SECONDS)  # debounce a burst of notifications
