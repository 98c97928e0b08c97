"""`pgqueue metrics serve`: the database's Prometheus gauges over HTTP, for a scraper.

Every scrape reads the database with a bounded number of cheap queries (pgqueue/telemetry/metrics.py,
Queue.gauges): jobs by stream and state, the oldest ready job's age, the op log, replicas'
lag, schedules and workers. It runs until SIGTERM or SIGINT. A worker serves its own counters
and histograms with `pgqueue worker --metrics-port`.
"""
from __future__ import annotations

import sys
import threading

import click

from pgqueue.runtime import signals
from pgqueue.telemetry.metrics import MetricsServer, database_registry

from .common import EXIT_UNAVAILABLE, dsn, fail, open_queue, say, shown_dsn


@click.group()
def metrics() -> None:
    """Prometheus metrics of the database."""


@metrics.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="The address to listen on (0.0.0.0: every interface).")
@click.option("--port", type=click.IntRange(min=0, max=65535), default=9464, show_default=True,
              help="The port to listen on (0: any free one, printed).")
def serve(host: str, port: int) -> None:
    """Serve /metrics for the database until SIGTERM or SIGINT."""
    stop = threading.Event()
    database = dsn()
    with open_queue():  # a wrong DSN or a missing schema fails here, not at every scrape
        pass
    try:
        server = MetricsServer(database_registry(database), host=host, port=port).start()
    except OSError as exc:
        fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}", EXIT_UNAVAILABLE)
    restore = signals.install(lambda _sig: stop.set())
    try:
        say(f"serving the metrics of {shown_dsn(database)} on "
            f"http://{server.host}:{server.port}/metrics")
        sys.stdout.flush()  # the address, for whoever started it
        stop.wait()
    finally:
        restore()
        server.stop()
