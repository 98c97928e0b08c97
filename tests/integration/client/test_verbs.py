"""One rule for which operator verbs a job allows (pgqueue.job_verbs, Queue.allowed_verbs):
for a job in each state, every verb the rule allows succeeds and every other one is refused,
each tried on a job of its own, so what the dashboard's job page offers and `jobs show`
lists is exactly what the verbs do."""
from __future__ import annotations

from collections.abc import Callable

import pytest

import pgqueue
from pgqueue.models import VERBS
from tests.integration.dashboard.dashboard_help import (
    H1,
    dead_job,
    leased_job,
    quarantined_job,
    undecodable_job,
)

pytestmark = [pytest.mark.layouts("single", "citus"),
              pytest.mark.flavours("sync", "async")]


def _pending_step_job(q: pgqueue.Queue, dsn: str) -> int:
    """A pending step job with a recorded step list (a, b): it ran step a, then its lease was
    given back."""
    undecodable_job(q, dsn)  # registers the step sets (a, b) and (a, x, b)
    job_id = q.enqueue(b"steps", kind="etl", priority=255)
    (held,) = q.lease(1)
    q.renew(held, checkpoint=pgqueue.Checkpoint(last_completed_step="a", cursor_step="b",
                                                 step_set_hash=H1))
    q.return_lease(held)
    return job_id


JOBS: dict[str, Callable[[pgqueue.Queue, str], int]] = {
    "pending": lambda q, dsn: q.enqueue(b"plain", priority=255),
    "pending step job": _pending_step_job,
    "scheduled": lambda q, dsn: q.enqueue(b"later", delay=3600),
    "leased": lambda q, dsn: leased_job(q),
    "quarantined": quarantined_job,
    "undecodable (step set changed)": lambda q, dsn: undecodable_job(q, dsn),
    "undecodable (unknown kind)": lambda q, dsn: undecodable_job(q, dsn, step_job=False),
    "dead": lambda q, dsn: dead_job(q),
}

EXPECTED = {
    "pending": ["restart", "cancel"],
    "pending step job": ["rewind", "restart", "skip-step", "cancel"],
    "scheduled": ["restart", "cancel"],
    "leased": ["cancel"],
    "quarantined": ["release", "restart", "cancel"],
    "undecodable (step set changed)": ["release", "rewind", "restart", "skip-step",
                                       "accept-step-set", "cancel"],
    "undecodable (unknown kind)": ["release", "restart", "cancel"],
    "dead": ["requeue", "cancel"],
}


@pytest.mark.parametrize("which", list(JOBS))
def test_the_verbs_a_job_allows_are_those_that_succeed_on_it(
        which: str, q: pgqueue.Queue, dsn: str) -> None:
    job_id = JOBS[which](q, dsn)
    info = q.job(job_id) or next(j for j in q.dead_letters() if j.job_id == job_id)
    allowed = q.allowed_verbs(info)
    assert allowed == EXPECTED[which]
    for n, verb in enumerate(VERBS):
        # each verb on a job of its own, in a stream of its own (the helpers lease the
        # stream's first job)
        fresh = JOBS[which](q.for_stream(f"verb-{n}"), dsn)
        to_step = "a" if verb == "rewind" else None
        if verb in allowed:
            q.act(fresh, verb, to_step=to_step)  # succeeds
        else:
            with pytest.raises((pgqueue.InvalidState, pgqueue.JobNotFound)):
                q.act(fresh, verb, to_step=to_step)
