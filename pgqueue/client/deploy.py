# DO NOT EDIT: generated from pgqueue/client/deploy_async.py by tools/generate.py; edit that file.
"""Before a deploy: which jobs already in the database the new code would park as undecodable.

`check` reads every job new code may run (pending, scheduled, leased, quarantined; never a
payload), grouped by what the compatibility rule reads, and asks the app's own verdict
(pgqueue.App.verdict: the rule the worker applies when it leases a job, in
pgqueue/runtime/compat.py), so deploy-check and the worker cannot disagree. The client takes
the app as an argument and never imports the worker runtime.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pgqueue import validate
from pgqueue.db import run
from pgqueue.models import Checkpoint, Verdict


class CompatRule(Protocol):
    """What deploy-check needs of the new code: its handlers by kind, and the worker's verdict
    on a job (a pgqueue.App)."""

    @property
    def handlers(self) -> Mapping[str, Any]:
        """The kinds the code runs (its handlers by kind)."""

    def verdict(self, kind: str | None, cp: Checkpoint,
                step_list: Callable[[str], list[dict[str, Any]] | None]) -> Verdict | None:
        """None: a worker running this code would run the job; else why it would park it."""


@dataclass(frozen=True)
class Parked:
    """A job the new code would park as undecodable, with the worker's reason and detail."""

    job_id: int
    stream: str
    kind: str | None
    state: str
    reason: str
    detail: dict[str, Any]


def check(conn: run.Conn, app: CompatRule, *,
          streams: Sequence[str] | None = None) -> list[Parked]:
    """The jobs (of `streams`, or every stream) a worker running `app` would park, by id."""
    if not callable(getattr(app, "verdict", None)) or isinstance(app, type):
        raise TypeError(f"app must be a pgqueue.App, got {type(app).__name__}")
    wanted = None
    if streams is not None:
        if isinstance(streams, str):
            streams = [streams]
        wanted = [validate.stream(s, "streams") for s in streams]
    groups = run.fetch(conn, "deploy_check_groups", {"streams": wanted})
    hashes = sorted({g["step_set_hash"] for g in groups if g["step_set_hash"] is not None})
    recorded = {r["hash"]: list(r["steps"]) for r in run.fetch(
        conn, "step_sets_by_hash", {"hashes": hashes})} if hashes else {}
    parked: list[Parked] = []
    for g in groups:
        cp = Checkpoint(last_completed_step=g["last_completed_step"], cursor_step=g["cursor_step"],
                        schema_version=g["schema_version"], step_set_hash=g["step_set_hash"])
        found = app.verdict(g["kind"], cp, recorded.get)
        if found is None:
            continue
        parked += [Parked(int(job_id), g["stream"], g["kind"], state, found.reason, found.detail)
                   for job_id, state in zip(g["job_ids"], g["states"], strict=True)]
    return sorted(parked, key=lambda p: p.job_id)


def served_streams(conn: run.Conn, app: CompatRule) -> list[str]:
    """The streams holding jobs in flight of a kind `app` handles: where its workers run (the
    default of `pgqueue deploy-check`), so another app's streams are not reported."""
    kinds = sorted(app.handlers)
    if not kinds:
        return []
    return [r["stream"] for r in run.fetch(conn, "deploy_streams", {"kinds": kinds})]
