"""Limits across real worker processes: three workers of four handler slots each run one
kind at most two at a time (its max_concurrency), and another at most three leases a second
(its rate_limit), whatever else they do; every handler's start and end is recorded by the
database's clock (tests/acceptance/worker_app.py's ledger)."""
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


def test_max_concurrency_holds_across_worker_processes(dsn: str, workers: Workers,
                                                       ledger: Ledger) -> None:
    with pgqueue.Queue(dsn) as q:
        q.configure_kind("quick", max_concurrency=2)
        q.enqueue_many([pgqueue.NewJob(json.dumps({"sleep": 0.3}), kind="quick")
                        for _ in range(12)])
        notes = q.enqueue_many([pgqueue.NewJob(json.dumps({"sleep": 0}), kind="note")
                                for _ in range(20)])
    procs = [workers.start(concurrency=4) for _ in range(3)]
    wait_for(lambda: ledger.count(None, "quick:end") == 12, 60, "every quick job to finish")
    starts = {e.job_id: e.at for e in ledger.entries(step="quick:start")}
    ends = {e.job_id: e.at for e in ledger.entries(step="quick:end")}
    spans = [(starts[j], ends[j]) for j in starts]
    assert _overlap(spans) == 2  # never more than its limit, and the limit was used
    assert len({e.pid for e in ledger.entries(step="quick:start")}) >= 2  # across processes
    assert {e.job_id for e in ledger.entries(step="note")} == set(notes)  # none held back
    first_quick_end = min(ends.values())
    assert sum(1 for e in ledger.entries(step="note") if e.at < first_quick_end) >= 10
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
    with psycopg.connect(dsn) as conn:  # when each lease was granted, by the database's clock
        granted = sorted(r[0] for r in conn.execute(
            "SELECT at FROM pgqueue.op_log WHERE op = 'Lease' AND job_id = ANY(%s)", [ids]))
    assert len(granted) == 9
    window = dt.timedelta(seconds=1)
    assert max(sum(1 for t in granted if s <= t < s + window) for s in granted) <= 3
    assert granted[-1] - granted[0] >= 2 * window - dt.timedelta(milliseconds=100)
    for proc in procs:
        stop(proc)


def _most_in_window(times: list[dt.datetime], window: dt.timedelta) -> int:
    """The most of `times` inside any half-open window of that length."""
    return max(sum(1 for t in times if s <= t < s + window) for s in times)


def test_rate_limited_handlers_start_within_the_rate_when_workers_lease_ahead(
        dsn: str, workers: Workers, ledger: Ledger) -> None:
    """Workers whose handlers are busy lease other jobs ahead (prefetch): a rate-limited kind
    is granted only to a handler free at once, so its handlers' starts, not only its lease
    grants, keep to the rate (a job granted in one window and started in the next would
    bunch with that window's)."""
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
        granted = sorted(r[0] for r in conn.execute(
            "SELECT at FROM pgqueue.op_log WHERE op = 'Lease' AND job_id = ANY(%s)", [ids]))
        ahead = conn.execute("SELECT count(*) FROM pgqueue.op_log WHERE op = 'Lease' "
                             "AND job_id = ANY(%s) AND body ->> 'started' = 'false'",
                             [busy]).fetchone()
    starts = sorted(e.at for e in ledger.entries(step="note"))
    assert len(granted) == len(starts) == 15
    assert ahead is not None and ahead[0] > 0  # the workers did lease the other kind ahead
    assert _most_in_window(granted, dt.timedelta(seconds=1)) <= 3
    # a start follows its grant by the hand-off to a free handler (milliseconds): a window a
    # little shorter than the rate's leaves room for that, never for a bunched window
    assert _most_in_window(starts, dt.timedelta(seconds=0.9)) <= 3
    for proc in procs:
        stop(proc)
