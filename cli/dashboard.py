"""`pgqueue dashboard`: the web dashboard and its HTTP API (pgqueue/dashboard), served by
uvicorn until SIGTERM or SIGINT.

Read-only unless started with an admin token (`--admin-token-file F`, else
$PGQUEUE_ADMIN_TOKEN); the token is read, never printed or logged.
"""
from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import click

from pgqueue.runtime import signals

from .common import EXIT_UNAVAILABLE, EXIT_USAGE, dsn, fail, open_queue, say, settings, shown_dsn

TOKEN_ENV = "PGQUEUE_ADMIN_TOKEN"  # noqa: S105  (the variable's name, not a token)


def _token(path: str | None) -> tuple[str | None, str]:
    """The admin token and where it came from (for the start line; never the token)."""
    if path is not None:
        try:
            return Path(path).read_text(encoding="utf-8").strip(), f"the admin token in {path}"
        except (OSError, UnicodeDecodeError) as exc:
            fail(f"--admin-token-file: cannot read {path}: {exc}", EXIT_USAGE)
    value = os.environ.get(TOKEN_ENV)
    if value:
        return value.strip(), f"the admin token in ${TOKEN_ENV}"
    return None, "read-only (no admin token)"


#: The names of this machine that a request to a dashboard on loopback may carry.
LOCAL_NAMES = ("localhost", "127.0.0.1", "::1", "[::1]")


def hosts_for(bound: str, extra: str | None) -> list[str]:
    """The Host names the dashboard answers: localhost, the address it listens on (on every
    interface: this machine's names), and those given."""
    names = [*LOCAL_NAMES]
    if bound in ("0.0.0.0", "::", ""):  # noqa: S104 - what it was told to listen on
        names += [socket.gethostname(), socket.getfqdn()]
    else:
        names.append(bound)
    names += [h.strip() for h in (extra or "").split(",") if h.strip()]
    return list(dict.fromkeys(names))


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="The address to listen on (0.0.0.0: every interface; put TLS in front).")
@click.option("--port", type=click.IntRange(min=0, max=65535), default=8470, show_default=True,
              help="The port to listen on (0: any free one, printed).")
@click.option("--forwarded-allow-ips", default=None, metavar="IPS",
              help="Proxies (comma-separated addresses, or *) whose X-Forwarded-Proto and "
                   "-For to trust: behind a TLS proxy, so https:// pages may post and the "
                   "session cookie is Secure (default: 127.0.0.1, or $FORWARDED_ALLOW_IPS).")
@click.option("--admin-token-file", default=None, metavar="FILE",
              help=f"A file holding the admin token that actions need (else ${TOKEN_ENV}; "
                   f"neither: read-only).")
@click.option("--listen-dsn", envvar="PGQUEUE_LISTEN_DSN", default=None, metavar="DSN",
              show_envvar=True,
              help="A direct connection to the server for the pages' live refresh, when --dsn "
                   "goes through a pooler in transaction mode (which delivers no "
                   "notification; pages then refresh every 10 s).")
@click.option("--allowed-hosts", default=None, metavar="HOSTS",
              help="Host names (comma-separated; *.example.com for a domain's) requests may "
                   "name besides localhost and the address it listens on: any other Host "
                   "is refused (400), so a DNS-rebinding page cannot read the dashboard.")
def dashboard(host: str, port: int, forwarded_allow_ips: str | None,
              admin_token_file: str | None, listen_dsn: str | None,
              allowed_hosts: str | None) -> None:
    """Serve the web dashboard and its JSON API (/api/...) until SIGTERM or SIGINT."""
    try:
        import uvicorn

        from pgqueue.dashboard import create_app
    except ImportError as exc:
        fail(f"the dashboard needs its extra: pip install 'pgqueue-py[dashboard]' ({exc})",
             EXIT_UNAVAILABLE)
    token, mode = _token(admin_token_file)
    database = dsn()
    with open_queue():  # a wrong DSN or a missing schema fails here, not at the first page
        pass
    try:
        app = create_app(database, admin_token=token,
                         connect_timeout=settings().connect_timeout,
                         listen_dsn=listen_dsn or None, pooled=settings().pooled,
                         allowed_hosts=hosts_for(host, allowed_hosts))
    except ValueError as exc:  # the token is too short; the message never holds it
        fail(f"{'--admin-token-file' if admin_token_file else TOKEN_ENV}: {exc}", EXIT_USAGE)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)  # connections wait in the backlog from now on, not refused
    except OSError as exc:
        sock.close()
        fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}", EXIT_UNAVAILABLE)
    bound = sock.getsockname()[1]
    shown_host = f"[{host}]" if family == socket.AF_INET6 else host
    say(f"dashboard of {shown_dsn(database)} on http://{shown_host}:{bound}/ ({mode})")
    sys.stdout.flush()  # the address, for whoever started it
    config = uvicorn.Config(app, log_level="warning", access_log=False,
                            timeout_graceful_shutdown=2, lifespan="on", proxy_headers=True,
                            forwarded_allow_ips=forwarded_allow_ips)
    # uvicorn stops on SIGTERM/SIGINT, then raises the signal again for the handlers it found:
    # these take it, so a requested stop exits 0 (as `pgqueue metrics serve` does).
    restore = signals.install(lambda _sig: None)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        restore()
