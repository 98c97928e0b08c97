"""`pgqueue deploy-check`: before a deploy, the jobs in flight the new code would park.

It imports the new code's App (as `pgqueue worker --app` does) and asks the library, which
applies the worker's own compatibility rule (pgqueue/runtime/compat.py) to every job the new code may
run: the jobs listed are exactly those a worker on that code would park as undecodable.
"""
from __future__ import annotations

from typing import Any

import click

from .common import EXIT_FAILED, console, open_queue, print_json, say, table
from .worker import load_app


@click.command("deploy-check")
@click.option("--app", "app_spec", required=True, metavar="MODULE:ATTR",
              help="The new code's pgqueue.App.")
@click.option("--stream", "streams", multiple=True,
              help="Only jobs of this stream (repeat for several; default: the streams holding "
                   "jobs of a kind the app handles, where its workers run).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def deploy_check(app_spec: str, streams: tuple[str, ...], as_json: bool) -> None:
    """List the jobs the new code would park as undecodable (unknown kind, no upcaster chain,
    a changed step list); exit 0 when none, 1 when some."""
    app = load_app(app_spec)
    with open_queue() as q:
        checked = list(streams) or q.deploy_streams(app)
        parked = q.deploy_check(app, streams=checked) if checked else []
    if as_json:
        jobs: list[dict[str, Any]] = [
            {"job_id": p.job_id, "stream": p.stream, "kind": p.kind, "state": p.state,
             "reason": p.reason, "detail": p.detail} for p in parked]
        print_json({"streams": checked, "jobs": jobs})
        if parked:
            click.get_current_context().exit(EXIT_FAILED)
        return
    say(f"checked the streams {', '.join(checked)}" if checked else
        "checked no stream: no job in flight is of a kind the app handles (--stream names one)")
    if not parked:
        say("no job would be parked: the new code can run every job in flight")
    else:
        console().print(table(
            f"{len(parked)} job(s) the new code would park as undecodable",
            ["job", "stream", "kind", "state", "reason", "why"],
            [(p.job_id, p.stream, p.kind, p.state, p.reason, p.detail.get("message", ""))
             for p in parked], right=["job"], nowrap=["job", "state", "reason"]))
    if parked:
        click.get_current_context().exit(EXIT_FAILED)
