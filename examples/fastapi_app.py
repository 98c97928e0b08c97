"""FastAPI on pgqueue: an endpoint writes an order and enqueues its invoice job in one
transaction, with AsyncQueue (the job exists only if the order does); the pgqueue dashboard,
read-only, is mounted at /queue.

    PGQUEUE_DSN="dbname=shop" <any ASGI server> examples.fastapi_app:app

tests/integration/test_examples.py runs it (a placed order has its job; a duplicate order is
refused with 409 and leaves no job; the mounted dashboard shows the job, its links under /queue).
"""
from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse

import pgqueue
from pgqueue.dashboard import create_app


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    dsn = os.environ["PGQUEUE_DSN"]
    async with pgqueue.AsyncQueue(dsn, stream="orders") as queue:
        async with queue.connection() as conn:
            await conn.execute("CREATE TABLE IF NOT EXISTS orders (number int PRIMARY KEY)")
        app.state.queue = queue
        yield


app = FastAPI(lifespan=lifespan)
# The dashboard is an ASGI app like any other: read-only here (create_app(dsn, admin_token=...)
# lets it act). It connects on its first request.
app.mount("/queue", create_app(os.environ.get("PGQUEUE_DSN", "dbname=shop")))


@app.exception_handler(pgqueue.ConnectionFailed)
async def database_away(request: Request, exc: pgqueue.ConnectionFailed) -> JSONResponse:
    """While the database is unreachable (a restart, an outage) every request that needs it
    answers 503 within the queue's connect timeout, and works again once it is back."""
    return JSONResponse({"detail": "the database is unreachable: try again shortly"},
                        status_code=503, headers={"Retry-After": "5"})


@app.post("/orders/{number}")
async def place_order(number: int) -> dict[str, Any]:
    """The order and its invoice job commit together, on one of the queue's own connections
    (which come back as soon as the server does): the transaction block commits at its end,
    or rolls back when it raises."""
    queue: pgqueue.AsyncQueue = app.state.queue
    try:
        async with queue.connection() as conn, conn.transaction():
            await conn.execute("INSERT INTO orders (number) VALUES (%s)", [number])
            job_id = await queue.enqueue({"order": number}, kind="invoice", conn=conn)
    except psycopg.errors.UniqueViolation:
        raise HTTPException(status_code=409, detail=f"order {number} exists") from None
    return {"order": number, "job_id": job_id}
