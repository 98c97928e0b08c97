"""A producer process for the recovery test: enqueues RATE jobs a second of KIND on STREAM
through Queue (sync) or AsyncQueue (async) until SIGTERM, writing each id it was given to OUT
and counting the calls that failed; through an outage it keeps calling (each call fails within
its connect timeout).

    python tests/acceptance/recovery_producer.py DSN STREAM KIND sync|async RATE OUT
"""
from __future__ import annotations

import asyncio
import signal
import sys
import time
from typing import TextIO

import pgqueue


def main() -> int:
    dsn, stream, kind, mode, rate, out = sys.argv[1:7]
    gap = 1.0 / float(rate)
    stopping = [False]
    signal.signal(signal.SIGTERM, lambda *_: stopping.__setitem__(0, True))
    with open(out, "a", buffering=1) as ids:
        if mode == "sync":
            with pgqueue.Queue(dsn, stream, connect_timeout=1) as q:
                while not stopping[0]:
                    try:
                        ids.write(f"{q.enqueue({'at': time.time()}, kind=kind)}\n")
                    except pgqueue.ConnectionFailed:
                        continue
                    time.sleep(gap)
        else:
            asyncio.run(_produce(dsn, stream, kind, gap, ids, stopping))
    return 0


async def _produce(dsn: str, stream: str, kind: str, gap: float, ids: TextIO,
                   stopping: list[bool]) -> None:
    async with pgqueue.AsyncQueue(dsn, stream, connect_timeout=1) as q:
        while not stopping[0]:
            try:
                job_id = await q.enqueue({"at": time.time()}, kind=kind)
            except pgqueue.ConnectionFailed:
                continue
            ids.write(f"{job_id}\n")
            await asyncio.sleep(gap)


if __name__ == "__main__":
    sys.exit(main())
