"""Shared by the peers' adapters that use psycopg's async pool (chancy, procrastinate)."""
from __future__ import annotations

import asyncio
import time
from typing import Any


async def until_false(pool: Any, query: str, params: tuple[Any, ...], deadline: float) -> None:
    """Poll `query` (a single boolean: "is any job unfinished?") on a connection of `pool`
    every 2 ms until it is false or the deadline passes."""
    async with pool.connection() as conn:
        while time.perf_counter() < deadline:
            cur = await conn.execute(query, params)
            row = await cur.fetchone()
            if not row[0]:
                return
            await asyncio.sleep(0.002)
