"""A rolling upgrade: the database moves to a newer, backward-compatible revision while real
worker processes of the current release keep leasing, renewing and acking; nothing is lost,
nothing runs twice, no worker logs an error, and a worker started afterwards runs too."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pgqueue
from pgqueue.db import connection, schema
from tests.acceptance.test_worker import Ledger, Workers
from tests.dbhelp import op_counts, wait_for
from tests.integration.db.test_schema import migrations_with_probe

JOBS = 600
LONG_JOBS = 6  # each outlives several renewals, across the upgrade


def leased(q: pgqueue.Queue, job_id: int) -> bool:
    job = q.job(job_id)
    return job is not None and job.state == "leased"


def test_workers_keep_running_while_the_database_upgrades_under_them(
        dsn: str, tmp_path: Path, workers: Workers, ledger: Ledger) -> None:
    location = migrations_with_probe(tmp_path, compatible=True)
    for _ in range(2):
        workers.start(concurrency=4, visibility_timeout=2.0, renew_interval=0.3)
    with pgqueue.Queue(dsn) as q:
        long_ids = [q.enqueue({"sleep": 6.0}, kind="note") for _ in range(LONG_JOBS)]
        wait_for(lambda: ledger.count(None, "note") >= 1, 30, "the workers to start")
        done = threading.Event()

        def produce() -> list[int]:
            ids: list[int] = []
            for i in range(JOBS):
                ids.append(q.enqueue({"sleep": 0.002}, kind="note"))
                if i % 50 == 0:
                    time.sleep(0.05)  # spread the jobs over the upgrade
            done.set()
            return ids

        produced: list[int] = []
        producer = threading.Thread(target=lambda: produced.extend(produce()))
        producer.start()
        wait_for(lambda: ledger.count(None, "note") >= 50, 60, "jobs flowing before the upgrade")
        held = [i for i in long_ids if leased(q, i)]
        assert held, "no long job held across the upgrade"
        schema.upgrade(dsn, "head", location=location)  # under the running workers
        # the long jobs outlive their 2 s visibility timeout only by being renewed
        assert all(leased(q, i) for i in held)
        assert schema.current(dsn) == schema.head(location) != connection.SCHEMA_REVISION
        producer.join(timeout=120)
        assert done.is_set()
        every = long_ids + produced
        wait_for(lambda: op_counts(dsn).get("Ack", 0) >= len(every), 120, "every job acked")

        # a process of this release started on the newer schema runs as well
        late = [q.enqueue({"sleep": 0}, kind="note") for _ in range(20)]
        workers.start(concurrency=2, visibility_timeout=2.0, renew_interval=0.3)
        wait_for(lambda: op_counts(dsn).get("Ack", 0) >= len(every) + len(late), 60,
                 "the late jobs acked")
        counts = op_counts(dsn)
        assert q.stats() == [] and q.dead_letters() == []
    ran = [e.job_id for e in ledger.entries(step="note")]
    assert sorted(ran) == sorted(every + late)  # each job ran exactly once: none lost or twice
    assert counts["Ack"] == len(every) + len(late)
    assert "Reclaim" not in counts and "Nack" not in counts  # no lease expired, nothing failed
    for proc, _ in workers.procs:
        assert proc.poll() is None, "a worker exited"
    logs = workers.logs()
    assert " ERROR " not in logs and "Traceback" not in logs and " WARNING " not in logs, logs
