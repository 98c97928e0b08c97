"""The core records pgqueue hands to callers: new jobs, leases, job snapshots, checkpoints,
ops and a job's history, and the one vocabulary of job states.

Frozen dataclasses, so a lease or snapshot cannot be mistaken for live state (NewJob, an
input record, is a plain slotted dataclass). The records the readers return (counts, pages,
previews, gauges) are in models.py, which also gathers these.
"""
from __future__ import annotations

import base64
import datetime as dt
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal, NamedTuple

#: The one vocabulary of job states, the same in SQL, Python, CLI output and docs.
JobState = Literal["pending", "scheduled", "leased", "dead", "quarantined", "undecodable"]
JOB_STATES: tuple[str, ...] = ("pending", "scheduled", "leased", "dead", "quarantined", "undecodable")


@dataclass(frozen=True)
class Checkpoint:
    """Where a step job stands. The worker owns every field but crashes_by_step (reclaim's).

    cursor is the last fully processed position inside cursor_step, as opaque bytes.
    """

    last_completed_step: str | None = None
    cursor_step: str | None = None
    cursor: bytes | None = None
    updated_at_ms: int | None = None
    schema_version: int | None = None
    step_set_hash: str | None = None
    crashes_by_step: dict[str, int] = field(default_factory=dict)

    @property
    def updated_at(self) -> dt.datetime | None:
        """When the checkpoint was last written (the glossary's name; `updated_at_ms` is the
        same moment in epoch milliseconds)."""
        if self.updated_at_ms is None:
            return None
        return dt.datetime.fromtimestamp(self.updated_at_ms / 1000, tz=dt.timezone.utc)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Checkpoint:
        """The checkpoint columns of a job row."""
        return cls.from_columns(
            row.get("last_completed_step"), row.get("cursor_step"), row.get("cursor"),
            row.get("checkpoint_updated_at"), row.get("schema_version"), row.get("step_set_hash"),
            row.get("crashes_by_step"))

    @classmethod
    def from_columns(cls, last_completed_step: str | None, cursor_step: str | None,
                     cursor: bytes | None, updated: dt.datetime | None, schema_version: int | None,
                     step_set_hash: str | None, crashes: Mapping[str, int] | None) -> Checkpoint:
        """The checkpoint from its column values, in the job table's order."""
        if (last_completed_step is None and cursor_step is None and cursor is None
                and updated is None and schema_version is None and step_set_hash is None
                and not crashes):
            return cls.empty()
        return cls(
            last_completed_step=last_completed_step,
            cursor_step=cursor_step,
            cursor=None if cursor is None else bytes(cursor),
            updated_at_ms=None if updated is None else round(updated.timestamp() * 1000),
            schema_version=schema_version,
            step_set_hash=step_set_hash,
            crashes_by_step=dict(crashes or {}),
        )

    @classmethod
    def empty(cls) -> Checkpoint:
        """The checkpoint of a job that never ran a step (most leases): filled directly, as
        Lease is, since the frozen __init__ is a cost per lease on the worker's lease path
        (docs/benchmarks.md, "In the client")."""
        empty = object.__new__(cls)
        fields = empty.__dict__
        fields.update(_EMPTY_CHECKPOINT)
        fields["crashes_by_step"] = {}
        return empty

    def to_json(self) -> dict[str, Any]:
        """The worker-owned fields as the renewal takes them (cursor in base64)."""
        return {
            "last_completed_step": self.last_completed_step,
            "cursor_step": self.cursor_step,
            "cursor": None if self.cursor is None else base64.b64encode(self.cursor).decode(),
            "schema_version": self.schema_version,
            "step_set_hash": self.step_set_hash,
        }


#: Checkpoint's field names (crashes_by_step, a dict, is filled per instance).
_CHECKPOINT_FIELDS = tuple(f.name for f in fields(Checkpoint) if f.name != "crashes_by_step")
_EMPTY_CHECKPOINT = dict.fromkeys(_CHECKPOINT_FIELDS)


@dataclass(slots=True)
class NewJob:
    """One job for `Queue.enqueue_many`; the fields mean what `Queue.enqueue`'s arguments do.

    A plain (not frozen) slotted dataclass: a frozen one's constructor sets every field through
    object.__setattr__, a cost on every batched enqueue (docs/benchmarks.md, "In the client").
    Changing a NewJob after it was enqueued changes nothing."""

    payload: Any
    kind: str | None = None
    priority: int = 0
    delay: float | dt.timedelta | None = None
    not_before: dt.datetime | None = None
    dedup_key: str | bytes | None = None
    #: Failures before the job dies (0 = unlimited). None: the handler's max_attempts when a
    #: worker's handler sets one, else 25; a value given here always wins.
    max_attempts: int | None = None
    #: The payload's schema version (step jobs record it so a newer worker can upcast).
    schema_version: int | None = None
    #: What the kind's max_per_key counts (a tenant id, say; up to 200 characters).
    concurrency_key: str | None = None
    #: The job's own time limit per run, in seconds (whole milliseconds, at least 1 ms):
    #: overrides its handler's `timeout`. None: the handler's, or no limit.
    timeout: float | dt.timedelta | None = None


@dataclass(frozen=True)
class Lease:
    """A job handed to one worker until expires_at. Every write about it names lease_id."""

    lease_id: int
    job_id: int
    stream: str
    kind: str | None
    payload: bytes
    priority: int
    attempts: int
    max_attempts: int
    enqueued_at: dt.datetime
    expires_at: dt.datetime
    checkpoint: Checkpoint
    visibility_timeout: float = 30.0
    #: Whether the database counts this lease's handler as started: False for a job leased
    #: ahead of a free handler (prefetch) until a renewal says it started. Reclaim charges no
    #: attempt and no crash to a lease that never started.
    started: bool = True
    #: When the job became due (its not_before): the wait before its handler started is
    #: measured from here. None on a Lease made by hand.
    due_at: dt.datetime | None = None
    #: The producer's trace context (W3C traceparent/tracestate), when it had one.
    trace_context: dict[str, str] | None = None
    #: A job of a rate-limited kind leased ahead of its handler: the kind's window counts it
    #: when the handler starts (the worker asks the database first, which may defer it).
    rate_at_start: bool = False
    #: The job's own time limit per run in seconds, set at enqueue (None: its handler's).
    timeout: float | None = None

    @classmethod
    def from_lease_row(cls, row: Sequence[Any], visibility_timeout: float) -> Lease:
        """A leased job from its values in the order of shapes.LEASE (run.fetch_shaped
        picks them by name). Fills the frozen instance's __dict__ directly: the dataclass
        __init__ sets each field through object.__setattr__, a cost per lease on the
        worker's hot path (docs/benchmarks.md, "In the client")."""
        (job_id, lease_id, stream, kind, payload, priority, attempts, max_attempts, enqueued_at,
         expires_at, started, *checkpoint_columns, due_at, trace_context, rate_at_start,
         timeout_ms) = row
        checkpoint = (Checkpoint.empty() if checkpoint_columns.count(None) == 7  # never ran a step
                      else Checkpoint.from_columns(*checkpoint_columns))
        lease = object.__new__(cls)
        lease.__dict__.update(
            lease_id=lease_id, job_id=job_id, stream=stream, kind=kind, payload=bytes(payload),
            priority=priority, attempts=attempts, max_attempts=max_attempts,
            enqueued_at=enqueued_at, expires_at=expires_at, checkpoint=checkpoint,
            visibility_timeout=visibility_timeout, started=started, due_at=due_at,
            trace_context=trace_context, rate_at_start=bool(rate_at_start),
            timeout=None if timeout_ms is None else timeout_ms / 1000)
        return lease


@dataclass(frozen=True)
class JobInfo:
    """A snapshot of one job in any set (live, dead, parked)."""

    job_id: int
    stream: str
    kind: str | None
    state: JobState
    payload: bytes
    priority: int
    attempts: int
    max_attempts: int
    not_before: dt.datetime | None
    last_error: str | None
    checkpoint: Checkpoint
    enqueued_at: dt.datetime | None = None
    dedup_key: bytes | None = None
    state_reason: str | None = None
    state_detail: dict[str, Any] | None = None
    lease_id: int | None = None
    lease_expires_at: dt.datetime | None = None
    worker_node: int | None = None
    worker_instance: int | None = None
    died_at: dt.datetime | None = None
    concurrency_key: str | None = None
    #: when an operator asked to cancel the job while a worker held it (None: not asked)
    cancel_requested_at: dt.datetime | None = None
    #: the last failure in one line (`ExceptionType: message`); `last_error` holds its
    #: traceback. Rows from before schema 0010 get it from last_error's last line.
    error_summary: str | None = None
    #: the job's own time limit per run in seconds, set at enqueue (None: its handler's)
    timeout: float | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> JobInfo:
        """A row of the pgqueue.jobs view."""
        return cls(
            job_id=row["id"], stream=row["stream"], kind=row["kind"], state=row["state"],
            payload=bytes(row["payload"]), priority=row["priority"], attempts=row["attempts"],
            max_attempts=row["max_attempts"], not_before=row["not_before"],
            last_error=row["last_error"], checkpoint=Checkpoint.from_row(row),
            enqueued_at=row["enqueued_at"],
            dedup_key=None if row["dedup_key"] is None else bytes(row["dedup_key"]),
            state_reason=row["state_reason"], state_detail=row["state_detail"],
            lease_id=row["lease_id"],
            lease_expires_at=row["lease_expires_at"], worker_node=row["worker_node"],
            worker_instance=row["worker_instance"], died_at=row["died_at"],
            concurrency_key=row.get("concurrency_key"),
            cancel_requested_at=row.get("cancel_requested_at"),
            error_summary=row.get("error_summary"),
            timeout=None if row.get("timeout_ms") is None else row["timeout_ms"] / 1000,
        )


class Renewed(NamedTuple):
    """A lease a renewal found current: its new expiry, and whether an operator asked to
    cancel its job (the worker then stops its handler)."""

    expires_at: dt.datetime
    cancel_requested: bool


@dataclass(frozen=True)
class Op:
    """One row of the op log."""

    seq: int
    stream: str
    op: str
    job_id: int | None
    lease_id: int | None
    body: dict[str, Any]
    xid: str
    at: dt.datetime


#: The states a job's history can end in that no live set holds: acked (done, gone) and
#: cancelled (removed by an operator).
FINISHED_STATES = ("acked", "cancelled")


@dataclass(frozen=True)
class JobHistory:
    """What is known of a job, also after it finished: its state now (a live set's, or acked
    or cancelled for a job that is gone), when it finished and under which lease, and its ops,
    oldest first, as far as the op log still keeps them."""

    job_id: int
    #: a JOB_STATES state while the job is in a set; "acked" or "cancelled" once it is gone
    state: str
    #: when it was acked, cancelled or moved to the dead letters (None: not finished)
    finished_at: dt.datetime | None
    #: the lease it holds now, or the one it was acked under (None: none)
    lease_id: int | None
    ops: list[Op]
    #: True when the op log no longer holds the job's first ops (pruned, or the database was
    #: seeded from another's state after them): `ops` is only the end of its history
    ops_pruned: bool
    #: True when the payloads in `ops`' bodies were cut to their first bytes (a preview)
    payloads_cut: bool = False
    #: when an operator asked to cancel the job while a worker ran it (None: never asked)
    cancel_requested_at: dt.datetime | None = None

    @property
    def cancel(self) -> str | None:
        """What became of a cancel requested while the job ran: "requested" (its worker has
        not stopped it yet), "cancelled", or "too late" (its handler finished first and it was
        acked); None when none was requested."""
        if self.cancel_requested_at is None:
            return None
        if self.state == "cancelled":
            return "cancelled"
        if self.state == "acked":
            return "too late"
        return "requested"


class Unset(enum.Enum):
    """The default of a setting not given (None is a value: it clears the setting)."""

    UNSET = "UNSET"


#: A setting not given: left as it is.
UNSET = Unset.UNSET


def by_stream(leases: Sequence[Lease]) -> dict[str, list[Lease]]:
    """Leases grouped by their stream, streams in first-seen order: a call about leases is a
    statement per stream (on Citus each runs on the node holding its stream)."""
    groups: dict[str, list[Lease]] = {}
    for held in leases:
        groups.setdefault(held.stream, []).append(held)
    return groups
