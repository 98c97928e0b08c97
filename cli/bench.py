"""`pgqueue bench`: the in-repo throughput benchmark against any database, with a progress bar.

It works on its own stream ("pgqueue-bench") and drains every job it enqueues.
"""
from __future__ import annotations

import click
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from pgqueue.client import benchmark
from pgqueue.db import connection

from .common import console, dsn, print_json, table


@click.command()
@click.option("--jobs", type=click.IntRange(min=500), default=20_000, show_default=True,
              help="Jobs for the batched phases.")
@click.option("--single", type=click.IntRange(min=1), default=2_000, show_default=True,
              help="Jobs enqueued one per call.")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
def bench(jobs: int, single: int, as_json: bool) -> None:
    """Measure enqueue (one at a time, batched) and lease+ack (batches of 1 and 100)."""
    target = dsn()
    tasks: dict[str, TaskID] = {}
    with Progress(TextColumn("{task.description:<28}"), BarColumn(), TextColumn("{task.completed:>7,}"),
                  TimeElapsedColumn(), console=console(), transient=True,
                  disable=as_json) as bar:
        def progress(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = bar.add_task(phase, total=total)
            bar.update(tasks[phase], completed=done)

        figures = benchmark.run(target, jobs=jobs, single=single, progress=progress)
    if as_json:
        print_json({"server": connection.describe(target),
                    "figures": [{"name": f.name, "value": round(f.value, 1), "unit": f.unit}
                                for f in figures]})
        return
    console().print(table(
        f"pgqueue bench on {connection.describe(target)} (Postgres {benchmark.server_version(target)})",
        ["measure", "rate", "unit"], [[f.name, f"{f.value:,.0f}", f.unit] for f in figures],
        right=["rate"]))
