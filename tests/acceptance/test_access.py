"""Each part of a deployment end to end under the role the README recommends for it: worker
processes as pgqueue_worker (jobs, step jobs, a crash reclaimed by the other's maintenance, a
cron tick), the operator's CLI as pgqueue_operator, `pgqueue metrics serve` and a read-only
dashboard as pgqueue_reader, a dashboard with an admin token as pgqueue_operator; and `pgqueue
db grant`. The login roles are tests/logins.py's."""
from __future__ import annotations

import datetime as dt
import json
import re
import signal
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

from psycopg import sql as pg_sql

import pgqueue
from pgqueue.client import schedule
from pgqueue.db import connection
from tests.acceptance.clihelp import ok, run
from tests.acceptance.test_dashboard_cli import _dashboard, _post
from tests.acceptance.test_metrics_cli import serve_and_scrape
from tests.acceptance.test_worker import Ledger, Workers, stop
from tests.dbhelp import wait_for
from tests.logins import Logins

TOKEN = "access-test-admin-token-0123456789"  # noqa: S105  (a test's token)


def test_workers_run_as_pgqueue_worker(dsn: str, q: pgqueue.Queue, logins: Logins,
                                       ledger: Ledger, tmp_path: Path) -> None:
    workers = Workers(logins.dsn(dsn, "worker"), tmp_path, ledger_dsn=dsn)
    try:
        notes = q.enqueue_many([pgqueue.NewJob(json.dumps({"sleep": 0}), kind="note")
                                for _ in range(5)])
        pipeline = q.enqueue({"items": 400, "sleep": 0.02}, kind="pipeline", schema_version=1)
        with q.connection() as conn:  # a schedule due a minute ago: the next pass fires it
            schedule.upsert(conn, "default", "every", "* * * * *", json.dumps({"sleep": 0}),
                            kind="note", now=dt.datetime.now(dt.timezone.utc)
                            - dt.timedelta(minutes=2))
        first = workers.start(visibility_timeout=1.5, renew_interval=0.3)
        wait_for(lambda: ledger.count(pipeline, "transform") >= 5, 30, "progress in transform")
        first.kill()  # its lease is left to expire
        assert first.wait(timeout=10) == -signal.SIGKILL
        second = workers.start(visibility_timeout=1.5, renew_interval=0.3)
        wait_for(lambda: q.job(pipeline) is None, 60, "the reclaimed step job to finish")
        assert all(q.job(n) is None for n in notes)
        assert ledger.count(pipeline, "upload") == 1
        assert [o.op for o in q.op_log(job_id=pipeline, limit=100)].count("Reclaim") == 1
        fired = [o for o in q.op_log(limit=1000) if o.op == "UpdateScheduleNextRun"]
        assert fired, "the worker's maintenance fired no cron tick"
        assert q.workers()  # it registered itself
        stop(second)
        logs = workers.logs()
        assert "permission denied" not in logs and "PermissionDenied" not in logs, logs
    finally:
        workers.close()


def test_the_operators_cli_as_pgqueue_operator(dsn: str, q: pgqueue.Queue,
                                               logins: Logins) -> None:
    operator, reader = logins.dsn(dsn, "operator"), logins.dsn(dsn, "reader")
    job_id = q.enqueue(b"x", kind="mail")
    ok(operator, "kinds", "set", "mail", "--max-concurrency", "2")
    ok(operator, "schedules", "add", "nightly", "0 3 * * *")
    ok(operator, "schedules", "pause", "nightly")
    ok(operator, "jobs", "cancel", str(job_id))
    assert q.job(job_id) is None
    shown = json.loads(ok(reader, "jobs", "show", str(job_id), "--json").stdout)
    assert shown["history"]["state"] == "cancelled"
    # a reader's CLI is refused an operator's verb, told which role it needs
    other = q.enqueue(b"y")
    refused = run(reader, "jobs", "cancel", str(other))
    assert refused.exit_code == 1
    assert "pgqueue_operator" in refused.stderr and "pgqueue db grant" in refused.stderr
    assert q.job(other) is not None


def test_metrics_serve_as_pgqueue_reader(dsn: str, q: pgqueue.Queue, logins: Logins) -> None:
    q.enqueue_many([pgqueue.NewJob(b"x") for _ in range(3)])
    samples = serve_and_scrape(logins.dsn(dsn, "reader"))
    assert samples[("pgqueue_jobs", (("state", "pending"), ("stream", "default")))] == 3
    assert samples[("pgqueue_database_up", ())] == 1


def _started(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    found = re.search(r"on (http://127\.0\.0\.1:\d+)/", line)
    assert found, line
    return found.group(1)


def test_the_dashboard_as_reader_and_as_operator(dsn: str, q: pgqueue.Queue, logins: Logins,
                                                 tmp_path: Path) -> None:
    job_id = q.enqueue(b"x")
    reader = _dashboard(logins.dsn(dsn, "reader"), "--port", "0")
    try:
        url = _started(reader)
        for page in ("/", "/jobs", f"/jobs/{job_id}", "/schedules", "/workers", "/replicas",
                     "/api/stats"):
            with urllib.request.urlopen(url + page, timeout=10) as response:  # noqa: S310
                assert response.status == 200, page
        assert _post(f"{url}/api/jobs/{job_id}/cancel", TOKEN) == 403  # read-only
    finally:
        reader.send_signal(signal.SIGTERM)
        assert reader.wait(timeout=15) == 0
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    admin = _dashboard(logins.dsn(dsn, "operator"), "--port", "0",
                       "--admin-token-file", str(token_file))
    try:
        url = _started(admin)
        assert _post(f"{url}/api/jobs/{job_id}/cancel", TOKEN) == 200
        assert q.job(job_id) is None
    finally:
        admin.send_signal(signal.SIGTERM)
        assert admin.wait(timeout=15) == 0


def test_db_grant_from_the_cli(dsn: str, bed: Any, logins: Logins) -> None:
    printed = ok(None, "db", "grant", "worker", "--to", 'web"1', "--print").stdout
    assert printed.strip() == 'GRANT "pgqueue_worker" TO "web""1";'
    bad = run(None, "db", "grant", "superuser", "--to", "web", "--print")
    assert bad.exit_code == 2 and "role must be one of" in bad.stderr
    login = logins.names["none"]
    refused = run(logins.dsn(dsn, "none"), "jobs", "list")
    assert refused.exit_code != 0 and "pgqueue_reader" in refused.stderr
    out = ok(dsn, "db", "grant", "reader", "--to", login).stdout
    assert f'GRANT "pgqueue_reader" TO "{login}"' in out
    try:
        ok(logins.dsn(dsn, "none"), "jobs", "list")  # now it reads
    finally:
        with connection.connect(dsn) as conn:
            conn.execute(pg_sql.SQL("REVOKE pgqueue_reader FROM {}").format(
                pg_sql.Identifier(login)))


def test_the_cli_under_the_worker_and_producer_roles(dsn: str, q: pgqueue.Queue,
                                                     logins: Logins) -> None:
    producer, worker = logins.dsn(dsn, "producer"), logins.dsn(dsn, "worker")
    job_id = int(ok(producer, "enqueue", "default", '{"a": 1}', "--kind", "k").stdout)
    assert q.job(job_id) is not None
    refused = run(producer, "maintain", "--once")
    assert refused.exit_code == 1 and "pgqueue_worker" in refused.stderr
    passed = json.loads(ok(worker, "maintain", "--once", "--json").stdout)
    assert passed["leader"] is True
    # the maintenance passes' prune is a worker's; other bounds are an operator's choice
    refused = run(worker, "oplog", "prune", "--keep", "0")
    assert refused.exit_code == 1
    assert "pgqueue_operator" in refused.stderr and "pgqueue db grant" in refused.stderr
    assert q.op_log(limit=5), "the op log is untouched"
    pruned = json.loads(ok(logins.dsn(dsn, "operator"), "oplog", "prune", "--keep", "0",
                           "--json").stdout)
    assert pruned["pruned"] >= 1


def test_a_workers_maintenance_empties_the_ready_partitions_of_past_seconds(
        dsn: str, q: pgqueue.Queue, logins: Logins) -> None:
    """The entries of jobs leased go with their partition once its second is past: truncated
    by a worker role's `maintain --once` (pgqueue.recycle_ready runs as the owner), which
    says how many it emptied."""
    worker = logins.dsn(dsn, "worker")
    q.enqueue_many([pgqueue.NewJob(b"x") for _ in range(50)])
    while batch := q.lease(limit=50):
        q.ack_many(batch)
    emptied: list[int] = []

    def recycled() -> bool:
        out = ok(worker, "maintain", "--once").stdout
        found = re.search(r"emptied (\d+) ready partition\(s\)", out)
        assert found, out
        emptied.append(int(found[1]))
        with connection.connect(dsn) as conn:
            size = conn.execute("SELECT sum(pg_relation_size(inhrelid)) FROM pg_inherits "
                                "WHERE inhparent = 'pgqueue.ready'::regclass").fetchone()
        return size == (0,)  # once the clock moved past the entries' seconds

    wait_for(recycled, 30, "the ready partitions of past seconds emptied", interval=0.2)
    assert sum(emptied) >= 1, emptied


def test_only_the_owner_migrates_and_a_role_is_told_so(dsn: str, logins: Logins) -> None:
    refused = run(logins.dsn(dsn, "operator"), "db", "upgrade")
    assert refused.exit_code == 1, refused.stderr
    assert "only the pgqueue schema's owner" in refused.stderr
    assert "Traceback" not in refused.stderr + refused.stdout


def test_db_upgrade_warns_of_a_schema_others_may_create_in(dsn: str) -> None:
    """Postgres 14's default (every role may CREATE in public, on the owner's search_path):
    a function planted there could run with the owner's rights; `db upgrade` says so."""
    quiet = ok(dsn, "db", "upgrade")
    assert "warning" not in quiet.stderr  # this server's default (Postgres 15 on) is safe
    with connection.connect(dsn) as conn:
        conn.execute("GRANT CREATE ON SCHEMA public TO PUBLIC")
    try:
        warned = ok(dsn, "db", "upgrade")
        assert "other roles may create objects in schema 'public'" in warned.stderr
        assert "REVOKE CREATE ON SCHEMA public FROM PUBLIC" in warned.stderr
    finally:
        with connection.connect(dsn) as conn:
            conn.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
    assert "warning" not in ok(dsn, "db", "upgrade").stderr
