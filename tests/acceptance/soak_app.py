"""The App the chaos soak (bench/soak/soak.py) runs in its worker processes.

Every handler appends what it did to a JSON-lines ledger file of its own process, in the
directory $PGQUEUE_SOAK_LEDGER (one `write` per line on an O_APPEND descriptor, so a line that
was written survives a SIGKILL of the process a moment later). The ledger is the handlers'
own record, kept apart from the queue database the soak is testing:

    {"ev": "run",   "job": 7, "lease": 31, "kind": "plain", "attempts": 0, "pid": 123}
    {"ev": "fail",  ...}                       # the handler is about to raise (a retry)
    {"ev": "done",  ...}                       # the handler's work is complete
    {"ev": "step_start", "step": "b", "cursor": "3", ...}   # cursor: as the step saw it
    {"ev": "item", "step": "b", "item": 4, ...}             # one unit of step b's work
    {"ev": "step_done", "step": "c", ...}
    {"ev": "lost", "step": "b", ...}           # ctx.advance raised LeaseLost

Kinds (behaviour from the JSON payload):
- "plain": {"tag": ..., "fail": F, "sleep": S}: raises while `attempts < F` (so it is
  retried, or dead-lettered when max_attempts runs out first), else sleeps S seconds;
- "steps": {"tag": ..., "items": N, "sleep": S}: three steps, "a" and "c" simple, "b" works
  through items 0..N-1 with the cursor (`ctx.advance(i)` after item i), S seconds per item;
- "tick": the job a cron schedule fires; records one run and returns.
"""
from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

import pgqueue

LEDGER_ENV = "PGQUEUE_SOAK_LEDGER"
STEPS = ("a", "b", "c")

_fd_lock = threading.Lock()
_fd: int | None = None


def _ledger_fd() -> int:
    global _fd
    with _fd_lock:
        if _fd is None:
            path = os.path.join(os.environ[LEDGER_ENV], f"worker-{os.getpid()}.jsonl")
            _fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        return _fd


def record(ev: str, ctx: pgqueue.JobContext, **fields: Any) -> None:
    """Append one ledger line about the job `ctx` runs (its lease id included)."""
    line = {"ev": ev, "job": ctx.job_id, "lease": ctx.lease.lease_id, "kind": ctx.kind,
            "attempts": ctx.attempts, "pid": os.getpid(), "t": round(time.time(), 3), **fields}
    os.write(_ledger_fd(), (json.dumps(line, separators=(",", ":")) + "\n").encode())


app = pgqueue.App()


class Failure(Exception):
    """A handler failing on purpose (the job is nacked and retried)."""


@app.job("plain")
def plain(ctx: pgqueue.JobContext) -> None:
    p = ctx.json()
    record("run", ctx)
    if ctx.attempts < int(p.get("fail", 0)):
        record("fail", ctx)
        raise Failure(f"failing on purpose (attempt {ctx.attempts + 1} of {p.get('fail')})")
    time.sleep(float(p.get("sleep", 0)))
    record("done", ctx)


@app.job("tick")
def tick(ctx: pgqueue.JobContext) -> None:
    record("run", ctx)
    record("done", ctx)


steps = app.step_job("steps")


@steps.step("a")
def step_a(ctx: pgqueue.StepContext) -> None:
    record("step_start", ctx, step="a", cursor=None)
    time.sleep(float(ctx.json().get("sleep", 0)))
    record("step_done", ctx, step="a")


@steps.step("b")
def step_b(ctx: pgqueue.StepContext) -> None:
    p = ctx.json()
    cursor = None if ctx.cursor is None else ctx.cursor.decode()
    record("step_start", ctx, step="b", cursor=cursor)
    start = 0 if cursor is None else int(cursor) + 1
    for i in range(start, int(p.get("items", 5))):
        time.sleep(float(p.get("sleep", 0)))
        record("item", ctx, step="b", item=i)
        try:
            ctx.advance(i)
        except pgqueue.LeaseLost:
            record("lost", ctx, step="b", item=i)
            raise
    record("step_done", ctx, step="b")


@steps.step("c")
def step_c(ctx: pgqueue.StepContext) -> None:
    record("step_start", ctx, step="c", cursor=None)
    time.sleep(float(ctx.json().get("sleep", 0)))
    record("step_done", ctx, step="c")
