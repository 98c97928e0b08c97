# DO NOT EDIT: generated from pgqueue/client/observe_async.py by tools/generate.py; edit that file.
"""Observe the queue: one job, lists of jobs, counts by stream and state (read-only).

The `*_preview` readers return jobs and ops whose payloads the database has already cut to
their first bytes, with the whole length beside them: what a person reads (the CLI), so a
200 MiB job is shown in milliseconds rather than sent whole.

(Named observe, not inspect, so it never shadows the standard library's module.)
"""
from __future__ import annotations

import datetime as dt
from typing import Any

from pgqueue import validate
from pgqueue.db import run
from pgqueue.models import (
    JOB_STATES,
    DeadLetterGroup,
    JobCount,
    JobHistory,
    JobInfo,
    JobPreview,
    JobsPage,
    Op,
    OpPreview,
    StreamStats,
    Throughput,
    ThroughputMinutes,
)

# The metrics' figures, read by Queue.gauges too (telemetry/gauges_async.py).
from pgqueue.telemetry.gauges import STALE_WORKER_SECONDS as STALE_WORKER_SECONDS
from pgqueue.telemetry.gauges import gauges as gauges

#: How much of a payload a preview holds by default (bytes).
PREVIEW_BYTES = 1000
#: The largest preview asked for (more is the whole payload: read it with Queue.job).
MAX_PREVIEW_BYTES = 1 << 30


def job(conn: run.Conn, job_id: int) -> JobInfo | None:
    """A job in any set, or None when it is gone (acked) or never existed."""
    validate.integer(job_id, "job_id")
    if not -validate.MAX_BIGINT <= job_id <= validate.MAX_BIGINT:
        return None  # no job id can be outside bigint: it never existed
    row = run.fetch_one(conn, "job_by_id", {"job_id": job_id})
    return None if row is None else JobInfo.from_row(row)


def _list_filter(stream: str | None, state: str | None, kind: str | None,
                 limit: int) -> dict[str, Any]:
    """The checked filter of jobs_list and jobs_preview_list."""
    if stream is not None:
        validate.stream(stream)
    if state is not None and state not in JOB_STATES:
        raise ValueError(f"state must be one of {', '.join(JOB_STATES)}, got {state!r}")
    if kind is not None:
        validate.kind(kind)
    validate.integer(limit, "limit", low=1, high=1_000_000)
    return {"stream": stream, "state": state, "kind": kind, "limit": limit}


def jobs(conn: run.Conn, *, stream: str | None = None, state: str | None = None,
         limit: int = 100, kind: str | None = None) -> list[JobInfo]:
    """Jobs, newest first, optionally of one stream, state and kind."""
    rows = run.fetch(conn, "jobs_list", _list_filter(stream, state, kind, limit))
    return [JobInfo.from_row(r) for r in rows]


#: How many of the newest dead letters the groups of the dashboard count, and how many groups.
DEAD_GROUP_WINDOW = 10_000
DEAD_GROUPS = 20


def dead_letter_groups(conn: run.Conn, stream: str | None, *,
                       window: int = DEAD_GROUP_WINDOW,
                       groups: int = DEAD_GROUPS) -> list[DeadLetterGroup]:
    """The newest `window` dead letters by kind and error summary, the biggest groups first."""
    if stream is not None:
        validate.stream(stream)
    validate.integer(window, "window", low=1, high=1_000_000)
    validate.integer(groups, "groups", low=1, high=1000)
    rows = run.fetch(conn, "dead_letter_groups",
                     {"stream": stream, "window": window, "groups": groups})
    return [DeadLetterGroup(r["kind"], r["error_summary"], int(r["n"])) for r in rows]


def known_streams(conn: run.Conn) -> list[str]:
    """Every stream the database knows (has or had jobs, settings, schedules or a worker)."""
    return [str(r["stream"]) for r in run.fetch(conn, "known_streams")]


def stats(conn: run.Conn) -> list[StreamStats]:
    """Job counts by stream and state."""
    return [
        StreamStats(stream=r["stream"], state=r["state"], count=r["count"],
                    oldest_age_seconds=r["oldest_age_seconds"])
        for r in run.fetch(conn, "stats")
    ]


#: The most ops of one job a history holds (a job renewed every few seconds for days has more:
#: the newest are kept).
MAX_HISTORY_OPS = 100_000
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
#: The op that ends a job's life without leaving it in any set, and the state it ends in.
_FINAL_OPS = {"Ack": "acked", "Cancel": "cancelled"}


def history(conn: run.Conn, job_id: int, *,
            preview_bytes: int | None = None) -> JobHistory | None:
    """A job's state and ops (oldest first), also once it was acked or cancelled, read from
    one snapshot; None when neither the job nor any op of it is left.

    :param preview_bytes: None: ops with whole bodies; a number: any payload in an op body cut
        to its first bytes by the database (as op_log_preview).
    """
    validate.integer(job_id, "job_id")
    preview = None if preview_bytes is None else _preview(preview_bytes)
    if not -validate.MAX_BIGINT <= job_id <= validate.MAX_BIGINT:
        return None
    with run.transaction(conn):
        run.fetch(conn, "read_snapshot")
        row = run.fetch_one(conn, "job_preview_by_id", {"job_id": job_id, "preview": 0})
        if preview is None:
            ops = [Op(**r) for r in run.fetch(conn, "oplog_tail", {
                "limit": MAX_HISTORY_OPS, "stream": None, "job_id": job_id})]
        else:
            ops = []
            for r in run.fetch(conn, "oplog_tail_preview", {
                    "limit": MAX_HISTORY_OPS, "stream": None, "job_id": job_id,
                    "preview": preview}):
                r.pop("payload_size")
                ops.append(Op(**r))
    ops.reverse()
    pruned = not ops or ops[0].op != "Enqueue"
    # a cancel asked while a worker held the job: its lease then ended the job, one way or the
    # other, so the last request is the one that counts
    requested = next((_EPOCH + dt.timedelta(milliseconds=int(o.body["at_ms"]))
                      for o in reversed(ops) if o.op == "RequestCancel"), None)
    if row is not None:
        info = JobInfo.from_row(row)
        return JobHistory(job_id, info.state, info.died_at if info.state == "dead" else None,
                          info.lease_id, ops, pruned, preview is not None,
                          info.cancel_requested_at or requested)
    if not ops:
        return None
    last = ops[-1]
    return JobHistory(job_id, _FINAL_OPS.get(last.op, "gone"), last.at, last.lease_id, ops,
                      pruned, preview is not None, requested)


def _preview(preview_bytes: int) -> int:
    return validate.integer(preview_bytes, "preview_bytes", low=0, high=MAX_PREVIEW_BYTES)


def _job_preview(row: dict[str, Any]) -> JobPreview:
    return JobPreview(JobInfo.from_row(row), int(row["payload_size"]))


def job_preview(conn: run.Conn, job_id: int,
                preview_bytes: int = PREVIEW_BYTES) -> JobPreview | None:
    """A job in any set with its payload cut to the first `preview_bytes` bytes in the
    database (only those are read and sent), or None like `job`.

    :param preview_bytes: how much of the payload to return (0 to 1 GiB).
    """
    validate.integer(job_id, "job_id")
    preview = _preview(preview_bytes)
    if not -validate.MAX_BIGINT <= job_id <= validate.MAX_BIGINT:
        return None
    row = run.fetch_one(conn, "job_preview_by_id", {"job_id": job_id, "preview": preview})
    return None if row is None else _job_preview(row)


def jobs_preview(conn: run.Conn, *, stream: str | None = None, state: str | None = None,
                 limit: int = 100, preview_bytes: int = PREVIEW_BYTES,
                 kind: str | None = None) -> list[JobPreview]:
    """`jobs` (newest first), each payload cut to its first `preview_bytes` bytes."""
    rows = run.fetch(conn, "jobs_preview_list", {
        **_list_filter(stream, state, kind, limit), "preview": _preview(preview_bytes)})
    return [_job_preview(r) for r in rows]


def dead_letters_preview(conn: run.Conn, stream: str, limit: int = 100,
                         preview_bytes: int = PREVIEW_BYTES) -> list[JobPreview]:
    """A stream's dead letters, most recently died first, each payload cut to its first
    `preview_bytes` bytes."""
    validate.stream(stream)
    validate.integer(limit, "limit", low=1, high=1_000_000)
    rows = run.fetch(conn, "dead_letters_preview", {
        "stream": stream, "limit": limit, "preview": _preview(preview_bytes)})
    return [_job_preview(r) for r in rows]


def op_log_preview(conn: run.Conn, *, limit: int = 20, stream: str | None = None,
                   job_id: int | None = None,
                   preview_bytes: int = PREVIEW_BYTES) -> list[OpPreview]:
    """The newest ops (newest first) like `oplog.tail`, any payload in a body cut to its
    first `preview_bytes` bytes in the database."""
    validate.integer(limit, "limit", low=1, high=1_000_000)
    if stream is not None:
        validate.stream(stream)
    if job_id is not None:
        validate.integer(job_id, "job_id", low=-validate.MAX_BIGINT, high=validate.MAX_BIGINT)
    preview = _preview(preview_bytes)
    rows = run.fetch(conn, "oplog_tail_preview", {
        "limit": limit, "stream": stream, "job_id": job_id, "preview": preview})
    found = []
    for r in rows:
        size = r.pop("payload_size")
        found.append(OpPreview(Op(**r), size, size is not None and size > preview))
    return found


#: The most jobs one page holds.
MAX_PAGE = 1000


def job_filter(stream: str | None, state: str | None, kind: str | None) -> dict[str, Any]:
    """The parameters of a jobs filter, checked (None: any)."""
    if stream is not None:
        validate.stream(stream)
    if state is not None and state not in JOB_STATES:
        raise ValueError(f"state must be one of {', '.join(JOB_STATES)}, got {state!r}")
    if kind is not None:
        validate.kind(kind)
    return {"stream": stream, "state": state, "kind": kind}


def _bound(value: int | None, name: str) -> int | None:
    return None if value is None else validate.integer(value, name, low=0, high=validate.MAX_BIGINT)


#: With a kind, the most jobs one page looks at (see jobs_page).
KIND_WINDOW = 10_000


def _by_ready(conn: run.Conn, stream: str | None, state: str | None,
              limit: int) -> bool:
    """Whether a page reads a stream's ready jobs through their entries in pgqueue.ready (they
    are few among many) rather than the primary keys, newest first (pending_is_rare)."""
    if state != "pending" or stream is None:
        return False
    row = run.fetch_one(conn, "pending_is_rare", {"stream": stream, "limit": limit})
    return bool(row and row["rare"])


def jobs_page(conn: run.Conn, *, stream: str | None = None, state: str | None = None,
              kind: str | None = None, after: int | None = None, limit: int = 50,
              preview_bytes: int = PREVIEW_BYTES) -> JobsPage:
    """Jobs newest first, filtered, below id `after` (keyset paging: every page costs the same
    however deep), each payload cut to its first `preview_bytes` bytes.

    With a kind, a page looks at no more than the KIND_WINDOW newest jobs of the rest of the
    filter, so it may hold fewer jobs than `limit`, even none, and still have a `next`: follow
    `next` until it is None."""
    params = job_filter(stream, state, kind)
    validate.integer(limit, "limit", low=1, high=MAX_PAGE)
    args = {**params, "after": _bound(after, "after"), "through": None, "limit": limit + 1,
            "preview": _preview(preview_bytes),
            "by_ready": _by_ready(conn, params["stream"], params["state"], limit)}
    if kind is None:
        rows = run.fetch(conn, "jobs_page", args)
        more = len(rows) > limit
        jobs = [_job_preview(r) for r in rows[:limit]]
        return JobsPage(jobs, jobs[-1].job.job_id if more else None)
    rows = run.fetch(conn, "jobs_page_of_kind", {**args, "window": KIND_WINDOW})
    found = [r for r in rows if r["id"] is not None]
    jobs = [_job_preview(r) for r in found[:limit]]
    if len(found) > limit:
        return JobsPage(jobs, jobs[-1].job.job_id)
    window_full = bool(rows) and int(rows[0]["window_size"] or 0) >= KIND_WINDOW
    return JobsPage(jobs, int(rows[0]["window_floor"]) if window_full else None)


def jobs_page_ids(conn: run.Conn, *, stream: str | None, state: str | None,
                  kind: str | None, after: int | None, through: int | None,
                  limit: int) -> list[tuple[int, str]]:
    """The ids of a jobs filter, newest first, below `after` and at most `through`, each with
    its stream."""
    rows = run.fetch(conn, "jobs_page_ids", {
        **job_filter(stream, state, kind), "after": _bound(after, "after"),
        "through": _bound(through, "through"),
        "limit": validate.integer(limit, "limit", low=1, high=100_000)})
    return [(int(r["id"]), str(r["stream"])) for r in rows]


def count_jobs(conn: run.Conn, *, stream: str | None = None, state: str | None = None,
               kind: str | None = None) -> JobCount:
    """How many jobs the filter matches (without a kind, from the counts the writes keep: no
    scan), and the newest job id (the bound of a bulk action)."""
    row = run.fetch_one(conn, "jobs_count", job_filter(stream, state, kind))
    assert row is not None
    return JobCount(int(row["count"]), row["newest"])


def throughput(conn: run.Conn, since: dt.datetime | None = None) -> ThroughputMinutes:
    """Jobs enqueued, acked, failed and cancelled per stream and minute since `since` (None:
    an hour ago; never further back), from the op log, and the database's current minute."""
    if since is not None and (not isinstance(since, dt.datetime) or since.tzinfo is None):
        raise ValueError(f"since must be a timezone-aware datetime, got {since!r}")
    rows = run.fetch(conn, "throughput", {"since": since})
    return ThroughputMinutes(rows[0]["now_minute"], [
        Throughput(r["stream"], r["minute"], int(r["enqueued"]), int(r["acked"]),
                   int(r["failed"]), int(r["cancelled"]))
        for r in rows if r["stream"] is not None])
