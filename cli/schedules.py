"""`pgqueue schedules`: cron schedules kept in Postgres, fired exactly once per tick.

Ticks fire in maintenance passes (inside workers, or `pgqueue maintain`); these commands only
change and show schedules. Times are shown in each schedule's own zone.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

import pgqueue
from pgqueue.client import schedule as schedule_mod
from pgqueue.jsonview import schedule_json

from .common import (
    EXIT_FAILED,
    console,
    fail,
    kv_table,
    open_queue,
    print_json,
    say,
    table,
)
from .queue_cmds import read_payload

STREAM = click.option("--stream", default="default", show_default=True,
                      help="The stream the schedule belongs to.")
JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


def _local(s: pgqueue.Schedule, value: Any) -> str:
    if value is None:
        return ""
    return str(value.astimezone(schedule_mod.check_timezone(s.timezone)).isoformat())


def _show(s: pgqueue.Schedule, as_json: bool) -> None:
    if as_json:
        print_json(schedule_json(s))
        return
    fields = schedule_json(s)
    fields.pop("payload_encoding")
    fields["next_run_at"] = _local(s, s.next_run_at)
    fields["last_fired_at"] = _local(s, s.last_fired_at)
    console().print(kv_table(f"schedule {s.stream}/{s.name}", fields))


def _elsewhere(q: pgqueue.Queue, name: str, message: str) -> str:
    """`message` (NAME is not in q's stream), naming the streams where NAME does exist."""
    others = [s for s in q.schedule_streams(name) if s != q.stream]
    if others:
        message += f"; {name} exists in stream(s) {', '.join(others)}: pass --stream"
    return message


@contextmanager
def _missing_named(q: pgqueue.Queue, name: str) -> Iterator[None]:
    """A change refused because NAME is not in q's stream says where NAME is (exit 1)."""
    try:
        yield
    except pgqueue.JobNotFound as exc:
        fail(_elsewhere(q, name, str(exc)), EXIT_FAILED)


def _get(q: pgqueue.Queue, name: str) -> pgqueue.Schedule:
    found = q.schedule(name)
    if found is None:
        fail(_elsewhere(q, name, f"no schedule {name!r} in stream {q.stream!r}"), EXIT_FAILED)
    return found


@click.group()
def schedules() -> None:
    """Add, list, show, pause, resume and remove cron schedules."""


@schedules.command()
@click.argument("name")
@click.argument("cron")
@STREAM
@click.option("--payload", default=None,
              help="The payload of each tick's job [default: {}, an empty JSON object, so a "
                   "handler may call job.json()].")
@click.option("--json-payload", is_flag=True, help="Parse --payload as JSON.")
@click.option("--kind", default=None, help="The kind of each tick's job.")
@click.option("--timezone", default="UTC", show_default=True, help="IANA zone the cron runs in.")
@click.option("--priority", type=int, default=0, show_default=True)
@click.option("--max-attempts", type=int, default=25, show_default=True)
@click.option("--catch-up", type=click.Choice(schedule_mod.CATCH_UP), default="one",
              show_default=True, help="After downtime: skip missed ticks, fire one, or all.")
@click.option("--misfire-grace", type=float, default=60.0, show_default=True, metavar="SECONDS",
              help="A tick reached later than this is missed.")
@click.option("--paused", is_flag=True, help="Create it paused.")
@click.option("--replace", is_flag=True,
              help="Replace schedule NAME if it exists (with every option as given here: what "
                   "is not given takes its default); without it an existing NAME is refused.")
@JSON
def add(name: str, cron: str, stream: str, payload: str | None, json_payload: bool,
        kind: str | None, timezone: str, priority: int, max_attempts: int, catch_up: str,
        misfire_grace: float, paused: bool, replace: bool, as_json: bool) -> None:
    """Create schedule NAME firing on CRON (5 fields, or 6 with seconds last); --replace to
    change one that exists."""
    value = b"{}" if payload is None else read_payload(payload, json_payload)
    with open_queue(stream) as q:
        old = None if replace else q.schedule(name)
        if old is not None:
            fail(f"schedule {name!r} exists in stream {stream!r} (cron {old.cron!r}, kind "
                 f"{old.kind!r}, timezone {old.timezone}); nothing was changed: add --replace "
                 f"to replace it", EXIT_FAILED)
        s = q.upsert_schedule(name, cron, value, kind=kind,
                              timezone=timezone, priority=priority, max_attempts=max_attempts,
                              catch_up=catch_up, misfire_grace=misfire_grace, paused=paused)
    _show(s, as_json)


@schedules.command("list")
@click.option("--stream", default=None, help="Only this stream's schedules [default: every "
                                             "stream's].")
@JSON
def list_(stream: str | None, as_json: bool) -> None:
    """The schedules of every stream (or of --stream), with their streams."""
    with open_queue(stream or "default") as q:
        found = q.schedules(all_streams=stream is None)
    if as_json:
        print_json([schedule_json(s) for s in found])
        return
    if not found:
        say("no schedules" + ("" if stream is None else f" in stream {stream!r}"))
        return
    console().print(table("schedules" if stream is None else f"schedules of {stream}", [
        "stream", "name", "cron", "timezone", "kind", "catch_up", "paused", "next run",
        "last fired"], [
        [s.stream, s.name, s.cron, s.timezone, s.kind, s.catch_up, "yes" if s.paused else "",
         _local(s, s.next_run_at), _local(s, s.last_fired_at)] for s in found]))


@schedules.command()
@click.argument("name")
@STREAM
@JSON
def show(name: str, stream: str, as_json: bool) -> None:
    """One schedule (exit 1 when there is none)."""
    with open_queue(stream) as q:
        _show(_get(q, name), as_json)


@schedules.command()
@click.argument("name")
@STREAM
def pause(name: str, stream: str) -> None:
    """Stop firing NAME."""
    with open_queue(stream) as q, _missing_named(q, name):
        q.pause_schedule(name)
    say(f"paused {stream}/{name}")


@schedules.command()
@click.argument("name")
@STREAM
def resume(name: str, stream: str) -> None:
    """Fire NAME again from its next tick after now."""
    with open_queue(stream) as q, _missing_named(q, name):
        s = q.resume_schedule(name)
    say(f"resumed {stream}/{name}; next run {_local(s, s.next_run_at)}")


@schedules.command()
@click.argument("name")
@STREAM
def remove(name: str, stream: str) -> None:
    """Delete NAME (exit 1 when the stream has none; the message names the streams that do)."""
    with open_queue(stream) as q, _missing_named(q, name):
        q.remove_schedule(name)
    say(f"removed {stream}/{name}")


@schedules.command("next")
@click.argument("name")
@STREAM
@click.option("-n", "count", type=click.IntRange(min=1, max=1000), default=5, show_default=True)
@JSON
def next_(name: str, stream: str, count: int, as_json: bool) -> None:
    """The next fire times of NAME, in its time zone."""
    with open_queue(stream) as q:
        s = _get(q, name)
    times = schedule_mod.upcoming(s, count)
    if as_json:
        print_json([t.isoformat() for t in times])
        return
    for t in times:
        say(t.isoformat())
