"""docker-compose.yml, run without Docker: its services' commands, in its order, against a
server of their own (a leader and a replica database) set up as the postgres image sets up
each server (examples/compose/roles.sql run by the superuser on POSTGRES_DB). Each part
connects as the login role the compose file gives it, and does its job under it: the owner
migrates and grants, the producer enqueues, the worker works it off, the owner's maintenance
fires a cron tick, the read-only dashboard serves and refuses an action, the follower keeps
the replica identical, and the demo runs. No part connects as the superuser, and no password
is printed."""
from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import pgqueue
from pgqueue.client import schedule
from pgqueue.db import connection, embedded
from pgqueue.db.embedded import EmbeddedServer
from pgqueue.replicas import replica
from tests.acceptance.test_dashboard_cli import _post
from tests.dbhelp import wait_for

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yml"
ROLES_SQL = REPO / "examples" / "compose" / "roles.sql"
#: what every Python service runs before its own command (the image has no pgqueue yet)
INSTALL = "cp -r /src /tmp/pgqueue && pip install -q /tmp/pgqueue && "
ONE_SHOT = ("migrate", "web")
LONG_RUNNING = ("worker", "scheduler", "dashboard", "follower")


def _services() -> dict[str, Any]:
    services: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())["services"]
    return services


class Compose:
    """The compose file's Python services as local processes: its DSNs pointed at the test's
    server (leader -> database pgqueue, replica -> database replica), the dashboard on a free
    local port, the install step left out (this checkout is installed)."""

    def __init__(self, port: int, logs: Path) -> None:
        self.port, self.logs = port, logs
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def local(self, text: str) -> str:
        return (text.replace("@leader:5432/pgqueue", f"@127.0.0.1:{self.port}/pgqueue")
                .replace("@replica:5432/pgqueue", f"@127.0.0.1:{self.port}/replica")
                .replace("--host 0.0.0.0 --port 8470", "--host 127.0.0.1 --port 0"))

    def dsn(self, service: str) -> str:
        return self.local(_services()[service]["environment"]["PGQUEUE_DSN"])

    def start(self, service: str) -> subprocess.Popen[bytes]:
        spec = _services()[service]
        sh, dash_c, command = spec["command"]
        assert (sh, dash_c) == ("sh", "-c") and command.startswith(INSTALL), service
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
        env.pop("PGQUEUE_DSN", None)
        env.update({k: self.local(v) for k, v in (spec.get("environment") or {}).items()})
        out = (self.logs / f"{service}.log").open("wb")
        proc = subprocess.Popen(["sh", "-c", f"exec {self.local(command[len(INSTALL):])}"]
                                if service in LONG_RUNNING else
                                ["sh", "-c", self.local(command[len(INSTALL):])],
                                cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
        self.procs[service] = proc
        return proc

    def run(self, service: str, timeout: float = 120) -> str:
        proc = self.start(service)
        code = proc.wait(timeout=timeout)
        assert code == 0, (service, self.log(service))
        return self.log(service)

    def log(self, service: str) -> str:
        return (self.logs / f"{service}.log").read_text(errors="replace")

    def stop_all(self) -> dict[str, int]:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes = {}
        for service, proc in self.procs.items():
            try:
                codes[service] = proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                codes[service] = proc.wait()
        return codes


def test_the_compose_file_gives_each_part_its_own_login() -> None:
    services = _services()
    for server in ("leader", "replica"):
        assert (f"./{ROLES_SQL.relative_to(REPO)}:/docker-entrypoint-initdb.d/roles.sql:ro"
                in services[server]["volumes"]), server
    python = {name: spec for name, spec in services.items() if "python" in spec["image"]}
    assert set(python) == {*ONE_SHOT, *LONG_RUNNING, "demo"}
    superuser = f"postgres:{services['leader']['environment']['POSTGRES_PASSWORD']}@"
    users: dict[str, set[str]] = {}
    for name, spec in python.items():
        assert superuser not in json.dumps(spec), f"{name} connects as the superuser"
        for dsn in re.findall(r"postgresql://[^ \"]+", json.dumps(spec)):
            users.setdefault(name, set()).add(str(conninfo_to_dict(dsn)["user"]))
    assert users == {"migrate": {"queue_owner"}, "web": {"web"}, "worker": {"jobs"},
                     "scheduler": {"queue_owner"}, "dashboard": {"dashboard"},
                     "follower": {"queue_owner"}, "demo": {"queue_owner"}}
    for name in set(python) - {"migrate"}:
        assert services[name]["depends_on"]["migrate"] == {
            "condition": "service_completed_successfully"}, name


@pytest.mark.timeout(600)
def test_the_compose_services_run_under_their_roles(tmp_path: Path) -> None:
    server = EmbeddedServer(tmp_path / "pg", settings={"fsync": "off"})
    admin = server.start()
    compose = Compose(int(str(conninfo_to_dict(admin)["port"])), tmp_path)
    try:
        with connection.connect(admin) as conn:
            conn.execute("CREATE DATABASE pgqueue")
            conn.execute("CREATE DATABASE replica")
        for db in ("pgqueue", "replica"):  # what the postgres image runs at its first start
            subprocess.run([str(embedded.bin_dir() / "psql"), "-v", "ON_ERROR_STOP=1",
                            "--no-psqlrc", "-q", "-f", str(ROLES_SQL),
                            make_conninfo(admin, dbname=db)], check=True, timeout=60)
        migrated = compose.run("migrate")
        assert 'GRANT "pgqueue_worker" TO "jobs"' in migrated, migrated
        owner = compose.dsn("migrate")
        with connection.connect(owner) as conn:
            row = conn.execute("SELECT r.rolsuper, n.nspowner::regrole::text FROM pg_roles r, "
                               "pg_namespace n WHERE r.rolname = current_user "
                               "AND n.nspname = 'pgqueue'").fetchone()
        assert row == (False, "queue_owner")  # the schema's owner is no superuser

        job_id = int(compose.run("web").strip().splitlines()[-1])
        q = pgqueue.Queue(owner)
        with q.connection() as conn:  # a schedule due two minutes ago: the next pass fires it
            schedule.upsert(conn, "default", "every-minute", "* * * * *", "{}", kind="hello",
                            now=dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=2))
        for service in LONG_RUNNING:
            compose.start(service)

        wait_for(lambda: q.job(job_id) is None, 60, "the worker to run the web's job")
        history = q.history(job_id)
        assert history is not None and history.state == "acked"
        wait_for(lambda: any(o.op == "UpdateScheduleNextRun" for o in q.op_log(limit=200)), 60,
                 "the owner's maintenance to fire the due schedule")

        url = wait_for(lambda: re.search(r"on (http://127\.0\.0\.1:\d+)/",
                                         compose.log("dashboard")), 60, "the dashboard")[1]
        with urllib.request.urlopen(f"{url}/api/stats", timeout=10) as response:  # noqa: S310
            assert response.status == 200
        assert _post(f"{url}/api/jobs/{job_id}/cancel", "a-token") == 403  # read-only
        with connection.connect(owner) as conn:  # each part connected as its own login
            users = {u for (u,) in conn.execute(
                "SELECT DISTINCT usename FROM pg_stat_activity WHERE datname = 'pgqueue'")}
        assert {"jobs", "dashboard", "queue_owner"} <= users, users

        demo = compose.run("demo", timeout=300)
        assert "pgqueue demo on" in demo, demo
        replica_dsn = compose.local("postgresql://queue_owner:queue_owner@replica:5432/pgqueue")
        verified = replica.verify(owner, replica_dsn, timeout=120)
        assert verified.identical, verified.differences
        q.close()
    finally:
        codes = compose.stop_all()
        logs = {service: compose.log(service) for service in compose.procs}
        server.stop("immediate")
    assert {s: codes[s] for s in LONG_RUNNING} == {s: 0 for s in LONG_RUNNING}, logs
    for service, text in logs.items():
        assert "Traceback" not in text and "permission denied" not in text, (service, text)
        for login in ("queue_owner", "web", "jobs", "dashboard"):
            assert f":{login}@" not in text, f"{service} printed {login}'s password"
