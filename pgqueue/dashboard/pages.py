"""The dashboard's pages: server-rendered HTML (Jinja2, autoescaped: job data always shows as
text) from the same documents the API returns (data.py), and the forms that act on jobs and
schedules. A form posts, the action runs, and the browser is sent back (303) to the page it
came from; a refusal renders the reason with its status."""
from __future__ import annotations

import datetime as dt
import json
from collections.abc import Awaitable, Callable
from functools import wraps
from importlib import resources
from typing import Any
from urllib.parse import urlencode

import jinja2
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.templating import Jinja2Templates

from pgqueue.client import observe
from pgqueue.client.observe_async import KIND_WINDOW
from pgqueue.dashboard import auth, data, params
from pgqueue.dashboard.context import context, status_for
from pgqueue.models import JOB_STATES, VERBS

Handler = Callable[[Request], Awaitable[Response]]

#: What a page says after a verb went through.
DONE = {"requeue": "requeued", "release": "released", "rewind": "rewound",
        "restart": "restarted", "skip-step": "skipped its step in progress",
        "accept-step-set": "accepted the new step set", "cancel": "cancelled"}
#: The states in which a job stands out on the overview.
ALARM_STATES = ("dead", "quarantined", "undecodable")


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    seconds = max(0.0, float(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.1f} s"


def _since(iso: str | None) -> str:
    if not iso:
        return "–"
    at = dt.datetime.fromisoformat(iso)
    delta = (dt.datetime.now(dt.timezone.utc) - at).total_seconds()
    return f"{_age(abs(delta))} {'ago' if delta >= 0 else 'from now'}"


def _size(n: int | None) -> str:
    if n is None:
        return "–"
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit} ({n:,} bytes)"
    return f"{n:,} bytes"


def _templates() -> Jinja2Templates:
    folder = resources.files("pgqueue.dashboard") / "templates"
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(folder)), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    env.filters.update(age=_age, since=_since, size=_size,
                       when=lambda iso: data.when(dt.datetime.fromisoformat(iso)) if iso else "–",
                       pretty=lambda v: json.dumps(v, indent=2, ensure_ascii=False, default=str))
    return Jinja2Templates(env=env)


TEMPLATES = _templates()


def root(request: Request) -> str:
    """Where the dashboard is mounted ("" at the top of its own server)."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def here(request: Request) -> str:
    """The request's path within the dashboard (its mount point left off)."""
    path, prefix = request.url.path, root(request)
    return path[len(prefix):] or "/" if prefix and path.startswith(prefix) else path


def back(request: Request) -> str:
    """Where a login should return to: this page (with its query) for a GET; for a form's
    answer, the page the form was on (a POST route answers no GET)."""
    path = here(request)
    if request.method in ("GET", "HEAD"):
        return path + (f"?{request.url.query}" if request.url.query else "")
    if path.startswith("/jobs/"):
        return path.rsplit("/", 1)[0]  # /jobs/{id}/{action} -> /jobs/{id}
    if path.startswith("/schedules/"):
        return "/schedules"
    return "/jobs"


def redirect(request: Request, to: str) -> Response:
    """303 to a path within the dashboard, wherever it is mounted."""
    return RedirectResponse(root(request) + to, status_code=303)


def render(request: Request, name: str, code: int = 200, **values: Any) -> Response:
    ctx = context(request)
    return TEMPLATES.TemplateResponse(request, name, {
        "read_only": ctx.auth.read_only, "logged_in": ctx.auth.logged_in(request),
        "csrf": ctx.auth.csrf(request), "states": JOB_STATES, "verbs": VERBS,
        "alarm_states": ALARM_STATES, "root": root(request), "path": here(request),
        "back": back(request), **values},
        status_code=code)


def problem(request: Request, status: int, message: str) -> Response:
    return render(request, "error.html", status, status=status, message=message)


def page(handler: Handler) -> Handler:
    """The page, or the library's error as a page with its status."""
    @wraps(handler)
    async def run(request: Request) -> Response:
        try:
            return await handler(request)
        except Exception as exc:
            status = status_for(exc)
            if status is None:
                raise
            return problem(request, status, str(exc))
    return run


def form_action(handler: Callable[[Request, FormData], Awaitable[Response]]) -> Handler:
    """A form that changes something: refused before anything runs unless the admin token's
    session (and its CSRF token) or a bearer token is there."""
    @page
    @wraps(handler)
    async def run(request: Request) -> Response:
        form = await request.form()
        csrf = form.get(auth.CSRF_FIELD)
        denied = context(request).auth.denied(request, csrf if isinstance(csrf, str) else None)
        if denied is not None:
            return problem(request, denied.status, denied.message)
        return await handler(request, form)
    return run


def _fields(form: FormData) -> dict[str, str]:
    return {k: v for k, v in form.items() if isinstance(v, str)}


@page
async def overview(request: Request) -> Response:
    """The overview: every stream's jobs by state and last hour, workers, replicas, op log."""
    ctx = context(request)
    return render(request, "overview.html", stats=await data.stats(ctx.queue, ctx.cache))


@page
async def jobs(request: Request) -> Response:
    """Jobs by stream, state and kind, newest first, with keyset paging and bulk actions."""
    ctx = context(request)
    where = params.JobFilter.parse(request.query_params)
    at = params.Page.parse(request.query_params)
    found = await data.jobs(ctx.queue, where, at)
    streams = sorted((await ctx.queue.gauges()).streams)
    # a stream nobody knows is a typo (in a bookmarked URL, say), not "no jobs match"
    unknown = (await ctx.queue.unknown_stream(where.stream)
               if where.stream and not found["jobs"] else None)
    base = where.query() | ({"limit": str(at.limit)} if at.limit != params.PAGE else {})
    # dead letters: how many in all, and the biggest groups by kind and error
    dead = None
    if where.state == "dead":
        gauges = await ctx.queue.gauges()
        dead = {"total": sum(n for (s, st), n in gauges.jobs.items()
                             if st == "dead" and where.stream in (None, s)),
                "groups": await (ctx.queue.for_stream(where.stream) if where.stream
                                 else ctx.queue).dead_letter_groups(
                    all_streams=where.stream is None)}
    # the bulk menu offers what the filtered jobs' state allows (every verb for any state)
    bulk_verbs = await ctx.queue.state_verbs(where.state) if where.state else list(VERBS)
    return render(request, "jobs.html", found=found, where=where, streams=streams,
                  unknown_stream=unknown, bulk_verbs=bulk_verbs, dead=dead,
                  dead_window=observe.DEAD_GROUP_WINDOW,
                  next_url=None if found["next"] is None
                  else f"{root(request)}/jobs?" + urlencode({**base, "after": found["next"]}),
                  first_url=None if at.after is None else f"{root(request)}/jobs?" + urlencode(base),
                  kind_window=KIND_WINDOW)


@page
async def job(request: Request) -> Response:
    """One job: state, payload preview, checkpoint, steps, error, history, and its actions."""
    job_id = params.job_id(request.path_params["id"])
    found = await data.job(context(request).queue, job_id)
    if found is None:
        return problem(request, 404, data.gone(job_id))
    verb = request.query_params.get("done", "")
    done = DONE.get(verb)
    if verb == "cancel" and found["job"] is not None:  # still there: a worker runs it
        done = ("cancel requested: the worker running it stops it at its next advance or step "
                "boundary, and it ends as cancelled")
    return render(request, "job.html", doc=found, done=done)


@form_action
async def act(request: Request, form: FormData) -> Response:
    """The form behind a job page's action (a session and its CSRF token required)."""
    job_id = params.job_id(request.path_params["id"])
    verb, step = params.action(request.path_params["action"], _fields(form).get("to_step"))
    await context(request).queue.act(job_id, verb, to_step=step)
    return redirect(request, f"/jobs/{job_id}?" + urlencode({"done": verb}))


@page
async def bulk_confirm(request: Request) -> Response:
    """How many jobs a bulk action would touch, with the form that does it."""
    where = params.JobFilter.parse(request.query_params)
    verb, step = params.action(request.query_params.get("action", ""),
                               request.query_params.get("to_step"))
    count = await context(request).queue.count_jobs(stream=where.stream, state=where.state,
                                                    kind=where.kind)
    return render(request, "bulk.html", where=where, verb=verb, to_step=step, count=count,
                  result=None)


@form_action
async def bulk(request: Request, form: FormData) -> Response:
    """Run a bulk action on the jobs counted when it was confirmed (up to `through`)."""
    fields = _fields(form)
    where = params.JobFilter.parse(fields)
    verb, step = params.action(fields.get("action", ""), fields.get("to_step"))
    through = params.through(fields)
    if through is None:
        raise params.BadInput("through is required: confirm the count first")
    result = await context(request).queue.act_on_jobs(
        verb, stream=where.stream, state=where.state, kind=where.kind, through=through,
        to_step=step)
    return render(request, "bulk.html", where=where, verb=verb, to_step=step, count=None,
                  result=result)


@page
async def schedules(request: Request) -> Response:
    """Cron schedules with their next fire times, pause and resume."""
    return render(request, "schedules.html", doc=await data.schedules(context(request).queue))


def _schedule_form(paused: bool) -> Handler:
    @form_action
    async def run(request: Request, form: FormData) -> Response:
        """Pause or resume a schedule from its page's form."""
        stream = params.stream(request.path_params["stream"])
        assert stream is not None
        q = context(request).queue.for_stream(stream)
        name = request.path_params["name"]
        await (q.pause_schedule(name) if paused else q.resume_schedule(name))
        return redirect(request, "/schedules")
    return run


@page
async def kinds(request: Request) -> Response:
    """Every stream's kinds with their settings."""
    return render(request, "kinds.html", doc=await data.kinds(context(request).queue))


@page
async def workers(request: Request) -> Response:
    """Live and stale workers, and the leases each holds."""
    return render(request, "workers.html", doc=await data.workers(context(request).queue))


@page
async def replicas(request: Request) -> Response:
    """Replicas: position, lag, stale."""
    return render(request, "replicas.html", doc=await data.replicas(context(request).queue))


def _next(value: str | None) -> str:
    """Where to go after logging in: a path of this site only (never another origin)."""
    if value and value.startswith("/") and not value.startswith("//") and "\\" not in value:
        return value
    return "/"


async def login_form(request: Request) -> Response:
    """The admin token's login form (acting needs it)."""
    return render(request, "login.html", next=_next(request.query_params.get("next")), wrong=False)


async def login(request: Request) -> Response:
    """Log in with the admin token: a signed session cookie (12 hours)."""
    ctx = context(request)
    form = _fields(await request.form())
    target = _next(form.get("next"))
    if ctx.auth.read_only:
        return problem(request, 403, auth.READ_ONLY.message)
    if not auth.same_origin(request):
        return problem(request, 403, "cross-site request refused (its Origin is another site)")
    if not ctx.auth.token_matches(form.get("token", "")):
        return render(request, "login.html", 401, next=target, wrong=True)
    response = redirect(request, target)
    response.set_cookie(auth.SESSION_COOKIE, ctx.auth.new_session(), max_age=auth.SESSION_SECONDS,
                        path=root(request) or "/", httponly=True, samesite="strict",
                        secure=request.url.scheme == "https")
    return response


async def logout(request: Request) -> Response:
    """End the session."""
    if not auth.same_origin(request):
        return problem(request, 403, "cross-site request refused (its Origin is another site)")
    context(request).auth.revoke(request.cookies.get(auth.SESSION_COOKIE))
    response = redirect(request, "/")
    response.delete_cookie(auth.SESSION_COOKIE, path=root(request) or "/", httponly=True,
                           samesite="strict")
    return response


async def events(request: Request) -> Response:
    """Server-sent events that tell open pages to refresh (on enqueue, at most once a second;
    every 10 s otherwise)."""
    return StreamingResponse(context(request).live.events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


ROUTES = [
    Route("/", overview),
    Route("/jobs", jobs),
    Route("/jobs/{id}", job),
    Route("/jobs/{id}/{action}", act, methods=["POST"]),
    Route("/bulk", bulk_confirm),
    Route("/bulk", bulk, methods=["POST"]),
    Route("/schedules", schedules),
    Route("/schedules/{stream}/{name}/pause", _schedule_form(True), methods=["POST"]),
    Route("/schedules/{stream}/{name}/resume", _schedule_form(False), methods=["POST"]),
    Route("/kinds", kinds),
    Route("/workers", workers),
    Route("/replicas", replicas),
    Route("/login", login_form),
    Route("/login", login, methods=["POST"]),
    Route("/logout", logout, methods=["POST"]),
    Route("/events", events),
]
