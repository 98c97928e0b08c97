"""Limits across real worker processes: three workers run one kind at most two at a time
(its max_concurrency), and another at most three leases a second
(its rate_limit) by its handlers' starts, also while workers lease other jobs ahead; every
handler's start and end is recorded by the database's clock (tests/acceptance/worker_app.py's
ledger)."""
from __future__ import annotations

import datetime as dt
import json

import psycopg

import pgqueue
from tests.acceptance.test_worker import Ledger, Workers, stop
from tests.dbhelp import wait_for


def _overlap(spans: list[tuple[dt.datetime, dt.datetime]]) -> int:
    """The most spans open at one instant."""
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    most = now = 0
    for _, change in events:
        now += change
        most = max(most, now)
    return most


def _most_in_window(times: list[dt.datetime], window: dt.timedelta) -> int:
    """The most of `times` inside any half-open window of that length."""
    return max(sum(1 for t in times if s <= t < s + window) for s in times)


def test_max_concurrency_holds_across_worker_processes(dsn: str, workers: Workers,
                                                       ledger: Ledger) -> None:
    # one handler slot each: the limit's two at a time must come from two processes (with
    # more slots, the process that ends a quick job leases the next one at once, before the
    # others' next poll, and might run them all); all three wait for work before there is any
    procs = [workers.start(concurrency=1) for _ in range(3)]
    with pgqueue.Queue(dsn) as q:
        q.configure_kind("quick", max_concurrency=2)
        wait_for(lambda: len(q.workers()) == 3, 60, "the three workers to start")
        q.enqueue_many([pgqueue.NewJob(json.dumps({"sleep": 0.8}), kind="quick")
                        for _ in range(12)])
        notes = q.enqueue_many([pgqueue.NewJob(json.dumps({"sleep": 0}), kind="note")
                                for _ in range(20)])
    wait_for(lambda: ledger.count(None, "quick:end") == 12, 60, "every quick job to finish")
    starts = {e.job_id: e.at for e in ledger.entries(step="quick:start")}
    ends = {e.job_id: e.at for e in ledger.entries(step="quick:end")}
    spans = [(starts[j], ends[j]) for j in starts]
    assert _overlap(spans) == 2  # never more than its limit, and the limit was used
    assert len({e.pid for e in ledger.entries(step="quick:start")}) >= 2  # across processes
    assert {e.job_id for e in ledger.entries(step="note")} == set(notes)  # none held back
    # passed over while the quick jobs waited at their limit: held back, they would all run
    # after the last quick job was leased
    last_quick_start = max(starts.values())
    assert sum(1 for e in ledger.entries(step="note") if e.at < last_quick_start) >= 10
    for proc in procs:
        stop(proc)


def test_the_rate_limit_holds_across_worker_processes(dsn: str, workers: Workers,
                                                      ledger: Ledger) -> None:
    with pgqueue.Queue(dsn) as q:
        q.configure_kind("note", rate_limit=(3, 1.0))
        ids = q.enqueue_many([pgqueue.NewJob(json.dumps({"sleep": 0}), kind="note")
                              for _ in range(9)])
    procs = [workers.start(concurrency=4) for _ in range(3)]
    wait_for(lambda: ledger.count(None, "note") == 9, 60, "every note to run")
    starts = sorted(e.at for e in ledger.entries(step="note"))  # the database's clock
    assert {e.job_id for e in ledger.entries(step="note")} == set(ids)
    # a start follows the database's count of it by a hand-off (milliseconds): a window a
    # little shorter than the rate's leaves room for that, never for a fourth start
    assert _most_in_window(starts, dt.timedelta(seconds=0.9)) <= 3
    assert starts[-1] - starts[0] >= 2 * dt.timedelta(seconds=1) - dt.timedelta(milliseconds=100)
    for proc in procs:
        stop(proc)


def test_rate_limited_handlers_start_within_the_rate_when_workers_lease_ahead(
        dsn: str, workers: Workers, ledger: Ledger) -> None:
    """Workers whose handlers are busy lease jobs ahead (prefetch): a rate-limited job leased
    ahead counts in its kind's window when its handler is about to start it (deferred when
    the window is full), so the handlers' starts keep to the rate, not only the grants (a job
    granted in one window and started in the next would bunch with that window's)."""
    with pgqueue.Queue(dsn) as q:
        q.configure_kind("note", rate_limit=(3, 1.0))
        busy = q.enqueue_many([pgqueue.NewJob(json.dumps({"sleep": 0.3}), kind="quick")
                               for _ in range(24)])
        ids = q.enqueue_many([pgqueue.NewJob(json.dumps({"sleep": 0}), kind="note")
                              for _ in range(15)])
    procs = [workers.start(concurrency=2, extra=["--prefetch", "8"]) for _ in range(2)]
    wait_for(lambda: ledger.count(None, "note") == 15 and ledger.count(None, "quick:end") == 24,
             90, "every job to run")
    with psycopg.connect(dsn) as conn:
        ahead = conn.execute("SELECT count(*) FROM pgqueue.op_log WHERE op = 'Lease' "
                             "AND job_id = ANY(%s) AND body ->> 'started' = 'false'",
                             [busy]).fetchone()
    starts = sorted(e.at for e in ledger.entries(step="note"))
    assert sorted(e.job_id for e in ledger.entries(step="note")) == sorted(ids)  # each once
    assert ahead is not None and ahead[0] > 0  # the workers did lease ahead
    assert _most_in_window(starts, dt.timedelta(seconds=0.9)) <= 3
    for proc in procs:
        stop(proc)
