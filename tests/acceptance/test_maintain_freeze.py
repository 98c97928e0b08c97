"""A frozen maintenance runner does not stop reclaim for everyone: SIGSTOP the worker that
holds the election, and another worker reclaims an expired lease within the documented bound
(FROZEN_RUNNER_SECONDS plus an interval); the frozen one carries on when it is continued."""
from __future__ import annotations

import signal
import time

import psycopg

import pgqueue
from pgqueue.maintenance.maintain import FROZEN_RUNNER_SECONDS
from tests.acceptance.test_worker import Workers
from tests.dbhelp import op_counts, wait_for


def election_holder(dsn: str) -> int | None:
    """The backend pid holding the maintenance runners' claim while it is current, if any."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pid FROM pgqueue.maintenance_runner "
                           "WHERE until > clock_timestamp()").fetchone()
    return None if row is None else int(row[0])


def test_a_frozen_maintenance_runner_hands_reclaim_to_another_worker(
        dsn: str, workers: Workers) -> None:
    first = workers.start(maintenance_interval=0.5)
    wait_for(lambda: election_holder(dsn), 30, "the first worker to win the election")
    holder = election_holder(dsn)
    workers.start(maintenance_interval=0.5)
    with pgqueue.Queue(dsn, stream="orphans") as q:  # a stream no worker serves
        job_id = q.enqueue(b"abandoned")
        (lease,) = q.lease(limit=1, visibility_timeout=1.0)  # a lease nobody renews
        assert lease.job_id == job_id
        first.send_signal(signal.SIGSTOP)
        try:
            stopped_at = time.monotonic()
            wait_for(lambda: op_counts(dsn).get("Reclaim", 0) >= 1,
                     FROZEN_RUNNER_SECONDS + 20, "another worker to reclaim the expired lease")
            took = time.monotonic() - stopped_at
            new_holder = election_holder(dsn)
            assert new_holder is not None and new_holder != holder
        finally:
            first.send_signal(signal.SIGCONT)
        job = q.job(job_id)
        assert job is not None and job.state == "pending" and job.attempts == 1
    # the bound: the frozen session's idle timeout, a pass interval, the lease's own second
    assert took < FROZEN_RUNNER_SECONDS + 1.0 + 0.5 + 5.0, took
    # the continued worker finds its session gone (an outage of its own, logged as one: it
    # starts, and ends once the next pass reconnects), reconnects and keeps working
    wait_for(lambda: first.poll() is None and "unreachable (maintenance:" in workers.logs()
             and "the database is back after" in workers.logs(), 30,
             "the continued worker to notice its closed session and reconnect")
    assert first.poll() is None
