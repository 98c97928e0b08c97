"""`pgqueue oplog`: read the op log (tail, counts) and replay one database's log into another.

The op log is the queue's history and its replication stream; replay uses the library's one
apply function, so a replayed database holds exactly the source's state.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

import pgqueue
from pgqueue.client import oplog as pg_oplog
from pgqueue.db import connection
from pgqueue.jsonview import op_json
from pgqueue.models import OpPreview

from .common import (
    PREVIEW_BYTES,
    ago,
    console,
    err_console,
    open_queue,
    print_json,
    say,
    table,
)


@click.group()
def oplog() -> None:
    """Read and replay the op log."""


def _body(body: dict[str, Any], width: int = 60) -> str:
    text = json.dumps(body, separators=(",", ":"), ensure_ascii=False, default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


def ops_table(title: str, ops: Sequence[pgqueue.Op], *, with_stream: bool = True) -> Table:
    """Ops for people, in the order given: seq, when, (stream,) op, job, lease, body excerpt."""
    columns = ["seq", "at (UTC)", *(["stream"] if with_stream else []), "op", "job", "lease",
               "body"]
    return table(title, columns, [
        (op.seq, ago(op.at), *([op.stream] if with_stream else []), op.op, op.job_id,
         op.lease_id, _body(op.body)) for op in ops],
        right=["seq", "job", "lease"], nowrap=["seq", "at (UTC)", "op", "job", "lease"])


@oplog.command()
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True,
              help="The newest N ops.")
@click.option("--stream", default=None, help="Only this stream (default: every stream).")
@click.option("--job", "job_id", type=int, default=None, metavar="ID",
              help="Only ops about this job: its history, even after it was acked.")
@click.option("--full", is_flag=True,
              help=f"Whole payloads in bodies (default: their first {PREVIEW_BYTES:,} bytes; "
                   "JSON says payload_size and payload_truncated).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def tail(limit: int, stream: str | None, job_id: int | None, full: bool, as_json: bool) -> None:
    """The newest ops, oldest of them first (like tail), in JSON too."""
    found: Sequence[pgqueue.Op | OpPreview]
    with open_queue("default" if stream is None else stream) as q:
        if full:
            found = q.op_log(limit=limit, job_id=job_id, all_streams=stream is None)
        else:
            found = q.op_log_preview(limit=limit, job_id=job_id, all_streams=stream is None,
                                     preview_bytes=PREVIEW_BYTES)
    ops: list[pgqueue.Op | OpPreview] = list(reversed(found))
    if as_json:
        print_json([op_json(op) for op in ops])
        return
    if not ops:
        say("no ops")
        return
    plain: list[pgqueue.Op] = [o.op if isinstance(o, OpPreview) else o for o in ops]
    console().print(ops_table(f"op log (last {len(ops)})", plain))


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
    say(f"read {result.read} ops from {connection.describe(source)}, applied "
               f"{result.applied} to {connection.describe(target)} (last seq {result.last_seq})")


@oplog.command()
@click.argument("keep", required=False, type=click.FloatRange(min=1), metavar="[SECONDS]")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def retention(keep: float | None, as_json: bool) -> None:
    """Show how long the op log keeps ops, or set it to SECONDS (at least 1).

    The maintenance passes remove history by truncating whole partitions of the log's ring of
    32, once every op in one is older than this, committed, and applied by every replica;
    nothing is deleted row by row. Setting it is an operator's.
    """
    with open_queue() as q, q.connection() as conn:
        if keep is not None:
            pg_oplog.set_retention(conn, keep)
        found = pg_oplog.retention(conn)
    if as_json:
        print_json({"seconds": found.seconds, "partitions": found.partitions,
                    "oldest_closed_at": found.oldest_closed_at})
        return
    oldest = ("" if found.oldest_closed_at is None
              else f"; the oldest was left at {ago(found.oldest_closed_at)} UTC")
    say(f"op log retention: {found.seconds:g} s ({found.seconds / 3600:.4g} h); "
        f"{found.partitions} of 32 partitions in use{oldest}")


@oplog.command()
@click.option("--keep", type=click.FloatRange(min=0), default=7 * 86400.0, show_default=True,
              metavar="SECONDS", help="Keep ops younger than this (they are the jobs' history).")
@click.option("--stale-after", type=click.FloatRange(min=0), default=86400.0, show_default=True,
              metavar="SECONDS", help="A replica silent this long is reported, not waited on.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def prune(keep: float, stale_after: float, as_json: bool) -> None:
    """Delete old ops that every attached replica has confirmed, in batches."""
    from pgqueue.replicas import replica

    from .common import dsn

    n = replica.prune(dsn(), keep=keep, stale_after=stale_after)
    stale = [r["name"] for r in replica.status(dsn(), stale_after=stale_after) if r["stale"]]
    if as_json:
        print_json({"pruned": n, "stale_replicas": stale})
        return
    say(f"pruned {n} op(s)")
    for name in stale:
        say(f"replica {name} has been silent longer than {stale_after:.0f}s: not waited on",
            err=True)
