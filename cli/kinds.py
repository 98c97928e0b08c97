"""`pgqueue kinds list|set`: a kind's settings per stream — its crash quarantine threshold and
the limits the lease enforces across every worker (max concurrency, rate, per key)."""
from __future__ import annotations

from typing import Any

import click

import pgqueue
from pgqueue import jsonview
from pgqueue.models import UNSET, Unset

from .common import console, open_queue, print_json, say, table


@click.group()
def kinds() -> None:
    """Kind settings: quarantine threshold and limits, per stream."""


def _rate(k: pgqueue.KindConfig) -> str:
    return "" if k.rate_limit is None else f"{k.rate_limit[0]}/{k.rate_limit[1]:g}s"


@kinds.command("list")
@click.option("--stream", default=None, help="Only this stream (default: every stream).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def list_(stream: str | None, as_json: bool) -> None:
    """The kinds that have settings."""
    with open_queue(stream or "default") as q:
        found = q.kinds(all_streams=stream is None)
    if as_json:
        print_json([jsonview.kind_json(k) for k in found])
        return
    if not found:
        say("no kind has settings")
        return
    console().print(table("kinds", ["stream", "kind", "quarantine after", "max concurrency",
                                    "rate limit", "max per key"], [
        (k.stream, k.kind, k.quarantine_after or "", k.max_concurrency or "", _rate(k),
         k.max_per_key or "") for k in found],
        right=["quarantine after", "max concurrency", "max per key"]))


def _limit(value: str | None, option: str) -> int | Unset | None:
    """An option's value: absent (left as is), "none" (cleared) or a whole number >= 1."""
    if value is None:
        return UNSET
    if value.lower() == "none":
        return None
    if not value.isdigit() or int(value) < 1:
        raise click.BadParameter(f"must be a whole number >= 1 or none, got {value!r}",
                                 param_hint=option)
    return int(value)


def _rate_limit(value: str | None) -> tuple[int, float] | Unset | None:
    if value is None:
        return UNSET
    if value.lower() == "none":
        return None
    count, slash, seconds = value.partition("/")
    try:
        parsed = (int(count), float(seconds.rstrip("s")))
    except ValueError:
        parsed = None
    if not slash or parsed is None or parsed[0] < 1 or not parsed[1] > 0:
        raise click.BadParameter(f"must be COUNT/SECONDS (e.g. 10/1: ten a second) with a "
                                 f"count >= 1 and seconds > 0, or none; got {value!r}",
                                 param_hint="--rate-limit")
    return parsed


@kinds.command("set")
@click.argument("kind")
@click.option("--stream", default="default", show_default=True)
@click.option("--max-concurrency", metavar="N", default=None,
              help="At most N jobs of the kind leased at once, across every worker (none: no limit).")
@click.option("--rate-limit", metavar="COUNT/SECONDS", default=None,
              help="At most COUNT leases of the kind starting in any window of SECONDS (none: no limit).")
@click.option("--max-per-key", metavar="M", default=None,
              help="At most M leased jobs sharing one concurrency key (none: no limit).")
@click.option("--quarantine-after", metavar="N", default=None,
              help="Crashes of one step before the job is quarantined (none: the stream's).")
@click.option("--clear", is_flag=True,
              help="Clear every limit not given here (the quarantine threshold stays).")
def set_(kind: str, stream: str, max_concurrency: str | None, rate_limit: str | None,
         max_per_key: str | None, quarantine_after: str | None, clear: bool) -> None:
    """Set a kind's limits in a stream; options not given are left as they are. Each change is
    an op in the op log (replicas follow)."""
    settings: dict[str, Any] = {
        "max_concurrency": _limit(max_concurrency, "--max-concurrency"),
        "rate_limit": _rate_limit(rate_limit),
        "max_per_key": _limit(max_per_key, "--max-per-key"),
        "quarantine_after": _limit(quarantine_after, "--quarantine-after")}
    if clear:
        for name in ("max_concurrency", "rate_limit", "max_per_key"):
            if settings[name] is UNSET:
                settings[name] = None
    if all(v is UNSET for v in settings.values()):
        raise click.UsageError("nothing to set: give --max-concurrency, --rate-limit, "
                               "--max-per-key, --quarantine-after or --clear")
    with open_queue(stream) as q:
        q.configure_kind(kind, **settings)
        now = [k for k in q.kinds() if k.kind == kind]
    if not now:
        say(f"{stream}/{kind}: no settings (the stream's defaults, no limits)")
        return
    k = now[0]
    say(f"{stream}/{kind}: max concurrency {k.max_concurrency or 'none'}, rate limit "
        f"{_rate(k) or 'none'}, max per key {k.max_per_key or 'none'}, quarantine after "
        f"{k.quarantine_after or 'the stream default'}")
