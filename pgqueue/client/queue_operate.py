# DO NOT EDIT: generated from pgqueue/client/queue_operate_async.py by tools/generate.py; edit that file.
"""The Queue's operator calls: dead letters requeued, deploy checks, operator verbs on one job
or many, stream and kind settings, leases given back, and schedules.

A mixin of AsyncQueue (client/queue_async.py) over its reading calls (queue_read_async.py),
which provides the stream, the pooled connections and failover; Queue's (queue_operate.py)
is generated from this source.
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from pgqueue import validate
from pgqueue.client import deadletter, deploy, kinds, operate, schedule
from pgqueue.client.queue_read import QueueReads
from pgqueue.cron import Schedule, TickResult
from pgqueue.db import run
from pgqueue.db.failover import follow_leader
from pgqueue.errors import LeaseLost
from pgqueue.models import (
    UNSET,
    BulkResult,
    Lease,
    Unset,
)


class QueueOperations(QueueReads):
    """The queue's operator-side calls, over its reading calls."""

    @follow_leader(idempotent=False)
    def requeue_dead_letter(self, job_id: int) -> None:
        """Return a dead letter to pending with attempts reset."""
        with self.connection() as conn:
            deadletter.requeue(conn, job_id)

    @follow_leader(idempotent=True)
    def deploy_streams(self, app: deploy.CompatRule) -> list[str]:
        """The streams holding jobs in flight of a kind `app` handles (where its workers run):
        what `pgqueue deploy-check` checks unless told which."""
        with self.connection() as conn:
            return deploy.served_streams(conn, app)

    @follow_leader(idempotent=True)
    def deploy_check(self, app: deploy.CompatRule, *,
                     streams: Sequence[str] | None = None) -> list[deploy.Parked]:
        """The jobs of `streams` (or every stream) that a worker running `app` would park as
        undecodable, with the worker's reason and detail, by id: run it before a deploy."""
        with self.connection() as conn:
            return deploy.check(conn, app, streams=streams)

    @follow_leader(idempotent=True)
    def configure_stream(self, *, retry_base: float | None = None, retry_cap: float | None = None,
                         quarantine_after: int | None = None,
                         max_payload_bytes: int | None = None) -> None:
        """Set this stream's retry backoff (seconds), crash quarantine threshold and payload
        limit (bytes, up to 64 MiB; 16 MiB unless set). None leaves a setting as it is."""
        with self.connection() as conn:
            operate.configure_stream(conn, self.stream, retry_base=retry_base,
                                     retry_cap=retry_cap, quarantine_after=quarantine_after,
                                     max_payload_bytes=max_payload_bytes)

    @follow_leader(idempotent=False)
    def return_lease(self, lease_: Lease) -> None:
        """Give a lease back without costing an attempt (checkpoint kept): leased -> pending.
        Raises LeaseLost when the lease is no longer current."""
        with self.connection() as conn:
            rows = run.fetch(conn, "return_leases", {
                "stream": lease_.stream, "job_ids": [lease_.job_id],
                "lease_ids": [lease_.lease_id]})
        if not rows:
            raise LeaseLost(f"lease {lease_.lease_id} of job {lease_.job_id} is no longer current")

    @follow_leader(idempotent=False)
    def release(self, job_id: int, *, reset_crashes: bool = False) -> None:
        """Let a quarantined or undecodable job run again."""
        with self.connection() as conn:
            operate.release(conn, job_id, reset_crashes=reset_crashes)

    @follow_leader(idempotent=False)
    def rewind(self, job_id: int, to_step: str) -> None:
        """Make a step job's next run start at `to_step`."""
        with self.connection() as conn:
            operate.rewind(conn, job_id, to_step)

    @follow_leader(idempotent=False)
    def restart(self, job_id: int) -> None:
        """Drop a job's checkpoint: it runs from step one."""
        with self.connection() as conn:
            operate.restart(conn, job_id)

    @follow_leader(idempotent=False)
    def skip_step(self, job_id: int) -> str:
        """Count a job's step in progress as done without running it; returns its name."""
        with self.connection() as conn:
            return operate.skip_step(conn, job_id)

    @follow_leader(idempotent=False)
    def accept_step_set(self, job_id: int) -> None:
        """Accept the new step list of a job parked as step_set_changed."""
        with self.connection() as conn:
            operate.accept_step_set(conn, job_id)

    @follow_leader(idempotent=False)
    def cancel(self, job_id: int) -> str:
        """Cancel a job. One that is not leased (pending, scheduled, parked or dead) is removed
        for good: returns "cancelled". One a worker runs is asked to stop: returns "requested";
        its handler sees `ctx.cancelled` and gets `pgqueue.Cancelled` at its next
        `ctx.advance()` or step boundary (an async one is cancelled at once), and the job
        ends as cancelled, never retried. A handler that finishes first is acked (the
        history's `cancel` says "too late"). JobNotFound when there is no such job."""
        with self.connection() as conn:
            return operate.cancel(conn, job_id)

    @follow_leader(idempotent=False)
    def act(self, job_id: int, verb: str, *, to_step: str | None = None) -> None:
        """Run an operator verb by name (pgqueue.models.VERBS: requeue, release, rewind with
        `to_step`, restart, skip-step, accept-step-set, cancel) on one job of any stream.
        JobNotFound: no such job; InvalidState or DedupConflict: the verb does not fit it."""
        with self.connection() as conn:
            operate.act(conn, verb, job_id, to_step=to_step)

    @follow_leader(idempotent=False)
    def act_on_jobs(self, verb: str, *, stream: str | None = None, state: str | None = None,
                    kind: str | None = None, through: int | None = None,
                    to_step: str | None = None) -> BulkResult:
        """Run an operator verb on every job of a filter (any stream, or `stream`) with an id
        of at most `through` (count_jobs' `newest`, so jobs enqueued after the count shown
        are left), each through the same transition as `act`, with its op."""
        with self.connection() as conn:
            return operate.act_on_jobs(conn, verb, stream=stream, state=state, kind=kind,
                                       through=through, to_step=to_step)

    @follow_leader(idempotent=True)
    def configure_kind(self, kind: str, *,
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
        with self.connection() as conn:
            kinds.configure(conn, self.stream, kind, settings)

    @follow_leader(idempotent=True)
    def upsert_schedule(self, name: str, cron: str, payload: Any = b"{}", *, kind: str | None = None,
                        timezone: str = "UTC", priority: int = 0, max_attempts: int = 25,
                        catch_up: str = "one", misfire_grace: float = 60.0,
                        paused: bool = False) -> Schedule:
        """Create or change a cron schedule of this stream (names are unique per stream). Each
        tick's job has `payload` (by default `{}`, an empty JSON object: `job.json()` works).
        catch_up after downtime: "none" skips missed ticks, "one" fires one job for them
        (the latest), "all" fires each, oldest first, up to 100 per pass."""
        with self.connection() as conn:
            return schedule.upsert(conn, self.stream, name, cron, payload, kind=kind,
                                   timezone=timezone, priority=priority,
                                   max_attempts=max_attempts, catch_up=catch_up,
                                   misfire_grace=misfire_grace, paused=paused)

    @follow_leader(idempotent=False)
    def pause_schedule(self, name: str) -> Schedule:
        """Stop firing a schedule (JobNotFound when there is none)."""
        with self.connection() as conn:
            return schedule.set_paused(conn, self.stream, name, True)

    @follow_leader(idempotent=False)
    def resume_schedule(self, name: str) -> Schedule:
        """Fire again from the next tick after now (ticks while paused do not fire)."""
        with self.connection() as conn:
            return schedule.set_paused(conn, self.stream, name, False)

    @follow_leader(idempotent=False)
    def remove_schedule(self, name: str) -> None:
        """Delete a schedule (JobNotFound when there is none)."""
        with self.connection() as conn:
            schedule.remove(conn, self.stream, name)

    @follow_leader(idempotent=True)
    def tick_schedules(self, *, now: dt.datetime | None = None) -> TickResult:
        """Run one tick pass over every stream's due schedules (maintenance does this). `now`
        runs it for another time than the database's: the schema owner's alone (it pins the
        clock of the transitions it calls; PermissionDenied for any other role)."""
        with self.connection() as conn:
            return schedule.tick(conn, now=now)
