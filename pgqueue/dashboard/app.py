"""create_app: the dashboard as an ASGI application a service can mount, or `pgqueue
dashboard` serves (uvicorn)."""
from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from importlib import resources

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pgqueue.client.queue_async import AsyncQueue
from pgqueue.dashboard import api, pages
from pgqueue.dashboard.auth import Auth
from pgqueue.dashboard.context import Context
from pgqueue.dashboard.data import Cache
from pgqueue.dashboard.live import Broadcaster
from pgqueue.db import connection_async as connection

#: Only this site's own scripts, styles and images; no framing (clickjacking).
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
                               "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; "
                               "form-action 'self'; base-uri 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "x-frame-options": "DENY",
}


class SecurityHeaders:
    """Adds SECURITY_HEADERS to every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {k.lower() for k, _ in headers}
                headers += [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()
                            if k.encode() not in present]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)


class AllowedHosts:
    """Refuses (400) a request whose Host header names none of `hosts` (`*.example.com`: that
    domain's names): a page of another site that rebinds its name to 127.0.0.1 sends its own
    name as the Host, and so cannot read the dashboard."""

    def __init__(self, app: ASGIApp, hosts: Sequence[str]) -> None:
        self.app = app
        self.exact = {h.lower().strip("[]") for h in hosts if not h.startswith("*.")}
        self.domains = tuple(h.lower()[1:] for h in hosts if h.startswith("*."))

    def allows(self, header: str) -> bool:
        host = header.strip().lower()
        host = host[1:host.find("]")] if host.startswith("[") else host.split(":")[0]
        return host in self.exact or (bool(host) and host.endswith(self.domains))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            header = dict(scope.get("headers") or []).get(b"host", b"").decode("latin-1")
            if not self.allows(header):
                await PlainTextResponse("this dashboard does not answer that host name (give "
                                        "it with --allowed-hosts)", status_code=400)(
                    scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_app(dsn: str | Sequence[str], *, admin_token: str | None = None,
               connect_timeout: float = connection.CONNECT_TIMEOUT,
               listen_dsn: str | None = None, pooled: bool | None = None,
               allowed_hosts: Sequence[str] | None = None) -> Starlette:
    """The dashboard over the pgqueue database at `dsn` (or a leader and its replicas).

    Read-only unless `admin_token` is given (at least 16 characters): then actions need it,
    as `Authorization: Bearer TOKEN` or a login session. The database is reached on the first
    request, so a service can mount this before its database is up; while it is unreachable
    a page answers 503 within `connect_timeout` seconds (default 5). Behind a pooler in
    transaction mode (`pooled`, detected when None), a page's live refresh hears of new jobs
    only through `listen_dsn`, a direct connection; without it pages refresh every
    REFRESH_SECONDS. `allowed_hosts`: the Host names a request may carry (`*.example.com`
    for a domain's), any other refused with 400, so that a DNS-rebinding page cannot read a
    dashboard on localhost (`pgqueue dashboard` gives localhost and the address it listens
    on); None: any (mounted in an app of yours, whose host check applies)."""
    auth = Auth(admin_token)
    queue = AsyncQueue(dsn, pool_size=4, connect_timeout=connect_timeout, pooled=pooled)

    async def listen_at() -> str:
        # the listener finds the leader itself: it never opens (or waits on) the queue's pool
        if listen_dsn is not None:
            return listen_dsn
        return await connection.find_leader(queue.dsns, connect_timeout=connect_timeout)

    ctx = Context(queue, auth, Cache(), Broadcaster(listen_at, connect_timeout=connect_timeout))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        ctx.live.start()
        try:
            yield
        finally:
            await ctx.live.stop()
            await queue.close()

    static = StaticFiles(directory=str(resources.files("pgqueue.dashboard") / "static"))
    app = Starlette(routes=[*api.ROUTES, *pages.ROUTES, Mount("/static", static, name="static")],
                    middleware=[*([] if allowed_hosts is None else [
                        Middleware(AllowedHosts, hosts=list(allowed_hosts))]),
                                Middleware(SecurityHeaders)], lifespan=lifespan,
                    exception_handlers={404: _http_error, 405: _http_error})
    app.state.pgqueue = ctx
    return app


async def _http_error(request: Request, exc: Exception) -> Response:
    """No such route (404), or not with this method (405): JSON under /api, else a page."""
    status = getattr(exc, "status_code", 404)
    path = pages.here(request)
    message = (f"no such route: {path}" if status == 404
               else f"{request.method} is not allowed on {path}")
    if path.startswith("/api/"):
        return api.error(status, message)
    return pages.problem(request, status, message)
