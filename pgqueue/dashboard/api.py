"""The dashboard's HTTP API (JSON): what the pages show, for scripts. Reads are open; every
action needs the admin token (auth.py) and runs the same transition as the CLI, with its op.

    GET  /api/stats                       streams with jobs by state, oldest pending age
    GET  /api/jobs?stream=&state=&kind=&after=&limit=
    GET  /api/jobs/{id}                   the job, its steps and its history
    POST /api/jobs/{id}/{action}          requeue, release, rewind {"to_step"}, restart,
                                          skip-step, accept-step-set, cancel
    GET  /api/schedules                   POST /api/schedules/{stream}/{name}/pause|resume
    GET  /api/workers                     GET  /api/replicas
"""
from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from functools import wraps
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from pgqueue import jsonview
from pgqueue.dashboard import data, params
from pgqueue.dashboard.context import context, status_for

Handler = Callable[[Request], Awaitable[Response]]


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message, "status": status}, status_code=status)


def answers(handler: Callable[[Request], Awaitable[Any]]) -> Handler:
    """The handler's document as JSON; the library's errors as their statuses."""
    @wraps(handler)
    async def run(request: Request) -> Response:
        try:
            result = await handler(request)
        except Exception as exc:
            status = status_for(exc)
            if status is None:
                raise
            return error(status, str(exc))
        return result if isinstance(result, Response) else JSONResponse(result)
    return run


def acts(handler: Callable[[Request], Awaitable[Any]]) -> Handler:
    """An action: refused (403 read-only, 401 no or wrong token) before anything is read."""
    inner = answers(handler)

    @wraps(handler)
    async def run(request: Request) -> Response:
        denied = context(request).auth.denied(request)
        if denied is not None:
            return error(denied.status, denied.message)
        return await inner(request)
    return run


@answers
async def stats(request: Request) -> Any:
    """Every stream's jobs by state, oldest pending age and last hour; workers, replicas, op
    log."""
    ctx = context(request)
    return await data.stats(ctx.queue, ctx.cache)


@answers
async def jobs(request: Request) -> Any:
    """A page of jobs, newest first: `stream`, `state`, `kind`, `limit` (1-1000), `after` (the
    previous page's `next`)."""
    return await data.jobs(context(request).queue, params.JobFilter.parse(request.query_params),
                           params.Page.parse(request.query_params))


@answers
async def job(request: Request) -> Any:
    """One job (live or dead): its row, step list and history; 404 once nothing of it is left."""
    job_id = params.job_id(request.path_params["id"])
    found = await data.job(context(request).queue, job_id)
    if found is None:
        return error(404, data.gone(job_id))
    return found


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise params.BadInput("the request body must be a JSON object") from None
    if not isinstance(body, dict):
        raise params.BadInput("the request body must be a JSON object")
    return body


@acts
async def act(request: Request) -> Any:
    """An operator verb on one job (`requeue`, `release`, `rewind` with `{"to_step": ...}`,
    `restart`, `skip-step`, `accept-step-set`, `cancel`); needs the admin token."""
    job_id = params.job_id(request.path_params["id"])
    to_step = (await _body(request)).get("to_step")
    if to_step is not None and not isinstance(to_step, str):
        raise params.BadInput("to_step must be a string: the name of a step")
    verb, step = params.action(request.path_params["action"], to_step)
    q = context(request).queue
    await q.act(job_id, verb, to_step=step)
    return await data.after_action(q, job_id)


@answers
async def schedules(request: Request) -> Any:
    """Every stream's cron schedules with their next fire times."""
    return await data.schedules(context(request).queue)


def _schedule_action(paused: bool) -> Handler:
    @acts
    async def run(request: Request) -> Any:
        """Pause or resume a schedule (`/pause`, `/resume`); needs the admin token."""
        stream = params.stream(request.path_params["stream"])
        assert stream is not None
        q = context(request).queue.for_stream(stream)
        name = request.path_params["name"]
        found = await (q.pause_schedule(name) if paused else q.resume_schedule(name))
        return {"schedule": jsonview.schedule_json(found)}
    return run


@answers
async def kinds(request: Request) -> Any:
    """Every stream's kinds with settings."""
    return await data.kinds(context(request).queue)


@answers
async def workers(request: Request) -> Any:
    """Registered workers, live and stale, with the leases each holds."""
    return await data.workers(context(request).queue)


@answers
async def replicas(request: Request) -> Any:
    """The leader's replicas: position, lag in ops and seconds, stale."""
    return await data.replicas(context(request).queue)


ROUTES = [
    Route("/api/stats", stats),
    Route("/api/jobs", jobs),
    Route("/api/jobs/{id}", job),
    Route("/api/jobs/{id}/{action}", act, methods=["POST"]),
    Route("/api/schedules", schedules),
    Route("/api/schedules/{stream}/{name}/pause", _schedule_action(True), methods=["POST"]),
    Route("/api/schedules/{stream}/{name}/resume", _schedule_action(False), methods=["POST"]),
    Route("/api/kinds", kinds),
    Route("/api/workers", workers),
    Route("/api/replicas", replicas),
]
