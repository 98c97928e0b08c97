"""The Queue's calls beyond producing and consuming: dead letters, reading jobs and the op log,
operator verbs, stream and kind settings, schedules, and previews for people (the CLI).

A mixin of AsyncQueue (client/queue_async.py), which provides the stream, the pooled connections and
failover; Queue's (queue_operate.py) is generated from this source.
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

from pgqueue import validate
from pgqueue.client import deadletter_async as deadletter
from pgqueue.client import deploy_async as deploy
from pgqueue.client import kinds_async as kinds
from pgqueue.client import observe_async as observe
from pgqueue.client import operate_async as operate
from pgqueue.client import oplog_async as oplog
from pgqueue.client import schedule_async as schedule
from pgqueue.cron import Schedule, TickResult
from pgqueue.db import run_async as run
from pgqueue.db.failover_async import follow_leader
from pgqueue.db.run_async import AsyncConn
from pgqueue.errors import LeaseLost
from pgqueue.models import (
    UNSET,
    BulkResult,
    DeadLetterGroup,
    JobCount,
    JobHistory,
    JobInfo,
    JobPreview,
    JobsPage,
    KindConfig,
    Lease,
    Op,
    OpPreview,
    QueueGauges,
    StreamStats,
    ThroughputMinutes,
    Unset,
)
from pgqueue.validate import no_such_stream


class AsyncQueueOperations:
    """The queue's operator-side calls; the queue supplies `stream`, `connection()` and
    failover."""

    stream: str

    def connection(self) -> AbstractAsyncContextManager[AsyncConn]:
        raise NotImplementedError  # the queue class has it

    async def _move_to_leader(self) -> bool:
        raise NotImplementedError  # the queue class has it

    # -- dead letters and inspection ---------------------------------------------------------

    @follow_leader(idempotent=True)
    async def dead_letters(self, limit: int = 100) -> list[JobInfo]:
        """This stream's dead letters, newest first."""
        async with self.connection() as conn:
            return await deadletter.dead_letters(conn, self.stream, limit)

    @follow_leader(idempotent=False)
    async def requeue_dead_letter(self, job_id: int) -> None:
        """Return a dead letter to pending with attempts reset."""
        async with self.connection() as conn:
            await deadletter.requeue(conn, job_id)

    @follow_leader(idempotent=True)
    async def job(self, job_id: int) -> JobInfo | None:
        """A job of any stream in any set; None when acked or unknown."""
        async with self.connection() as conn:
            return await observe.job(conn, job_id)

    @follow_leader(idempotent=True)
    async def history(self, job_id: int, *,
                      preview_bytes: int | None = None) -> JobHistory | None:
        """A job's state and its ops, oldest first, also after it was acked or cancelled (as
        long as the op log keeps its ops); None when nothing of it is left. With
        `preview_bytes`, payloads in op bodies are cut to their first bytes by the database."""
        async with self.connection() as conn:
            return await observe.history(conn, job_id, preview_bytes=preview_bytes)

    @follow_leader(idempotent=True)
    async def deploy_streams(self, app: deploy.CompatRule) -> list[str]:
        """The streams holding jobs in flight of a kind `app` handles (where its workers run):
        what `pgqueue deploy-check` checks unless told which."""
        async with self.connection() as conn:
            return await deploy.served_streams(conn, app)

    @follow_leader(idempotent=True)
    async def deploy_check(self, app: deploy.CompatRule, *,
                           streams: Sequence[str] | None = None) -> list[deploy.Parked]:
        """The jobs of `streams` (or every stream) that a worker running `app` would park as
        undecodable, with the worker's reason and detail, by id: run it before a deploy."""
        async with self.connection() as conn:
            return await deploy.check(conn, app, streams=streams)

    @follow_leader(idempotent=True)
    async def gauges(self) -> QueueGauges:
        """The database's figures for metrics (jobs by stream and state, oldest ready job,
        op log, schedules, workers, replicas), by a bounded number of cheap queries."""
        async with self.connection() as conn:
            return await observe.gauges(conn)

    @follow_leader(idempotent=True)
    async def jobs(self, *, state: str | None = None, all_streams: bool = False,
                   limit: int = 100, kind: str | None = None) -> list[JobInfo]:
        """Jobs of this stream (or every stream), newest first, optionally in one state and
        of one kind."""
        async with self.connection() as conn:
            return await observe.jobs(conn, stream=None if all_streams else self.stream, state=state,
                                      limit=limit, kind=kind)

    @follow_leader(idempotent=True)
    async def jobs_page(self, *, stream: str | None = None, state: str | None = None,
                        kind: str | None = None, after: int | None = None, limit: int = 50,
                        preview_bytes: int = observe.PREVIEW_BYTES) -> JobsPage:
        """A page of jobs of any stream (or `stream`), state and kind, newest first, with ids
        below `after` (the previous page's `next`), payloads cut to `preview_bytes`: keyset
        paging that costs the same on the thousandth page as on the first."""
        async with self.connection() as conn:
            return await observe.jobs_page(conn, stream=stream, state=state, kind=kind,
                                           after=after, limit=limit, preview_bytes=preview_bytes)

    @follow_leader(idempotent=True)
    async def count_jobs(self, *, stream: str | None = None, state: str | None = None,
                         kind: str | None = None) -> JobCount:
        """How many jobs of any stream (or `stream`), state and kind there are, and the newest
        job id (the bound to give act_on_jobs, so jobs enqueued later are left alone)."""
        async with self.connection() as conn:
            return await observe.count_jobs(conn, stream=stream, state=state, kind=kind)

    @follow_leader(idempotent=True)
    async def throughput(self, *, since: dt.datetime | None = None) -> ThroughputMinutes:
        """Per stream and minute since `since` (None: an hour ago; never further back), jobs
        enqueued, acked, failed and cancelled, counted from the op log, and the database's
        current minute (a caller that keeps the minutes that are over asks again from the
        one before it: an op is stamped when its transaction began)."""
        async with self.connection() as conn:
            return await observe.throughput(conn, since)

    @follow_leader(idempotent=True)
    async def dead_letter_groups(self, *, all_streams: bool = False,
                                 window: int = observe.DEAD_GROUP_WINDOW
                                 ) -> list[DeadLetterGroup]:
        """This stream's (or every stream's) newest `window` dead letters by kind and error
        summary, the biggest groups first (at most observe.DEAD_GROUPS)."""
        async with self.connection() as conn:
            return await observe.dead_letter_groups(
                conn, None if all_streams else self.stream, window=window)

    @follow_leader(idempotent=True)
    async def streams(self) -> list[str]:
        """Every stream the database knows: those that have or had jobs, settings,
        schedules or a live worker (enqueue creates a stream by using it)."""
        async with self.connection() as conn:
            return await observe.known_streams(conn)

    @follow_leader(idempotent=True)
    async def unknown_stream(self, stream: str | None = None) -> str | None:
        """None when `stream` (this queue's by default) is one the database knows; else what
        to tell a user who named it: that it does not exist, and the closest known streams
        (a typo is otherwise a silent empty list, or a worker idle on the wrong stream)."""
        name = self.stream if stream is None else validate.stream(stream)
        known = await self.streams()
        return None if name in known else no_such_stream(name, known)

    @follow_leader(idempotent=True)
    async def stats(self) -> list[StreamStats]:
        """Job counts by stream and state, across the database."""
        async with self.connection() as conn:
            return await observe.stats(conn)

    @follow_leader(idempotent=True)
    async def configure_stream(self, *, retry_base: float | None = None, retry_cap: float | None = None,
                               quarantine_after: int | None = None,
                               max_payload_bytes: int | None = None) -> None:
        """Set this stream's retry backoff (seconds), crash quarantine threshold and payload
        limit (bytes, up to 64 MiB; 16 MiB unless set). None leaves a setting as it is."""
        async with self.connection() as conn:
            await operate.configure_stream(conn, self.stream, retry_base=retry_base,
                                           retry_cap=retry_cap, quarantine_after=quarantine_after,
                                           max_payload_bytes=max_payload_bytes)

    @follow_leader(idempotent=True)
    async def op_log(self, *, limit: int = 20, job_id: int | None = None,
                     all_streams: bool = False) -> list[Op]:
        """The newest ops of this stream (or every stream), newest first."""
        async with self.connection() as conn:
            return await oplog.tail(conn, limit=limit, job_id=job_id,
                                    stream=None if all_streams else self.stream)

    # -- worker-side and operator transitions -------------------------------------------------

    @follow_leader(idempotent=False)
    async def return_lease(self, lease_: Lease) -> None:
        """Give a lease back without costing an attempt (checkpoint kept): leased -> pending.
        Raises LeaseLost when the lease is no longer current."""
        async with self.connection() as conn:
            rows = await run.fetch(conn, "return_leases", {
                "stream": lease_.stream, "job_ids": [lease_.job_id],
                "lease_ids": [lease_.lease_id]})
        if not rows:
            raise LeaseLost(f"lease {lease_.lease_id} of job {lease_.job_id} is no longer current")

    @follow_leader(idempotent=False)
    async def release(self, job_id: int, *, reset_crashes: bool = False) -> None:
        """Let a quarantined or undecodable job run again."""
        async with self.connection() as conn:
            await operate.release(conn, job_id, reset_crashes=reset_crashes)

    @follow_leader(idempotent=False)
    async def rewind(self, job_id: int, to_step: str) -> None:
        """Make a step job's next run start at `to_step`."""
        async with self.connection() as conn:
            await operate.rewind(conn, job_id, to_step)

    @follow_leader(idempotent=False)
    async def restart(self, job_id: int) -> None:
        """Drop a job's checkpoint: it runs from step one."""
        async with self.connection() as conn:
            await operate.restart(conn, job_id)

    @follow_leader(idempotent=False)
    async def skip_step(self, job_id: int) -> str:
        """Count a job's step in progress as done without running it; returns its name."""
        async with self.connection() as conn:
            return await operate.skip_step(conn, job_id)

    @follow_leader(idempotent=False)
    async def accept_step_set(self, job_id: int) -> None:
        """Accept the new step list of a job parked as step_set_changed."""
        async with self.connection() as conn:
            await operate.accept_step_set(conn, job_id)

    @follow_leader(idempotent=False)
    async def cancel(self, job_id: int) -> str:
        """Cancel a job. One that is not leased (pending, scheduled, parked or dead) is removed
        for good: returns "cancelled". One a worker runs is asked to stop: returns "requested";
        its handler sees `ctx.cancelled` and gets `pgqueue.Cancelled` at its next
        `ctx.advance()` or step boundary (an async one is cancelled at once), and the job
        ends as cancelled, never retried. A handler that finishes first is acked (the
        history's `cancel` says "too late"). JobNotFound when there is no such job."""
        async with self.connection() as conn:
            return await operate.cancel(conn, job_id)

    @follow_leader(idempotent=False)
    async def act(self, job_id: int, verb: str, *, to_step: str | None = None) -> None:
        """Run an operator verb by name (pgqueue.models.VERBS: requeue, release, rewind with
        `to_step`, restart, skip-step, accept-step-set, cancel) on one job of any stream.
        JobNotFound: no such job; InvalidState or DedupConflict: the verb does not fit it."""
        async with self.connection() as conn:
            await operate.act(conn, verb, job_id, to_step=to_step)

    @follow_leader(idempotent=False)
    async def act_on_jobs(self, verb: str, *, stream: str | None = None, state: str | None = None,
                          kind: str | None = None, through: int | None = None,
                          to_step: str | None = None) -> BulkResult:
        """Run an operator verb on every job of a filter (any stream, or `stream`) with an id
        of at most `through` (count_jobs' `newest`, so jobs enqueued after the count shown
        are left), each through the same transition as `act`, with its op."""
        async with self.connection() as conn:
            return await operate.act_on_jobs(conn, verb, stream=stream, state=state, kind=kind,
                                             through=through, to_step=to_step)

    @follow_leader(idempotent=True)
    async def state_verbs(self, state: str) -> list[str]:
        """The operator verbs that jobs in `state` allow (pgqueue.verb_states): what a bulk
        action over such jobs may offer (a job's own page asks allowed_verbs)."""
        observe.job_filter(None, state, None)  # one of JOB_STATES, named when not
        async with self.connection() as conn:
            row = await run.fetch_one(conn, "state_verbs", {"state": state})
        return [] if row is None else list(row["verbs"])

    @follow_leader(idempotent=True)
    async def allowed_verbs(self, job: JobInfo) -> list[str]:
        """The operator verbs this job's state allows (requeue, release, rewind, restart,
        skip-step, accept-step-set, cancel): the rule the verbs themselves check
        (pgqueue.job_verbs), which the dashboard's job page offers and `jobs show` lists."""
        async with self.connection() as conn:
            row = await run.fetch_one(conn, "job_verbs", {
                "state": job.state, "reason": job.state_reason,
                "step_job": job.checkpoint.step_set_hash is not None})
        return [] if row is None else list(row["verbs"])

    @follow_leader(idempotent=True)
    async def step_list(self, step_set_hash: str) -> list[dict[str, Any]] | None:
        """The recorded step list behind a step-set hash."""
        async with self.connection() as conn:
            row = await run.fetch_one(conn, "step_set_by_hash", {"hash": step_set_hash})
        return None if row is None else list(row["steps"])

    @follow_leader(idempotent=True)
    async def workers(self) -> list[dict[str, Any]]:
        """Registered worker processes and how many leases each holds."""
        async with self.connection() as conn:
            return await run.fetch(conn, "list_workers")

    @follow_leader(idempotent=True)
    async def worker_kinds(self, *, stale_after: float = observe.STALE_WORKER_SECONDS
                           ) -> list[dict[str, Any]]:
        """The kinds the live workers handle (a heartbeat within `stale_after` seconds), per
        stream they work on: stream, kind, handler (its settings, as the first of them
        registered them) and workers (id, node, host, pid of each)."""
        async with self.connection() as conn:
            return await run.fetch(conn, "worker_kinds", {"stale_after": stale_after})

    @follow_leader(idempotent=True)
    async def replicas(self, *, stale_after: float = 86400.0) -> list[dict[str, Any]]:
        """The replicas registered with this leader: name, method, applied_seq, lag_ops,
        lag_seconds, active, seen_at, and stale (not seen for `stale_after` seconds)."""
        validate.seconds(stale_after, "stale_after", positive=True)
        async with self.connection() as conn:
            return await run.fetch(conn, "replica_status", {"stale_after": stale_after, "wait": 0.0})

    @follow_leader(idempotent=True)
    async def configure_kind(self, kind: str, *,
                             quarantine_after: int | Unset | None = UNSET,
                             max_concurrency: int | Unset | None = UNSET,
                             rate_limit: tuple[int, float] | Unset | None = UNSET,
                             max_per_key: int | Unset | None = UNSET) -> None:
        """Set a kind's settings in this stream: its crash quarantine threshold and the limits
        the lease enforces across every worker. A setting not given is left as it is; None
        clears it. `max_concurrency`: at most N jobs of the kind leased at once;
        `rate_limit=(count, seconds)`: at most count leases starting in any window of seconds;
        `max_per_key`: at most M leased jobs sharing one concurrency_key."""
        settings = validate.kind_settings(quarantine_after=quarantine_after,
                                          max_concurrency=max_concurrency,
                                          rate_limit=rate_limit, max_per_key=max_per_key)
        async with self.connection() as conn:
            await kinds.configure(conn, self.stream, kind, settings)

    @follow_leader(idempotent=True)
    async def kinds(self, *, all_streams: bool = False) -> list[KindConfig]:
        """The kinds with settings of this stream (or every stream), by stream and kind."""
        async with self.connection() as conn:
            return await kinds.list_(conn, None if all_streams else self.stream)

    # -- schedules ---------------------------------------------------------------------------

    @follow_leader(idempotent=True)
    async def upsert_schedule(self, name: str, cron: str, payload: Any = b"{}", *, kind: str | None = None,
                              timezone: str = "UTC", priority: int = 0, max_attempts: int = 25,
                              catch_up: str = "one", misfire_grace: float = 60.0,
                              paused: bool = False) -> Schedule:
        """Create or change a cron schedule of this stream (names are unique per stream). Each
        tick's job has `payload` (by default `{}`, an empty JSON object: `job.json()` works).
        catch_up after downtime: "none" skips missed ticks, "one" fires one job for them
        (the latest), "all" fires each, oldest first, up to 100 per pass."""
        async with self.connection() as conn:
            return await schedule.upsert(conn, self.stream, name, cron, payload, kind=kind,
                                         timezone=timezone, priority=priority,
                                         max_attempts=max_attempts, catch_up=catch_up,
                                         misfire_grace=misfire_grace, paused=paused)

    @follow_leader(idempotent=True)
    async def schedules(self, *, all_streams: bool = False) -> list[Schedule]:
        """This stream's (or every stream's) schedules, by stream and name."""
        async with self.connection() as conn:
            return await schedule.list_(conn, None if all_streams else self.stream)

    @follow_leader(idempotent=True)
    async def schedule(self, name: str) -> Schedule | None:
        """One schedule of this stream, or None."""
        async with self.connection() as conn:
            return await schedule.get(conn, self.stream, name)

    @follow_leader(idempotent=False)
    async def pause_schedule(self, name: str) -> Schedule:
        """Stop firing a schedule (JobNotFound when there is none)."""
        async with self.connection() as conn:
            return await schedule.set_paused(conn, self.stream, name, True)

    @follow_leader(idempotent=False)
    async def resume_schedule(self, name: str) -> Schedule:
        """Fire again from the next tick after now (ticks while paused do not fire)."""
        async with self.connection() as conn:
            return await schedule.set_paused(conn, self.stream, name, False)

    @follow_leader(idempotent=False)
    async def remove_schedule(self, name: str) -> None:
        """Delete a schedule (JobNotFound when there is none)."""
        async with self.connection() as conn:
            await schedule.remove(conn, self.stream, name)

    @follow_leader(idempotent=True)
    async def tick_schedules(self, *, now: dt.datetime | None = None) -> TickResult:
        """Run one tick pass over every stream's due schedules (maintenance does this). `now`
        runs it for another time than the database's: the schema owner's alone (it pins the
        clock of the transitions it calls; PermissionDenied for any other role)."""
        async with self.connection() as conn:
            return await schedule.tick(conn, now=now)

    # -- previews: what a person reads (the CLI) ---------------------------------------------

    @follow_leader(idempotent=True)
    async def job_preview(self, job_id: int, *,
                          preview_bytes: int = observe.PREVIEW_BYTES) -> JobPreview | None:
        """A job of any stream in any set with its payload cut to the first `preview_bytes`
        bytes by the database (its whole size beside it); None when acked or unknown."""
        async with self.connection() as conn:
            return await observe.job_preview(conn, job_id, preview_bytes)

    @follow_leader(idempotent=True)
    async def jobs_preview(self, *, state: str | None = None, all_streams: bool = False,
                           limit: int = 100, preview_bytes: int = observe.PREVIEW_BYTES,
                           kind: str | None = None) -> list[JobPreview]:
        """`jobs`, each payload cut to its first `preview_bytes` bytes by the database."""
        async with self.connection() as conn:
            return await observe.jobs_preview(conn, stream=None if all_streams else self.stream,
                                              state=state, limit=limit, preview_bytes=preview_bytes,
                                              kind=kind)

    @follow_leader(idempotent=True)
    async def dead_letters_preview(self, limit: int = 100, *,
                                   preview_bytes: int = observe.PREVIEW_BYTES
                                   ) -> list[JobPreview]:
        """`dead_letters`, each payload cut to its first `preview_bytes` bytes."""
        async with self.connection() as conn:
            return await observe.dead_letters_preview(conn, self.stream, limit, preview_bytes)

    @follow_leader(idempotent=True)
    async def op_log_preview(self, *, limit: int = 20, job_id: int | None = None,
                             all_streams: bool = False,
                             preview_bytes: int = observe.PREVIEW_BYTES) -> list[OpPreview]:
        """`op_log` (newest first), any payload in a body cut to its first `preview_bytes`."""
        async with self.connection() as conn:
            return await observe.op_log_preview(conn, limit=limit, job_id=job_id,
                                                stream=None if all_streams else self.stream,
                                                preview_bytes=preview_bytes)

    @follow_leader(idempotent=True)
    async def schedule_streams(self, name: str) -> list[str]:
        """Every stream (not only this one) holding a schedule called `name`, sorted."""
        async with self.connection() as conn:
            return await schedule.streams_named(conn, name)
