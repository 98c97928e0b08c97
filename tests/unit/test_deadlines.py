"""The time-limit watchdog (pgqueue/runtime/deadlines.py) on its own: it tells a job at its
deadline, gives up on it a grace period later, skips a deadline a step's end replaced, leaves a
job that ended alone, and keeps its heap bounded however many short jobs had long limits."""
from __future__ import annotations

import datetime as dt
import time

from pgqueue.models import Lease
from pgqueue.runtime.deadlines import PRUNE_AT, Deadlines
from pgqueue.runtime.running import Held
from tests.dbhelp import wait_for


def held(job_id: int = 1) -> Held:
    now = dt.datetime.now(dt.timezone.utc)
    row = (job_id, job_id + 100, "default", "k", b"{}", 0, 0, 25, now, now, True,
           *[None] * 7, now, None, False, None)
    return Held(Lease.from_lease_row(row, 30.0), 30.0)


def test_a_job_is_told_at_its_limit_and_given_up_on_a_grace_period_later() -> None:
    given_up: list[tuple[Held, float]] = []
    deadlines = Deadlines(lambda: 0.2, lambda h, grace: given_up.append((h, grace)))
    job = held()
    began = time.monotonic()
    job.start_limit(0.1, deadlines.arm, None)
    wait_for(lambda: job.timed_out, 5, "the job to be told")
    assert time.monotonic() - began >= 0.1
    assert given_up == []
    wait_for(lambda: given_up, 5, "the watchdog to give up on it")
    assert given_up == [(job, 0.2)]
    assert time.monotonic() - began >= 0.3
    assert str(job.timeout_error()) == "job 1 ran past its time limit of 0.1 s"
    deadlines.stop()


def test_a_step_that_ended_takes_its_limit_with_it_and_an_ended_job_is_left_alone() -> None:
    given_up: list[Held] = []
    deadlines = Deadlines(lambda: 0.05, lambda h, grace: given_up.append(h))
    stepped, ended, quick = held(1), held(2), held(3)
    stepped.start_limit(None, deadlines.arm, None)
    stepped.step_limit("fetch", 0.05)  # ended at once: its deadline no longer holds
    stepped.step_limit(None, None)
    ended.start_limit(0.05, deadlines.arm, None)
    assert ended.time_limit is not None
    ended.time_limit.ended = True
    quick.start_limit(0.1, deadlines.arm, None)  # the one that runs out: a sign the others were seen
    wait_for(lambda: given_up, 5, "the watchdog to give up on the slow job")
    assert given_up == [quick]
    assert not stepped.timed_out and not ended.timed_out
    deadlines.stop()


def test_a_step_with_a_shorter_limit_than_the_job_is_told_naming_the_step() -> None:
    deadlines = Deadlines(lambda: 60.0, lambda h, grace: None)
    job = held()
    job.start_limit(60.0, deadlines.arm, None)
    job.step_limit("fetch", 0.05)
    wait_for(lambda: job.timed_out, 5, "the step's limit")
    assert str(job.timeout_error()) == "job 1 ran past the time limit of its step 'fetch' (0.05 s)"
    deadlines.stop()


def test_the_heap_stays_bounded_when_short_jobs_have_long_limits() -> None:
    deadlines = Deadlines(lambda: 1.0, lambda h, grace: None)
    live = [held(i) for i in range(10)]
    for job in live:
        job.start_limit(3600.0, deadlines.arm, None)
    for i in range(20 * PRUNE_AT):
        job = held(100 + i)
        job.start_limit(3600.0, deadlines.arm, None)
        assert job.time_limit is not None
        job.time_limit.ended = True
    assert len(deadlines) <= 2 * PRUNE_AT
    assert len(deadlines) >= len(live)  # the running jobs' entries are kept
    deadlines.stop()
