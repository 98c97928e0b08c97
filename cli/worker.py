"""`pgqueue worker` and `pgqueue maintain`: the long-running processes.

`worker` imports an App from `module:attr` and runs pgqueue.Worker until SIGTERM/SIGINT,
then drains and exits 0. `maintain` runs the maintenance passes (reclaim expired leases,
forget dead workers) on a timer, or once with --once.
"""
from __future__ import annotations

import dataclasses
import importlib
import logging
import os
import sys
import traceback
from typing import Any

import click

import pgqueue
from pgqueue.db import connection
from pgqueue.maintenance import maintain
from pgqueue.runtime.worker import HEARTBEAT_SECONDS
from pgqueue.telemetry.logs import JsonFormatter

from . import common


class PrefetchType(click.ParamType):  # type: ignore[type-arg]
    """`auto` (None: the worker's automatic prefetch) or a number of jobs, 0 to 100000."""

    name = "auto|N"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> int | None:
        if value is None or isinstance(value, int):
            return value
        text = str(value).strip().lower()
        if text == "auto":
            return None
        try:
            number = int(text)
        except ValueError:
            self.fail(f"{value!r} is neither auto nor a number of jobs", param, ctx)
        if not 0 <= number <= 100_000:
            self.fail(f"{number} is not between 0 and 100000", param, ctx)
        return number


PREFETCH = PrefetchType()


def _short_error(exc: BaseException, frames: int = 3) -> str:
    """An error raised while importing an app, in a short block: where it was raised (the
    last few frames, the app's own) and what it says, indented."""
    stack = traceback.extract_tb(exc.__traceback__)[-frames:]
    lines = [f"  File \"{f.filename}\", line {f.lineno}, in {f.name}" for f in stack]
    if isinstance(exc, SyntaxError) and exc.filename:
        lines.append(f"  File \"{exc.filename}\", line {exc.lineno}")
    lines += ["  " + line for line in
              "".join(traceback.format_exception_only(type(exc), exc)).strip().splitlines()]
    return "\n".join(lines)


def load_app(spec: str) -> pgqueue.App:
    """Import `module:attr` (the current directory is importable, as with `python -m`)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise click.BadParameter(f"expected MODULE:ATTR, got {spec!r}", param_hint="--app")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the module's own error (a SyntaxError, a failed import, ...)
        raise click.BadParameter(f"cannot import {module_name!r}:\n{_short_error(exc)}",
                                 param_hint="--app") from None
    if not hasattr(module, attr):
        raise click.BadParameter(f"module {module_name} has no attribute {attr}",
                                 param_hint="--app")
    app = getattr(module, attr)
    if not isinstance(app, pgqueue.App):
        raise click.BadParameter(
            f"{spec!r} is {type(app).__name__}, not a pgqueue.App", param_hint="--app")
    return app


def _logging(verbose: bool, log_format: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(
        "%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, handlers=[handler])
    logging.getLogger("psycopg").setLevel(logging.WARNING)
    # The pool warns at every failed reconnect; an outage is the worker's to tell (once when it
    # starts, once a minute, once when it ends: pgqueue/telemetry/outage.py).
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)


@click.command()
@click.option("--app", "app_spec", required=True, metavar="MODULE:ATTR",
              help="The pgqueue.App whose handlers this worker runs.")
@click.option("--stream", "streams", multiple=True, default=("default",), show_default=True,
              help="A stream to work on (repeat for several).")
@click.option("--concurrency", type=click.IntRange(min=1), default=4, show_default=True,
              help="Handler threads: jobs of plain def handlers running at once.")
@click.option("--async-concurrency", type=click.IntRange(min=0, max=100_000), default=None,
              help="Coroutines in flight at once for async def handlers, on the worker's event "
                   "loop beside the threads [default: 100 when the app has async handlers].")
@click.option("--visibility-timeout", type=click.FloatRange(min=0, min_open=True), default=30.0,
              show_default=True, help="Seconds a lease lasts without renewal.")
@click.option("--renew-interval", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Seconds between renewals [default: a third of the visibility timeout].")
@click.option("--poll-interval", type=click.FloatRange(min=0, min_open=True), default=1.0,
              show_default=True, help="Seconds between polls when no NOTIFY arrives.")
@click.option("--maintenance-interval", type=click.FloatRange(min=0, min_open=True), default=1.0,
              show_default=True, help="Seconds between maintenance passes (when elected).")
@click.option("--no-maintenance", is_flag=True, help="Do not take part in maintenance.")
@click.option("--grace-period", type=click.FloatRange(min=0), default=30.0, show_default=True,
              help="Seconds running handlers get to finish on SIGTERM before their jobs are "
                   "returned.")
@click.option("--node", type=click.IntRange(min=0), default=0, show_default=True,
              help="This machine's node number (recorded on every lease).")
@click.option("--prefetch", type=PREFETCH, default="auto", show_default=True,
              help="Jobs leased ahead of a free handler thread: a number, or auto (about a "
                   "quarter second of work at the worker's recent rate, at most 4000). A job "
                   "leased ahead is charged nothing if the worker dies before it starts.")
@click.option("--metrics-port", type=click.IntRange(min=0, max=65535), default=None,
              help="Serve this worker's Prometheus metrics on this port (/metrics; 0: any free "
                   "port, logged at start) [default: none].")
@click.option("--metrics-host", default="127.0.0.1", show_default=True,
              help="The address the metrics listen on (0.0.0.0: every interface).")
@click.option("--listen-dsn", envvar="PGQUEUE_LISTEN_DSN", default=None, metavar="DSN",
              show_envvar=True,
              help="A direct connection to the server for LISTEN, when --dsn goes through a "
                   "pooler in transaction mode (which delivers no notification): wake-ups "
                   "at once instead of polling.")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="Log lines as text, or one JSON object per record.")
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def worker(app_spec: str, streams: tuple[str, ...], concurrency: int, visibility_timeout: float,
           renew_interval: float | None, poll_interval: float, maintenance_interval: float,
           no_maintenance: bool, grace_period: float, node: int, prefetch: int | None,
           async_concurrency: int | None, metrics_port: int | None, metrics_host: str,
           listen_dsn: str | None, log_format: str, verbose: bool) -> None:
    """Run the handlers of an App until SIGTERM or SIGINT, then drain and exit 0."""
    app = load_app(app_spec)
    _logging(verbose, log_format)
    dsn = common.dsn()
    logging.getLogger("pgqueue.worker").info("connecting to %s", connection.redact(dsn))
    settings = pgqueue.WorkerSettings(
        streams=streams, concurrency=concurrency, async_concurrency=async_concurrency,
        prefetch=prefetch, visibility_timeout=visibility_timeout, renew_interval=renew_interval,
        poll_interval=poll_interval, maintenance=not no_maintenance,
        maintenance_interval=maintenance_interval, grace_period=grace_period, node=node,
        metrics_port=metrics_port, metrics_host=metrics_host,
        connect_timeout=common.settings().connect_timeout, listen_dsn=listen_dsn or None,
        pooled=common.settings().pooled)
    pgqueue.Worker(app, dsn, settings).run()


@click.command()
@click.option("--once", is_flag=True, help="Run one pass and exit (no election needed).")
@click.option("--interval", type=click.FloatRange(min=0, min_open=True), default=1.0,
              show_default=True, help="Seconds between passes.")
@click.option("--json", "as_json", is_flag=True, help="With --once: print the pass as JSON.")
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def maintain_cmd(once: bool, interval: float, as_json: bool, verbose: bool) -> None:
    """Reclaim expired leases, fire due cron ticks, prune the op log and forget dead workers,
    every INTERVAL seconds (or --once).

    Safe to run anywhere, any number of times: runners elect one of themselves (a claim each
    renews at every pass), and every pass is idempotent."""
    dsn = common.dsn()
    if once:
        with connection.connect(dsn) as conn:
            connection.check_schema(conn)
            result = maintain.run_pass(conn)
        if as_json:
            common.print_json(dataclasses.asdict(result))
        else:
            common.say(f"reclaimed {result.reclaimed} expired lease(s); fired "
                       f"{result.schedules_fired} schedule tick(s); pruned {result.ops_pruned} "
                       f"op(s); forgot {result.workers_pruned} silent worker(s); emptied "
                       f"{result.ready_recycled} ready partition(s) and {result.expiry_recycled} "
                       f"lease expiry partition(s)"
                       + (f"; shrank pgqueue.job by {result.shrunk_bytes / 2**20:.1f} MB"
                          if result.shrunk_bytes else ""))
        return
    _logging(verbose)
    runner = maintain.Maintainer(dsn, interval=interval,
                                 connect_timeout=common.settings().connect_timeout)
    import signal

    signal.signal(signal.SIGTERM, lambda *_: runner.stop())
    try:
        runner.run()
    except KeyboardInterrupt:
        runner.stop()


maintain_cmd.name = "maintain"


#: A worker whose last heartbeat is older than this is shown stale: it missed three beats.
STALE_AFTER = 3 * HEARTBEAT_SECONDS


def is_stale(row: pgqueue.WorkerInfo, stale_after: float) -> bool:
    """The worker has not heartbeat for longer than `stale_after` seconds (the database's
    clock measures the age, as it stamps the heartbeats)."""
    return row.heartbeat_age_seconds > stale_after


@click.command()
@click.option("--stale-after", type=click.FloatRange(min=0), default=STALE_AFTER,
              show_default=True, metavar="SECONDS",
              help="Mark a worker stale when its last heartbeat is older than this (workers "
                   f"heartbeat every {HEARTBEAT_SECONDS:g}s; a stale one was probably killed "
                   "and maintenance forgets it later).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def workers(stale_after: float, as_json: bool) -> None:
    """Registered worker processes, their heartbeat and the leases each holds."""
    with common.open_queue() as q:
        rows = q.workers()
    if as_json:
        common.print_json([{**r, "started_at": common.iso(r.started_at),
                            "heartbeat_at": common.iso(r.heartbeat_at),
                            "stale": is_stale(r, stale_after)} for r in rows])
        return
    common.console().print(common.table(
        "workers", ["id", "node", "host", "pid", "streams", "concurrency", "leases", "heartbeat",
                    "age", "stale"],
        [[r.id, r.node, r.host, r.pid, ",".join(r.streams), r.concurrency, r.leases,
          common.ago(r.heartbeat_at), common.age(r.heartbeat_age_seconds),
          "stale" if is_stale(r, stale_after) else ""] for r in rows],
        right=["id", "node", "pid", "concurrency", "leases", "age"]))
