"""The records pgqueue hands to callers: the core ones (records.py: new jobs, leases, job
snapshots, checkpoints, ops, histories), gathered here, and what the readers return: counts,
pages and previews of jobs and ops, gauges, throughput, dead-letter groups, bulk results,
kind settings and verdicts.
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any

from pgqueue.records import (
    FINISHED_STATES,
    JOB_STATES,
    UNSET,
    Checkpoint,
    JobHistory,
    JobInfo,
    JobState,
    Lease,
    NewJob,
    Op,
    Renewed,
    Unset,
    by_stream,
)

__all__ = ["FINISHED_STATES", "JOB_STATES", "UNSET", "VERBS", "BulkResult", "Checkpoint",
           "DeadLetterGroup", "JobCount", "JobHistory", "JobInfo", "JobPreview", "JobState",
           "JobsPage", "KindConfig", "Lease", "NewJob", "Op", "OpPreview", "QueueGauges",
           "Renewed", "StreamStats", "Throughput", "ThroughputMinutes", "Unset", "Verdict",
           "WorkerInfo", "by_stream"]


@dataclass(frozen=True)
class DeadLetterGroup:
    """Dead letters of one kind dead of one error (its summary), and how many."""

    kind: str | None
    error_summary: str | None
    count: int


@dataclass(frozen=True)
class StreamStats:
    """Jobs of one stream in one state, and the age of its oldest ready job."""

    stream: str
    state: str
    count: int
    oldest_age_seconds: float | None


@dataclass(frozen=True)
class QueueGauges:
    """What a metrics scrape reports of one database, read by a bounded number of cheap
    queries (Queue.gauges; no scan of the job table)."""

    #: every stream that has or had jobs, or has a schedule, sorted
    streams: list[str]
    #: jobs by (stream, state), dead letters as state "dead"; a missing pair is 0
    jobs: dict[tuple[str, str], int]
    #: per stream, seconds since its oldest ready job became leasable (None: none ready)
    oldest_pending_age_seconds: dict[str, float | None]
    #: ops the op log keeps (from its first and last seq)
    op_log_ops: int
    #: schedules by (stream, paused)
    schedules: dict[tuple[str, bool], int]
    #: registered workers by "live" / "stale"
    workers: dict[str, int]
    #: the leader's replicas: name, lag_ops, lag_seconds, stale, ...
    replicas: list[dict[str, Any]]


@dataclass(frozen=True)
class JobCount:
    """How many jobs a filter (stream, state, kind) matches, and the newest job id there is
    (of any filter): a bulk action given `newest` as its bound touches no job enqueued after
    the count."""

    count: int
    newest: int | None


@dataclass(frozen=True)
class Throughput:
    """One stream's jobs in one minute (by the op log's time, the database's clock)."""

    stream: str
    #: the minute's start
    minute: dt.datetime
    enqueued: int
    acked: int
    #: nacked or reclaimed (each failed attempt once)
    failed: int
    cancelled: int


@dataclass(frozen=True)
class ThroughputMinutes:
    """Jobs by stream and minute since a time, and the database's current minute (which is
    not over: its counts may still grow)."""

    now_minute: dt.datetime
    minutes: list[Throughput]


#: The operator verbs on a job, by the names the CLI, the HTTP API and the dashboard use.
VERBS = ("requeue", "release", "rewind", "restart", "skip-step", "accept-step-set", "cancel")


@dataclass(frozen=True)
class BulkResult:
    """What one operator verb did to the jobs of a filter: how many it moved, those it did
    not fit (changed meanwhile), the first of them with why, and for a cancel the leased jobs
    it asked to stop (their workers end them as cancelled, unless they finish first)."""

    verb: str
    done: int
    refused: int
    #: (job id, why) of the first refused jobs, at most BulkResult.MAX_REASONS
    reasons: list[tuple[int, str]]
    requested: int = 0

    MAX_REASONS = 50


@dataclass(frozen=True)
class JobPreview:
    """A job snapshot whose payload is at most its first bytes (`job.payload`), and the
    payload's whole size."""

    job: JobInfo
    payload_size: int

    @property
    def payload_truncated(self) -> bool:
        """True when `job.payload` is only the start of the payload."""
        return self.payload_size > len(self.job.payload)


@dataclass(frozen=True)
class OpPreview:
    """An op whose body's payload (if it has one) is at most its first bytes, base64 as in
    the full body; `payload_size` is the whole payload's size (None: the op has none)."""

    op: Op
    payload_size: int | None
    payload_truncated: bool


@dataclass(frozen=True)
class JobsPage:
    """One page of jobs, newest first, and the id to pass back as `after` for the next page
    (None on the last page)."""

    jobs: list[JobPreview]
    next: int | None


@dataclass(frozen=True)
class KindConfig:
    """A kind's settings in one stream (None: not set; quarantine_after: the stream's)."""

    stream: str
    kind: str
    quarantine_after: int | None = None
    #: at most this many jobs of the kind leased at once, across every worker
    max_concurrency: int | None = None
    #: (count, seconds): at most count leases of the kind starting in any window of seconds
    rate_limit: tuple[int, float] | None = None
    #: at most this many leased jobs sharing one concurrency_key
    max_per_key: int | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> KindConfig:
        rate = None if row["rate_count"] is None else (int(row["rate_count"]),
                                                         row["rate_ms"] / 1000)
        return cls(row["stream"], row["kind"], row["quarantine_after"], row["max_concurrency"],
                   rate, row["max_per_key"])


@dataclass(frozen=True)
class WorkerInfo(Mapping[str, Any]):
    """A registered worker process and the leases it holds now (Queue.workers).

    Also a read-only mapping of its fields (`w["node"]`, `dict(w)`, `{**w}`): workers()
    returned plain dicts before this model, and code written against them keeps working."""

    #: the worker's id (a job's worker_instance while the worker holds its lease)
    id: int
    #: the database node the worker leases from (0 outside Citus)
    node: int
    host: str
    pid: int
    #: the streams it works on
    streams: list[str]
    #: how many jobs it runs at once
    concurrency: int
    started_at: dt.datetime
    #: its last heartbeat, by the database's clock
    heartbeat_at: dt.datetime
    #: seconds since that heartbeat (at least 0)
    heartbeat_age_seconds: float
    #: jobs leased to it right now
    leases: int

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> WorkerInfo:
        return cls(id=row["id"], node=row["node"], host=row["host"], pid=row["pid"],
                   streams=list(row["streams"] or []), concurrency=row["concurrency"],
                   started_at=row["started_at"], heartbeat_at=row["heartbeat_at"],
                   heartbeat_age_seconds=row["heartbeat_age_seconds"], leases=row["leases"])

    def __getitem__(self, key: str) -> Any:
        if key not in _WORKER_FIELDS:
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(_WORKER_FIELDS)

    def __len__(self) -> int:
        return len(_WORKER_FIELDS)


_WORKER_FIELDS = tuple(f.name for f in fields(WorkerInfo))


@dataclass(frozen=True)
class Verdict:
    """Why a job would be parked as undecodable, and the particulars (its state_detail): the
    compatibility rule's answer (pgqueue/runtime/compat.py), read by deploy-check too."""

    reason: str
    detail: dict[str, Any]
