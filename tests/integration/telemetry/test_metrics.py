"""Prometheus metrics against a real database: the job counts the writes keep (checked against
a count of the tables after random transitions), the database's gauges and the worker's
counters and histograms, scraped over HTTP and parsed with prometheus_client's parser."""
from __future__ import annotations

import datetime as dt
import json
import re
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

import pgqueue
from pgqueue.db import connection, queries
from pgqueue.telemetry.metrics import MetricsServer, database_registry
from tests.dbhelp import fold_counts, force_reclaim, ring_bytes, wait_for
from tests.integration.runtime.test_worker import running
from tests.pgbed import Bed

pytestmark = pytest.mark.layouts("single", "citus", "stock")


@contextmanager
def serving(registry: CollectorRegistry) -> Iterator[str]:
    server = MetricsServer(registry, host="127.0.0.1", port=0).start()
    try:
        yield f"http://127.0.0.1:{server.port}/metrics"
    finally:
        server.stop()


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """{(sample name, sorted labels): value} of one scrape."""
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 (http://127.0.0.1)
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str,
          **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def true_counts(dsn: str) -> dict[tuple[str, str], int]:
    """Jobs by (stream, state), counted in the tables (Queue.stats): what the kept counts
    must equal."""
    with pgqueue.Queue(dsn) as q:
        return {(s.stream, s.state): s.count for s in q.stats()}


def kept_counts(q: pgqueue.Queue) -> dict[tuple[str, str], int]:
    return {k: n for k, n in q.gauges().jobs.items() if n}


# -- the counts the writes keep ------------------------------------------------------------------

TRANSITIONS = ["enqueue", "enqueue_later", "enqueue_batch", "lease", "ack", "nack", "nack_dead",
               "cancel", "reclaim", "requeue_dead", "undecodable", "release", "return"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.sampled_from(TRANSITIONS), min_size=1, max_size=25),
       streams=st.lists(st.sampled_from(["a", "b"]), min_size=25, max_size=25))
def test_kept_counts_equal_the_tables_after_any_transitions(
        dsn: str, steps: list[str], streams: list[str]) -> None:
    queues = {s: pgqueue.Queue(dsn, stream=s) for s in ("a", "b")}
    try:
        for step, stream in zip(steps, streams, strict=False):
            q = queues[stream]
            apply(q, dsn, step)
            assert kept_counts(q) == true_counts(dsn), (step, stream)
    finally:
        for q in queues.values():
            q.close()


def apply(q: pgqueue.Queue, dsn: str, step: str) -> None:
    """One transition of `step`'s kind, when the queue holds a job it applies to."""
    if step == "enqueue":
        q.enqueue(b"x")
    elif step == "enqueue_later":
        q.enqueue(b"x", delay=3600)
    elif step == "enqueue_batch":
        q.enqueue_many([pgqueue.NewJob(b"x"), pgqueue.NewJob(b"y", delay=3600)])
    elif step == "lease":
        q.lease(limit=2)
    elif step in ("ack", "nack", "nack_dead", "return", "undecodable"):
        leased = [j for j in q.jobs(state="leased")]
        if not leased:
            return
        job = leased[0]
        lease = pgqueue.Lease(lease_id=job.lease_id or 0, job_id=job.job_id, stream=job.stream,
                              kind=job.kind, payload=b"", priority=0, attempts=job.attempts,
                              max_attempts=job.max_attempts, enqueued_at=dt.datetime.now(),
                              expires_at=dt.datetime.now(), checkpoint=pgqueue.Checkpoint())
        if step == "ack":
            q.ack(lease)
        elif step == "nack":
            q.nack(lease, error="e", retry_in=0)
        elif step == "nack_dead":
            with connection.connect(dsn) as conn:
                conn.execute("SELECT pgqueue.nack(%s, %s, 'e', 0, 1, p_stream => %s)",
                             (job.job_id, job.lease_id, job.stream))
        elif step == "return":
            q.return_lease(lease)
        else:
            with connection.connect(dsn) as conn:
                conn.execute("SELECT pgqueue.mark_undecodable(%s, %s, 'unknown_kind', '{}', "
                             "p_stream => %s)", (job.job_id, job.lease_id, job.stream))
    elif step == "cancel":
        pending = q.jobs(state="pending")
        if pending:
            q.cancel(pending[0].job_id)
    elif step == "reclaim":
        force_reclaim(dsn)
    elif step == "requeue_dead":
        dead = q.dead_letters()
        if dead:
            q.requeue_dead_letter(dead[0].job_id)
    elif step == "release":
        parked = q.jobs(state="undecodable") + q.jobs(state="quarantined")
        if parked:
            q.release(parked[0].job_id)


def test_folding_moves_the_deltas_into_the_counts_and_keeps_them(q: pgqueue.Queue, dsn: str) -> None:
    """Deltas of past seconds are folded into job_count and their partitions truncated
    (nothing left for vacuum); the counts are exact before, during and after."""
    q.enqueue_many([pgqueue.NewJob(b"x") for _ in range(30)])
    q.lease(limit=10)
    expected = {("default", "pending"): 20, ("default", "leased"): 10}
    with connection.connect(dsn) as conn:
        deltas = conn.execute("SELECT count(*) FROM pgqueue.job_count_delta").fetchone()
        assert deltas is not None and deltas[0] > 0
        assert kept_counts(q) == expected == true_counts(dsn)  # (folds what it may first)

        def folded() -> bool:
            fold_counts(conn)  # (on Citus: on each shard group's node)
            assert kept_counts(q) == expected  # at every step
            return conn.execute("SELECT count(*) FROM pgqueue.job_count_delta").fetchone() == (0,)

        wait_for(folded, 30, "the deltas folded once their seconds were past", interval=0.2)
        # truncated, not deleted: no dead row left behind
        assert ring_bytes(conn, "pgqueue.job_count_delta") == 0
        kept = conn.execute("SELECT stream, state, n FROM pgqueue.job_count WHERE n <> 0 "
                            "ORDER BY state").fetchall()
    assert kept == [("default", "leased", 10), ("default", "pending", 20)]
    assert kept_counts(q) == expected == true_counts(dsn)


def _job_scans(plan: object) -> list[str]:
    """The relations of job (or, on Citus, a shard of it: job_102008) that a plan reads whole,
    at any depth (a Citus plan holds each node's plan inside its own)."""
    found: list[str] = []
    if isinstance(plan, dict):
        name = plan.get("Relation Name")
        if plan.get("Node Type") == "Seq Scan" and isinstance(name, str) \
                and re.fullmatch(r"job(_\d+)?", name):
            found.append(name)
        for value in plan.values():
            found += _job_scans(value)
    elif isinstance(plan, list):
        for value in plan:
            found += _job_scans(value)
    return found


def test_the_gauge_queries_read_no_job_table_scan(q: pgqueue.Queue, dsn: str, layout: str) -> None:
    """Counts from job_count (and its deltas), the oldest ready job by one index probe (on
    Citus, a probe per stream on its node): a scrape costs the same with 20,000 jobs as with 20."""
    for _ in range(20):
        q.enqueue_many([pgqueue.NewJob(b"x") for _ in range(1000)])
    oldest = [("gauge_oldest_pending_of", {"stream": "default"})] if layout == "citus" else [
        ("gauge_oldest_pending", {"streams": ["default", "other"]}), ("gauge_op_log", {})]
    with connection.connect(dsn) as conn:
        conn.execute("ANALYZE pgqueue.job")
        for name, params in [("gauge_job_counts", {}), *oldest]:
            sql = queries.get(name).sql
            row = conn.execute(f"EXPLAIN (FORMAT JSON) {sql}", params).fetchone()
            assert row is not None
            plan = row[0]
            assert "Index" in json.dumps(plan) or name == "gauge_job_counts", (name, plan)
            assert _job_scans(plan) == [], (name, plan)


# -- the database's gauges over HTTP -------------------------------------------------------------


def test_metrics_serve_reports_the_database(q: pgqueue.Queue, dsn: str) -> None:
    ids = q.enqueue_many([pgqueue.NewJob(b"x") for _ in range(5)])
    q.enqueue(b"later", delay=3600)
    q.lease(limit=2)
    with connection.connect(dsn) as conn:  # the oldest ready job became due 90 s ago
        conn.execute("UPDATE pgqueue.job SET not_before = now() - interval '90 seconds' "
                     "WHERE id = %s", (ids[-1],))
        conn.execute("INSERT INTO pgqueue.worker (node, host, pid, streams, concurrency) "
                     "VALUES (0, 'h', 1, ARRAY['default'], 4)")
    q.upsert_schedule("nightly", "0 3 * * *", b"{}")
    with pgqueue.Queue(dsn, stream="quiet") as quiet:
        quiet.upsert_schedule("paused-one", "0 4 * * *", b"{}")
        quiet.pause_schedule("paused-one")
    with serving(database_registry(dsn)) as url:
        samples = scrape(url)
    assert value(samples, "pgqueue_database_up") == 1
    expected = {"pending": 3, "scheduled": 1, "leased": 2, "dead": 0, "quarantined": 0,
                "undecodable": 0}
    for state, n in expected.items():  # every state, zeros included
        assert value(samples, "pgqueue_jobs", stream="default", state=state) == n, state
        assert value(samples, "pgqueue_jobs", stream="quiet", state=state) == 0, state
    age = value(samples, "pgqueue_oldest_pending_age_seconds", stream="default")
    assert age is not None and 90 <= age < 200
    assert value(samples, "pgqueue_oldest_pending_age_seconds", stream="quiet") == 0
    assert value(samples, "pgqueue_op_log_ops") == sum(
        1 for _ in q.op_log(limit=1000, all_streams=True))
    assert value(samples, "pgqueue_schedules", stream="default", paused="false") == 1
    assert value(samples, "pgqueue_schedules", stream="quiet", paused="true") == 1
    assert value(samples, "pgqueue_workers", state="live") == 1
    assert value(samples, "pgqueue_workers", state="stale") == 0


def test_a_scrape_that_cannot_reach_the_database_says_so(bed: Bed) -> None:
    dsn = bed.new_database()
    with connection.connect(dsn) as conn:
        name = conn.info.dbname
    with serving(database_registry(dsn)) as url:
        assert value(scrape(url), "pgqueue_database_up") == 1
        with psycopg.connect(bed.server_dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        samples = scrape(url)
    assert value(samples, "pgqueue_database_up") == 0
    assert not any(name.startswith("pgqueue_jobs") for name, _ in samples)


# -- a worker's own ------------------------------------------------------------------------------


def test_a_workers_metrics_count_what_became_of_its_jobs(dsn: str, q: pgqueue.Queue) -> None:
    q.configure_stream(retry_base=0.01)
    app = pgqueue.App()

    @app.job("ok")
    def ok(job: pgqueue.JobContext) -> None:
        pass

    @app.job("flaky")
    def flaky(job: pgqueue.JobContext) -> None:
        if job.attempts == 0:
            raise RuntimeError("once")

    @app.job("doomed", max_attempts=1)
    def doomed(job: pgqueue.JobContext) -> None:
        raise RuntimeError("always")

    ids = [q.enqueue(b"x", kind="ok") for _ in range(3)]
    ids += [q.enqueue(b"x", kind="flaky"), q.enqueue(b"x", kind="doomed"),
            q.enqueue(b"x", kind="unknown")]
    # another worker's lease that expires at once: this worker's maintenance reclaims it
    (stray,) = q.lease(visibility_timeout=0.2)
    assert stray.job_id == ids[0]
    with running(app, dsn, metrics_port=0, maintenance_interval=0.2) as worker:
        address = worker.metrics_address
        assert address is not None
        url = f"http://{address[0]}:{address[1]}/metrics"
        wait_for(lambda: all((info := q.job(j)) is None or info.state in ("dead", "undecodable")
                             for j in ids), 20, "every job to be settled")

        def counted() -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
            # a counter moves just after its job's row does (the ack commits first, the
            # maintenance pass reports its reclaim when it ends): wait for all seven, and
            # the reclaim, to be counted
            found = scrape(url)
            total = sum(v for (name, _), v in found.items() if name == "pgqueue_jobs_finished_total")
            reclaimed = value(found, "pgqueue_leases_reclaimed_total", stream="default")
            return found if total >= 7 and (reclaimed or 0) >= 1 else None

        samples = wait_for(counted, 20, "every job and the reclaim to be counted")
    finished = {(dict(labels)["kind"], dict(labels)["outcome"]): v
                for (name, labels), v in samples.items()
                if name == "pgqueue_jobs_finished_total"}
    assert finished == {("ok", "acked"): 3, ("flaky", "retried"): 1, ("flaky", "acked"): 1,
                        ("doomed", "dead"): 1, ("<unknown>", "undecodable"): 1}  # no handler
    assert value(samples, "pgqueue_job_duration_seconds_count", stream="default", kind="ok") == 3
    assert value(samples, "pgqueue_job_wait_seconds_count", stream="default", kind="flaky") == 2
    assert value(samples, "pgqueue_leases_reclaimed_total", stream="default") == 1
    assert value(samples, "pgqueue_leases_held", stream="default") == 0


def test_leases_held_is_zero_for_every_stream_served_while_nothing_is_held(dsn: str) -> None:
    app = pgqueue.App()

    @app.job("ok")
    def ok(job: pgqueue.JobContext) -> None:
        pass

    with running(app, dsn, metrics_port=0, streams=["a", "b"]) as worker:
        address = worker.metrics_address
        assert address is not None
        samples = scrape(f"http://{address[0]}:{address[1]}/metrics")
    assert value(samples, "pgqueue_leases_held", stream="a") == 0
    assert value(samples, "pgqueue_leases_held", stream="b") == 0
    assert value(samples, "pgqueue_leases_held", stream="default") is None


def test_metrics_settings_are_checked(dsn: str) -> None:
    app = pgqueue.App()
    with pytest.raises(ValueError, match="metrics_port"):
        pgqueue.Worker(app, dsn, metrics_port=70000)
    with pytest.raises(TypeError, match="metrics_host"):
        pgqueue.Worker(app, dsn, metrics_port=0, metrics_host="")
    assert pgqueue.Worker(app, dsn).metrics is None


def test_a_metrics_port_in_use_stops_the_worker_with_an_error_naming_it(dsn: str) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        worker = pgqueue.Worker(pgqueue.App(), dsn, metrics_port=port, grace_period=0)
        with pytest.raises(ValueError, match=rf"metrics_port: cannot listen on 127\.0\.0\.1:{port}"):
            worker.run()
    with pgqueue.Queue(dsn) as q:
        assert q.workers() == []  # the drain ran: it deregistered


@pytest.mark.layouts("single")
def test_a_worker_labels_only_its_apps_kinds_and_shows_no_control_character(
        dsn: str, q: pgqueue.Queue) -> None:
    """A producer enqueuing hundreds of kinds (some with ESC and BEL in them) gives the
    worker's metrics one series for all the kinds it has no handler for, not one each."""
    app = pgqueue.App()

    @app.job("ok")
    def ok(job: pgqueue.JobContext) -> None:
        pass

    q.enqueue_many([pgqueue.NewJob(b"x", kind=f"random-{n}\x1b[31m\x07") for n in range(60)]
                   + [pgqueue.NewJob(b"y", kind="ok") for _ in range(3)])
    with running(app, dsn, metrics_port=0) as worker:
        address = worker.metrics_address
        assert address is not None
        wait_for(lambda: not any(s.count for s in q.stats() if s.state in ("pending", "leased")),
                 20, "every job to be settled")
        with urllib.request.urlopen(f"http://{address[0]}:{address[1]}/metrics",
                                    timeout=10) as response:
            text = response.read().decode()
    kinds = {dict(labels)["kind"] for (name, labels) in scrape_text(text)
             if name == "pgqueue_jobs_finished_total"}
    assert kinds == {"ok", "<unknown>"}, kinds
    assert "\x1b" not in text and "\x07" not in text


def scrape_text(text: str) -> list[tuple[str, tuple[tuple[str, str], ...]]]:
    return [(s.name, tuple(sorted(s.labels.items())))
            for family in text_string_to_metric_families(text) for s in family.samples]


@pytest.mark.layouts("single")
def test_the_database_metrics_label_at_most_max_streams_and_sum_the_rest(
        dsn: str, q: pgqueue.Queue) -> None:
    from pgqueue.telemetry import labels

    for n in range(labels.MAX_STREAMS + 20):
        with q.for_stream(f"s{n:03d}") as other:
            other.enqueue_many([pgqueue.NewJob(b"x") for _ in range(1 + (n < 10))])
    with serving(database_registry(dsn)) as url:
        samples = scrape(url)
    pending = {dict(labels_)["stream"]: v for (name, labels_), v in samples.items()
               if name == "pgqueue_jobs" and dict(labels_)["state"] == "pending"}
    assert len(pending) == labels.MAX_STREAMS + 1 and labels.OTHER_STREAMS in pending
    assert all(pending[f"s{n:03d}"] == 2 for n in range(10))  # the biggest kept by name
    assert sum(pending.values()) == 10 * 2 + labels.MAX_STREAMS + 10
