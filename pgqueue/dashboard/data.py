"""What the dashboard shows, as JSON: the HTTP API returns these documents and the pages
render the same ones, so a script and a person always see the same thing. Every figure
comes from an AsyncQueue call (the library); nothing here touches SQL."""
from __future__ import annotations

import asyncio
import base64
import binascii
import datetime as dt
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pgqueue import jsonview
from pgqueue.client.observe_async import STALE_WORKER_SECONDS
from pgqueue.client.queue_async import AsyncQueue
from pgqueue.dashboard.params import JobFilter, Page
from pgqueue.models import FINISHED_STATES, JOB_STATES, Checkpoint, KindConfig, Throughput

#: How much of a payload a page shows (the database cuts it; the size is shown beside it).
PREVIEW_BYTES = 2000
#: The overview's throughput is brought up to date at most this often.
THROUGHPUT_TTL = 10.0
#: The span of the overview's throughput.
THROUGHPUT_MINUTES = 60


COUNTS = ("enqueued", "acked", "failed", "cancelled")
#: What the overview's charts draw per minute.
SERIES = ("enqueued", "acked", "failed")


@dataclass
class Cache:
    """The last hour's throughput by stream and minute. Minutes that are over are kept; each
    refresh reads the op log again only from the minute before the database's current one
    (an op is stamped when its transaction began, so one that commits just after a minute
    ended still lands in that minute), and a first one reads the hour. One refresh runs at a
    time: the pages an event wakes together share it."""

    at: float = -1e9
    #: (stream, minute) -> that minute's counts
    minutes: dict[tuple[str, dt.datetime], Throughput] = field(default_factory=dict)
    #: the database's current minute at the last refresh
    now_minute: dt.datetime | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def throughput(self, q: AsyncQueue) -> dict[str, dict[str, int]]:
        """Per stream, the jobs enqueued, acked, failed and cancelled in the last hour."""
        async with self.lock:
            if time.monotonic() - self.at > THROUGHPUT_TTL:
                await self._refresh(q)
        totals: dict[str, dict[str, int]] = {}
        for (stream, _), t in self.minutes.items():
            total = totals.setdefault(stream, dict.fromkeys(COUNTS, 0))
            for name in COUNTS:
                total[name] += getattr(t, name)
        return totals

    def per_minute(self, stream: str) -> dict[str, list[int]]:
        """A stream's last hour minute by minute (the THROUGHPUT_MINUTES minutes up to the
        database's current one, zeros where nothing happened), as columns for a chart:
        `minutes` (each minute's start, seconds since the epoch), and the jobs `enqueued`,
        `acked` and `failed` in each."""
        hour = [] if self.now_minute is None else [
            self.now_minute - dt.timedelta(minutes=THROUGHPUT_MINUTES - 1 - i)
            for i in range(THROUGHPUT_MINUTES)]
        column = {"minutes": [int(m.timestamp()) for m in hour]}
        for name in SERIES:
            column[name] = [getattr(self.minutes[(stream, m)], name)
                            if (stream, m) in self.minutes else 0 for m in hour]
        return column

    async def _refresh(self, q: AsyncQueue) -> None:
        since = None if self.now_minute is None else self.now_minute - dt.timedelta(minutes=1)
        found = await q.throughput(since=since)
        horizon = found.now_minute - dt.timedelta(minutes=THROUGHPUT_MINUTES)
        self.minutes = {key: t for key, t in self.minutes.items()
                        if key[1] >= horizon and (since is None or key[1] < since)}
        self.minutes.update({(t.stream, t.minute): t for t in found.minutes
                             if t.minute >= horizon})
        self.now_minute, self.at = found.now_minute, time.monotonic()


def jsonable(value: Any) -> Any:
    """A row from the library as JSON (timestamps as ISO 8601)."""
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, Mapping):  # dicts and the mapping records (WorkerInfo)
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


async def stats(q: AsyncQueue, cache: Cache) -> dict[str, Any]:
    """Every stream with its jobs by state and the age of its oldest ready job (the counts
    the writes keep: no scan), the last hour's throughput, and the workers, op log and
    replicas in brief."""
    gauges = await q.gauges()
    hour = await cache.throughput(q)
    streams = sorted(set(gauges.streams) | set(hour))
    return {
        "streams": [{
            "stream": s,
            "states": {state: gauges.jobs.get((s, state), 0) for state in JOB_STATES},
            "oldest_pending_age_seconds": gauges.oldest_pending_age_seconds.get(s),
            "last_hour": {**_throughput(hour.get(s)),
                          "per_minute": cache.per_minute(s)},
        } for s in streams],
        "workers": gauges.workers,
        "op_log_ops": gauges.op_log_ops,
        "replicas": jsonable(gauges.replicas),
    }


def _throughput(t: dict[str, int] | None) -> dict[str, Any]:
    counts = t or dict.fromkeys(COUNTS, 0)
    return {**counts, "acked_per_minute": round(counts["acked"] / THROUGHPUT_MINUTES, 2)}


async def jobs(q: AsyncQueue, where: JobFilter, page: Page) -> dict[str, Any]:
    """A page of jobs, newest first, and the cursor of the next page (null on the last)."""
    found = await q.jobs_page(stream=where.stream, state=where.state, kind=where.kind,
                              after=page.after, limit=page.limit, preview_bytes=PREVIEW_BYTES)
    return {"jobs": [jsonview.job_json(j) for j in found.jobs], "next": found.next}


async def job(q: AsyncQueue, job_id: int) -> dict[str, Any] | None:
    """A job with its step list (each step's status and crashes) and its history from the op
    log; also for a job that was acked or cancelled while its ops are kept (job: null).
    None when nothing of it is left."""
    found = await q.job_preview(job_id, preview_bytes=PREVIEW_BYTES)
    history = await q.history(job_id, preview_bytes=PREVIEW_BYTES)
    if found is None and history is None:
        return None
    steps = None
    if found is not None and found.job.checkpoint.step_set_hash:
        recorded = await q.step_list(found.job.checkpoint.step_set_hash)
        steps = None if recorded is None else _steps(recorded, found.job.checkpoint)
    state = found.job.state if found is not None else history.state if history else "gone"
    worker = None
    if found is not None and found.job.worker_instance is not None:
        worker = next(({"id": w.id, "node": w.node, "host": w.host, "pid": w.pid}
                       for w in await q.workers() if w.id == found.job.worker_instance), None)
    story = None if history is None else jsonview.history_json(history)
    return {"job_id": job_id, "state": state,
            "job": None if found is None else jsonview.job_json(found),
            "actions": [] if found is None else await q.allowed_verbs(found.job),
            "worker": worker,
            "steps": steps,
            "history": story,
            "timeline": [] if story is None else [timeline_entry(o) for o in story["ops"]]}


def when(at: dt.datetime) -> str:
    """A time as a person reads it: UTC, to the millisecond."""
    at = at.astimezone(dt.timezone.utc)
    return at.strftime("%Y-%m-%d %H:%M:%S.") + f"{at.microsecond // 1000:03d} UTC"


def _when(ms: int) -> str:
    """Epoch milliseconds (an op body's *_ms) as a time a person reads."""
    return when(dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc))


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(", ", ": "), ensure_ascii=False)


def _cursor(value: Any) -> str:
    """A checkpoint's cursor as the checkpoint panel shows it: text when it is UTF-8, else
    base64 said so."""
    if not isinstance(value, str):
        return _text(value)
    try:
        raw = base64.b64decode(value, validate=True)
    except (ValueError, binascii.Error):
        return value
    text, encoding = jsonview.encode_bytes(raw)
    return (text or "") if encoding == "utf-8" else f"{text} (base64)"


def timeline_entry(op: dict[str, Any]) -> dict[str, Any]:
    """One op of a job's history as its page reads it: when (a time), what, under which lease,
    and its body's fields in words (times as times, a checkpoint's cursor decoded as the
    checkpoint panel shows it); the raw op stays beside it."""
    details: list[tuple[str, str]] = []
    for key, value in (op.get("body") or {}).items():
        if key in ("job_id", "lease_id", "stream") or value is None:
            continue
        if key.endswith("_ms") and isinstance(value, int):
            details.append((key[:-3].replace("_", " "), _when(value)))
        elif key == "checkpoint" and isinstance(value, dict):
            for part in ("last_completed_step", "cursor_step"):
                if value.get(part) is not None:
                    details.append((part.replace("_", " "), _text(value[part])))
            if value.get("cursor") is not None:
                details.append(("cursor", _cursor(value["cursor"])))
            if value.get("crashes_by_step"):
                details.append(("crashes by step", _text(value["crashes_by_step"])))
        elif key == "payload":
            size = op.get("payload_size")
            if size is None and isinstance(value, str):
                size = len(base64.b64decode(value))
            details.append(("payload", f"{size:,} bytes" if size is not None else "?"))
        else:
            details.append((key.replace("_", " "), _text(value)))
    return {"seq": op["seq"], "op": op["op"], "lease_id": op["lease_id"], "at": op["at"],
            "at_text": when(dt.datetime.fromisoformat(op["at"])), "details": details, "raw": op}


def _steps(recorded: list[dict[str, Any]], cp: Checkpoint) -> list[dict[str, Any]]:
    names = [s["name"] for s in recorded]
    done = names.index(cp.last_completed_step) + 1 if cp.last_completed_step in names else 0
    return [{"name": s["name"], "version": s.get("version"),
             "status": "completed" if i < done
             else "in progress" if s["name"] == cp.cursor_step else "to do",
             "crashes": int(cp.crashes_by_step.get(s["name"], 0))}
            for i, s in enumerate(recorded)]


def gone(job_id: int) -> str:
    """Why a job id shows nothing (the 404's message)."""
    return (f"no job {job_id}: it never existed, or it finished and the op log was pruned "
            f"past its ops")


async def after_action(q: AsyncQueue, job_id: int) -> dict[str, Any]:
    """A job's state after an operator verb ("cancelled" once it is gone)."""
    found = await q.job_preview(job_id, preview_bytes=PREVIEW_BYTES)
    if found is not None:
        return {"job_id": job_id, "state": found.job.state, "job": jsonview.job_json(found)}
    history = await q.history(job_id, preview_bytes=0)
    state = history.state if history is not None and history.state in FINISHED_STATES else "gone"
    return {"job_id": job_id, "state": state, "job": None}


async def schedules(q: AsyncQueue) -> dict[str, Any]:
    return {"schedules": [jsonview.schedule_json(s) for s in await q.schedules(all_streams=True)]}


async def kinds(q: AsyncQueue) -> dict[str, Any]:
    """Every kind of every stream that has settings (the quarantine threshold and the limits
    the lease enforces: `pgqueue kinds set`, `q.configure_kind` or a worker's handlers) or that
    a live worker handles, and which it is: `source` is "configured", "registered" (a live
    worker handles it; its handler's settings in `handler`, the workers in `workers`) or
    "both"."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for k in await q.kinds(all_streams=True):
        rows[(k.stream, k.kind)] = {**jsonview.kind_json(k), "configured": True,
                                    "handler": None, "workers": []}
    for r in await q.worker_kinds():
        row = rows.setdefault((r["stream"], r["kind"]), {
            **jsonview.kind_json(KindConfig(r["stream"], r["kind"])), "configured": False})
        row["handler"], row["workers"] = r["handler"], list(r["workers"])
    for row in rows.values():
        configured = row.pop("configured")
        row["source"] = ("both" if configured and row["workers"] else
                         "configured" if configured else "registered")
    return {"kinds": [rows[key] for key in sorted(rows)]}


async def workers(q: AsyncQueue) -> dict[str, Any]:
    """Registered workers, each live or stale (no heartbeat for STALE_WORKER_SECONDS), with
    the leases it holds."""
    rows = await q.workers()
    return {"stale_after_seconds": STALE_WORKER_SECONDS, "workers": [
        {**jsonable(r), "live": r.heartbeat_age_seconds < STALE_WORKER_SECONDS}
        for r in rows]}


async def replicas(q: AsyncQueue) -> dict[str, Any]:
    return {"replicas": jsonable(await q.replicas())}
