"""`pgqueue embedded start|status|stop`: the per-user embedded Postgres the CLI uses without a DSN.

That server outlives the commands that start it, so an operator needs to see what runs there
(which binaries, whether they are this install's) and to stop it, e.g. before deleting the
virtual environment whose binaries it runs. The library reads all of it without connecting.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import click

from pgqueue.db import embedded

from .common import EXIT_FAILED, console, fail, kv_table, print_json


def status_json(status: embedded.EmbeddedStatus) -> dict[str, Any]:
    """The status as JSON-ready fields (paths as strings)."""
    return {k: str(v) if isinstance(v, Path) else v
            for k, v in dataclasses.asdict(status).items()}


def _binaries(status: embedded.EmbeddedStatus) -> str:
    if not status.running:
        return "-"
    where = str(status.binaries) if status.binaries else "unknown"
    if status.binaries_deleted:
        where += " (deleted)"
    ours = {True: "this install's", False: "NOT this install's", None: "cannot tell"}
    return f"{where}: {ours[status.this_install]}"


@click.group("embedded")
def embedded_group() -> None:
    """The embedded Postgres used when no DSN is given ($PGQUEUE_DATA_DIR)."""


@embedded_group.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def status(as_json: bool) -> None:
    """Data directory, port, whether it runs, and from which binaries. Never starts it."""
    st = embedded.embedded_status()
    if as_json:
        print_json(status_json(st))
        return
    console().print(kv_table("embedded Postgres", {
        "data directory": st.data_dir,
        "initialised": "yes" if st.initialised else "no",
        "running": f"yes (pid {st.pid})" if st.running else "no",
        "port": st.port if st.port is not None else "-",
        "binaries": _binaries(st),
        "server version": st.server_version or "-",
        "data version": st.data_version or "-",
        "this install": f"{st.install_binaries} ({st.install_version or 'version unknown'})",
    }))


@embedded_group.command()
@click.option("--mode", type=click.Choice(list(embedded.STOP_SIGNALS)), default="fast",
              show_default=True, help="Shutdown mode, as pg_ctl's -m.")
def stop(mode: str) -> None:
    """Stop it, whichever binaries it runs from (the next command starts it again)."""
    try:
        before = embedded.stop_embedded(mode)
    except (OSError, RuntimeError) as exc:
        fail(str(exc), EXIT_FAILED)
    if before.running:
        click.echo(f"stopped the embedded Postgres in {before.data_dir} (pid {before.pid})")
    else:
        click.echo(f"the embedded Postgres in {before.data_dir} is not running")


@embedded_group.command()
@click.option("--port", type=click.IntRange(1, 65535), default=None, envvar=embedded.PORT_ENV,
              show_envvar=True,
              help="Listen on this port (kept from then on; a server on another port moves "
                   "to it) [default: the port it has, or any free one at first start].")
def start(port: int | None) -> None:
    """Start it unless it runs, and print the DSN of its pgqueue database (for psql, a GUI
    client, or PGQUEUE_DSN in another terminal)."""
    import os

    if port is not None:
        os.environ[embedded.PORT_ENV] = str(port)  # what default_dsn reads
    try:
        found = embedded.default_dsn(announce=False)
    except (OSError, RuntimeError, ValueError) as exc:
        fail(str(exc), EXIT_FAILED)
    click.echo(found)
