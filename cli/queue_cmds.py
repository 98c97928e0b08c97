"""`pgqueue enqueue` and `pgqueue stats`: put one job on a stream, and count jobs by state.

The library checks every argument (priority range, negative delay, dedup key size) before it
sends anything, so a refused enqueue adds nothing; the CLI only parses text into values.
"""
from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

import click
from rich.table import Table

import pgqueue

from .common import (
    EXIT_FAILED,
    EXIT_USAGE,
    age,
    console,
    fail,
    open_queue,
    print_json,
    say,
    table,
)


def read_payload(payload: str, json_payload: bool) -> Any:
    """PAYLOAD as the library takes it: str, bytes from stdin for "-", or parsed JSON."""
    raw: str | bytes = sys.stdin.buffer.read() if payload == "-" else payload
    if not json_payload:
        return raw
    try:
        return json.loads(raw)
    except ValueError as exc:
        fail(f"payload: --json-payload given but PAYLOAD is not JSON: {exc}", EXIT_USAGE)


@click.command()
@click.argument("stream")
@click.argument("payload")
@click.option("--kind", default=None, help="Job kind (which handler runs it).")
@click.option("--priority", type=int, default=0, show_default=True,
              help="0 to 255, higher first.")
@click.option("--delay", type=float, default=None, metavar="SECONDS",
              help="Do not lease before this many seconds from now.")
@click.option("--dedup-key", default=None,
              help="While a live job of the stream holds this key, print its id instead.")
@click.option("--max-attempts", type=int, default=None,
              help="Failures before the job goes to the dead letters (0 = unlimited) "
                   "[default: the handler's max_attempts, else 25].")
@click.option("--concurrency-key", default=None, metavar="KEY",
              help="What the kind's max-per-key limit counts (a tenant id, say).")
@click.option("--timeout", type=float, default=None, metavar="SECONDS",
              help="The job's own time limit per run [default: its handler's timeout].")
@click.option("--json-payload", is_flag=True,
              help="Parse PAYLOAD as JSON (it is stored as compact JSON text).")
def enqueue(stream: str, payload: str, kind: str | None, priority: int, delay: float | None,
            dedup_key: str | None, max_attempts: int | None, concurrency_key: str | None,
            timeout: float | None, json_payload: bool) -> None:
    """Enqueue PAYLOAD on STREAM and print the job id (only the integer, on stdout).

    PAYLOAD is stored as UTF-8 text; "-" reads the payload from stdin as raw bytes. With a
    dedup key held by a live job, the id printed is that job's and nothing is added.
    """
    value = read_payload(payload, json_payload)
    with open_queue(stream) as q:
        job_id = q.enqueue(value, kind=kind, priority=priority, delay=delay,
                           dedup_key=dedup_key, max_attempts=max_attempts,
                           concurrency_key=concurrency_key, timeout=timeout)
    say(job_id)


@click.command()
@click.option("--stream", default=None, help="Only this stream (default: every stream); one "
                                             "the database does not know is said so.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def stats(stream: str | None, as_json: bool) -> None:
    """Jobs by stream and state, with the age of the oldest pending job.

    The age counts from when the job became leasable (its not_before), so a job delayed on
    purpose does not look late.
    """
    with open_queue(stream or "default") as q:
        rows = [r for r in q.stats() if stream is None or r.stream == stream]
        unknown = q.unknown_stream() if stream is not None and not rows else None
    if unknown is not None:
        fail(unknown, EXIT_FAILED)
    if as_json:
        print_json(stats_json(rows))
        return
    if not rows:
        say("no jobs")
        return
    console().print(stats_table(rows))


def stats_json(rows: Sequence[pgqueue.StreamStats]) -> list[dict[str, Any]]:
    """Stats rows as JSON."""
    return [{"stream": r.stream, "state": r.state, "count": r.count,
             "oldest_pending_age_seconds": r.oldest_age_seconds} for r in rows]


def stats_table(rows: Sequence[pgqueue.StreamStats]) -> Table:
    """Stats rows as a table for people."""
    return table(
        "jobs by stream and state",
        ["stream", "state", "jobs", "oldest pending"],
        [(r.stream, r.state, r.count, age(r.oldest_age_seconds)) for r in rows],
        right=["jobs", "oldest pending"],
    )
