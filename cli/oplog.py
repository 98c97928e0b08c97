"""`pgqueue oplog`: read the op log (tail, counts) and replay one database's log into another.

The op log is the queue's history and its replication stream; replay uses the library's one
apply function, so a replayed database holds exactly the source's state.
"""
from __future__ import annotations

import json
from typing import Any

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

import pgqueue
from pgqueue import connection
from pgqueue import oplog as pg_oplog

from .common import ago, console, err_console, open_queue, print_json, table


@click.group()
def oplog() -> None:
    """Read and replay the op log."""


def op_json(op: pgqueue.Op) -> dict[str, Any]:
    """One op as JSON (its body is already JSON)."""
    return {"seq": op.seq, "stream": op.stream, "op": op.op, "job_id": op.job_id,
            "lease_id": op.lease_id, "xid": op.xid, "at": op.at.isoformat(), "body": op.body}


def _body(body: dict[str, Any], width: int = 60) -> str:
    text = json.dumps(body, separators=(",", ":"), default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


@oplog.command()
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True,
              help="The newest N ops.")
@click.option("--stream", default=None, help="Only this stream (default: every stream).")
@click.option("--job", "job_id", type=int, default=None, metavar="ID",
              help="Only ops about this job: its history, even after it was acked.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def tail(limit: int, stream: str | None, job_id: int | None, as_json: bool) -> None:
    """The newest ops, oldest of them first (like tail), in JSON too."""
    with open_queue("default" if stream is None else stream) as q:
        ops = list(reversed(q.op_log(limit=limit, job_id=job_id, all_streams=stream is None)))
    if as_json:
        print_json([op_json(op) for op in ops])
        return
    if not ops:
        click.echo("no ops")
        return
    console().print(table(
        f"op log (last {len(ops)})",
        ["seq", "at (UTC)", "stream", "op", "job", "lease", "body"],
        [(op.seq, ago(op.at), op.stream, op.op, op.job_id, op.lease_id, _body(op.body))
         for op in ops],
        right=["seq", "job", "lease"],
        nowrap=["seq", "at (UTC)", "op", "job", "lease"],
    ))


def op_counts(q: pgqueue.Queue) -> dict[str, int]:
    """Ops in the queue's database by kind."""
    with q.connection() as conn:
        return pg_oplog.counts(conn)


def counts_table(counts: dict[str, int]) -> Table:
    """Op counts as a table for people, with a total."""
    rows: list[tuple[str, int | str]] = [(name, n) for name, n in sorted(counts.items())]
    rows.append(("total", sum(counts.values())))
    return table("op log by op", ["op", "count"], rows, right=["count"])


@oplog.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def counts(as_json: bool) -> None:
    """How many ops of each kind the log holds."""
    with open_queue() as q:
        found = op_counts(q)
    if as_json:
        print_json(found)
        return
    console().print(counts_table(found))


@oplog.command()
@click.option("--source", required=True, metavar="DSN", help="The database to read the log of.")
@click.option("--target", required=True, metavar="DSN",
              help="A migrated database to apply it to (ops it already holds are skipped).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def replay(source: str, target: str, as_json: bool) -> None:
    """Apply SOURCE's whole committed op log, in commit order, to TARGET.

    Idempotent: replaying again applies nothing new. Afterwards TARGET's id sequences are
    past every replayed id.
    """
    with open_queue(database=source) as q:  # checks reachability and schema, sizes the bar
        total = sum(op_counts(q).values())
    progress = Progress(
        TextColumn("replaying op log"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=err_console(), transient=True,
    )
    with progress:
        task = progress.add_task("replay", total=total or None)
        result = pgqueue.replay(source, target,
                                progress=lambda n: progress.advance(task, n))
    if as_json:
        print_json({"source": connection.describe(source), "target": connection.describe(target),
                    "read": result.read, "applied": result.applied,
                    "last_seq": result.last_seq})
        return
    click.echo(f"read {result.read} ops from {connection.describe(source)}, applied "
               f"{result.applied} to {connection.describe(target)} (last seq {result.last_seq})")


@oplog.command()
@click.option("--keep", type=click.FloatRange(min=0), default=7 * 86400.0, show_default=True,
              metavar="SECONDS", help="Keep ops younger than this (they are the jobs' history).")
@click.option("--stale-after", type=click.FloatRange(min=0), default=86400.0, show_default=True,
              metavar="SECONDS", help="A replica silent this long is reported, not waited on.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def prune(keep: float, stale_after: float, as_json: bool) -> None:
    """Delete old ops that every attached replica has confirmed, in batches."""
    from pgqueue import replica

    from .common import dsn

    n = replica.prune(dsn(), keep=keep, stale_after=stale_after)
    stale = [r["name"] for r in replica.status(dsn(), stale_after=stale_after) if r["stale"]]
    if as_json:
        print_json({"pruned": n, "stale_replicas": stale})
        return
    click.echo(f"pruned {n} op(s)")
    for name in stale:
        click.echo(f"replica {name} has been silent longer than {stale_after:.0f}s: not waited on",
                   err=True)
