# DO NOT EDIT: generated from pgqueue/client/queue_read_async.py by tools/generate.py; edit that file.
"""The Queue's reading calls: jobs, their history and previews, pages and counts for the
dashboard, throughput, the op log, workers, replicas, kinds, schedules, and which operator
verbs apply to a job.

A mixin of AsyncQueue (client/queue_async.py), under its operator calls
(queue_operate_async.py); the queue provides the stream, the pooled connections and
failover. Queue's (queue_read.py) is generated from this source.
"""
from __future__ import annotations

import datetime as dt
from contextlib import AbstractContextManager
from typing import Any

from pgqueue import validate
from pgqueue.client import deadletter, kinds, observe, oplog, schedule
from pgqueue.cron import Schedule
from pgqueue.db import run
from pgqueue.db.failover import follow_leader
from pgqueue.db.run import Conn
from pgqueue.models import (
    DeadLetterGroup,
    JobCount,
    JobHistory,
    JobInfo,
    JobPreview,
    JobsPage,
    KindConfig,
    Op,
    OpPreview,
    QueueGauges,
    StreamStats,
    ThroughputMinutes,
    WorkerInfo,
)
from pgqueue.validate import no_such_stream


class QueueReads:
    """The queue's reading calls; the queue supplies `stream`, `connection()` and failover."""

    stream: str

    def connection(self) -> AbstractContextManager[Conn]:
        raise NotImplementedError  # the queue class has it

    def _move_to_leader(self) -> bool:
        raise NotImplementedError  # the queue class has it

    @follow_leader(idempotent=True)
    def dead_letters(self, limit: int = 100) -> list[JobInfo]:
        """This stream's dead letters, newest first."""
        with self.connection() as conn:
            return deadletter.dead_letters(conn, self.stream, limit)

    @follow_leader(idempotent=True)
    def job(self, job_id: int) -> JobInfo | None:
        """A job of any stream in any set; None when acked or unknown."""
        with self.connection() as conn:
            return observe.job(conn, job_id)

    @follow_leader(idempotent=True)
    def history(self, job_id: int, *,
                preview_bytes: int | None = None) -> JobHistory | None:
        """A job's state and its ops, oldest first, also after it was acked or cancelled (as
        long as the op log keeps its ops); None when nothing of it is left. With
        `preview_bytes`, payloads in op bodies are cut to their first bytes by the database."""
        with self.connection() as conn:
            return observe.history(conn, job_id, preview_bytes=preview_bytes)

    @follow_leader(idempotent=True)
    def gauges(self) -> QueueGauges:
        """The database's figures for metrics (jobs by stream and state, oldest ready job,
        op log, schedules, workers, replicas), by a bounded number of cheap queries."""
        with self.connection() as conn:
            return observe.gauges(conn)

    @follow_leader(idempotent=True)
    def jobs(self, *, state: str | None = None, all_streams: bool = False,
             limit: int = 100, kind: str | None = None) -> list[JobInfo]:
        """Jobs of this stream (or every stream), newest first, optionally in one state and
        of one kind."""
        with self.connection() as conn:
            return observe.jobs(conn, stream=None if all_streams else self.stream, state=state,
                                limit=limit, kind=kind)

    @follow_leader(idempotent=True)
    def jobs_page(self, *, stream: str | None = None, state: str | None = None,
                  kind: str | None = None, after: int | None = None, limit: int = 50,
                  preview_bytes: int = observe.PREVIEW_BYTES) -> JobsPage:
        """A page of jobs of any stream (or `stream`), state and kind, newest first, with ids
        below `after` (the previous page's `next`), payloads cut to `preview_bytes`: keyset
        paging that costs the same on the thousandth page as on the first."""
        with self.connection() as conn:
            return observe.jobs_page(conn, stream=stream, state=state, kind=kind,
                                     after=after, limit=limit, preview_bytes=preview_bytes)

    @follow_leader(idempotent=True)
    def count_jobs(self, *, stream: str | None = None, state: str | None = None,
                   kind: str | None = None) -> JobCount:
        """How many jobs of any stream (or `stream`), state and kind there are, and the newest
        job id (the bound to give act_on_jobs, so jobs enqueued later are left alone)."""
        with self.connection() as conn:
            return observe.count_jobs(conn, stream=stream, state=state, kind=kind)

    @follow_leader(idempotent=True)
    def throughput(self, *, since: dt.datetime | None = None) -> ThroughputMinutes:
        """Per stream and minute since `since` (None: an hour ago; never further back), jobs
        enqueued, acked, failed and cancelled, counted from the op log, and the database's
        current minute (a caller that keeps the minutes that are over asks again from the
        one before it: an op is stamped when its transaction began)."""
        with self.connection() as conn:
            return observe.throughput(conn, since)

    @follow_leader(idempotent=True)
    def dead_letter_groups(self, *, all_streams: bool = False,
                           window: int = observe.DEAD_GROUP_WINDOW
                           ) -> list[DeadLetterGroup]:
        """This stream's (or every stream's) newest `window` dead letters by kind and error
        summary, the biggest groups first (at most observe.DEAD_GROUPS)."""
        with self.connection() as conn:
            return observe.dead_letter_groups(
                conn, None if all_streams else self.stream, window=window)

    @follow_leader(idempotent=True)
    def streams(self) -> list[str]:
        """Every stream the database knows: those that have or had jobs, settings,
        schedules or a live worker (enqueue creates a stream by using it)."""
        with self.connection() as conn:
            return observe.known_streams(conn)

    @follow_leader(idempotent=True)
    def unknown_stream(self, stream: str | None = None) -> str | None:
        """None when `stream` (this queue's by default) is one the database knows; else what
        to tell a user who named it: that it does not exist, and the closest known streams
        (a typo is otherwise a silent empty list, or a worker idle on the wrong stream)."""
        name = self.stream if stream is None else validate.stream(stream)
        known = self.streams()
        return None if name in known else no_such_stream(name, known)

    @follow_leader(idempotent=True)
    def stats(self) -> list[StreamStats]:
        """Job counts by stream and state, across the database."""
        with self.connection() as conn:
            return observe.stats(conn)

    @follow_leader(idempotent=True)
    def op_log(self, *, limit: int = 20, job_id: int | None = None,
               all_streams: bool = False) -> list[Op]:
        """The newest ops of this stream (or every stream), newest first."""
        with self.connection() as conn:
            return oplog.tail(conn, limit=limit, job_id=job_id,
                              stream=None if all_streams else self.stream)

    @follow_leader(idempotent=True)
    def state_verbs(self, state: str) -> list[str]:
        """The operator verbs that jobs in `state` allow (pgqueue.verb_states): what a bulk
        action over such jobs may offer (a job's own page asks allowed_verbs)."""
        observe.job_filter(None, state, None)  # one of JOB_STATES, named when not
        with self.connection() as conn:
            row = run.fetch_one(conn, "state_verbs", {"state": state})
        return [] if row is None else list(row["verbs"])

    @follow_leader(idempotent=True)
    def allowed_verbs(self, job: JobInfo) -> list[str]:
        """The operator verbs this job's state allows (requeue, release, rewind, restart,
        skip-step, accept-step-set, cancel): the rule the verbs themselves check
        (pgqueue.job_verbs), which the dashboard's job page offers and `jobs show` lists."""
        with self.connection() as conn:
            row = run.fetch_one(conn, "job_verbs", {
                "state": job.state, "reason": job.state_reason,
                "step_job": job.checkpoint.step_set_hash is not None})
        return [] if row is None else list(row["verbs"])

    @follow_leader(idempotent=True)
    def step_list(self, step_set_hash: str) -> list[dict[str, Any]] | None:
        """The recorded step list behind a step-set hash."""
        with self.connection() as conn:
            row = run.fetch_one(conn, "step_set_by_hash", {"hash": step_set_hash})
        return None if row is None else list(row["steps"])

    @follow_leader(idempotent=True)
    def workers(self) -> list[WorkerInfo]:
        """Registered worker processes and how many leases each holds."""
        with self.connection() as conn:
            return [WorkerInfo.from_row(r) for r in run.fetch(conn, "list_workers")]

    @follow_leader(idempotent=True)
    def worker_kinds(self, *, stale_after: float = observe.STALE_WORKER_SECONDS
                     ) -> list[dict[str, Any]]:
        """The kinds the live workers handle (a heartbeat within `stale_after` seconds), per
        stream they work on: stream, kind, handler (its settings, as the first of them
        registered them) and workers (id, node, host, pid of each)."""
        with self.connection() as conn:
            return run.fetch(conn, "worker_kinds", {"stale_after": stale_after})

    @follow_leader(idempotent=True)
    def replicas(self, *, stale_after: float = 86400.0) -> list[dict[str, Any]]:
        """The replicas registered with this leader: name, method, applied_seq, lag_ops,
        lag_seconds, active, seen_at, and stale (not seen for `stale_after` seconds)."""
        validate.seconds(stale_after, "stale_after", positive=True)
        with self.connection() as conn:
            return run.fetch(conn, "replica_status", {"stale_after": stale_after, "wait": 0.0})

    @follow_leader(idempotent=True)
    def kinds(self, *, all_streams: bool = False) -> list[KindConfig]:
        """The kinds with settings of this stream (or every stream), by stream and kind."""
        with self.connection() as conn:
            return kinds.list_(conn, None if all_streams else self.stream)

    @follow_leader(idempotent=True)
    def schedules(self, *, all_streams: bool = False) -> list[Schedule]:
        """This stream's (or every stream's) schedules, by stream and name."""
        with self.connection() as conn:
            return schedule.list_(conn, None if all_streams else self.stream)

    @follow_leader(idempotent=True)
    def schedule(self, name: str) -> Schedule | None:
        """One schedule of this stream, or None."""
        with self.connection() as conn:
            return schedule.get(conn, self.stream, name)

    @follow_leader(idempotent=True)
    def job_preview(self, job_id: int, *,
                    preview_bytes: int = observe.PREVIEW_BYTES) -> JobPreview | None:
        """A job of any stream in any set with its payload cut to the first `preview_bytes`
        bytes by the database (its whole size beside it); None when acked or unknown."""
        with self.connection() as conn:
            return observe.job_preview(conn, job_id, preview_bytes)

    @follow_leader(idempotent=True)
    def jobs_preview(self, *, state: str | None = None, all_streams: bool = False,
                     limit: int = 100, preview_bytes: int = observe.PREVIEW_BYTES,
                     kind: str | None = None) -> list[JobPreview]:
        """`jobs`, each payload cut to its first `preview_bytes` bytes by the database."""
        with self.connection() as conn:
            return observe.jobs_preview(conn, stream=None if all_streams else self.stream,
                                        state=state, limit=limit, preview_bytes=preview_bytes,
                                        kind=kind)

    @follow_leader(idempotent=True)
    def dead_letters_preview(self, limit: int = 100, *,
                             preview_bytes: int = observe.PREVIEW_BYTES
                             ) -> list[JobPreview]:
        """`dead_letters`, each payload cut to its first `preview_bytes` bytes."""
        with self.connection() as conn:
            return observe.dead_letters_preview(conn, self.stream, limit, preview_bytes)

    @follow_leader(idempotent=True)
    def op_log_preview(self, *, limit: int = 20, job_id: int | None = None,
                       all_streams: bool = False,
                       preview_bytes: int = observe.PREVIEW_BYTES) -> list[OpPreview]:
        """`op_log` (newest first), any payload in a body cut to its first `preview_bytes`."""
        with self.connection() as conn:
            return observe.op_log_preview(conn, limit=limit, job_id=job_id,
                                          stream=None if all_streams else self.stream,
                                          preview_bytes=preview_bytes)

    @follow_leader(idempotent=True)
    def schedule_streams(self, name: str) -> list[str]:
        """Every stream (not only this one) holding a schedule called `name`, sorted."""
        with self.connection() as conn:
            return schedule.streams_named(conn, name)
