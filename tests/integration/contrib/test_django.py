"""pgqueue.contrib.django against the example Django project in examples/django_shop: its
database from DATABASES, an order and its job in one atomic block (a rollback leaves
neither), `manage.py pgqueue ...` running pgqueue commands, and a worker started that way
whose handler writes through the ORM. Real Django, real processes, real Postgres."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psycopg

import pgqueue
from tests.dbhelp import wait_for

PROJECT = Path(__file__).resolve().parents[3] / "examples" / "django_shop"


def manage(dsn: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    run = subprocess.run([sys.executable, "manage.py", *args], cwd=PROJECT, env=env(dsn),
                         capture_output=True, text=True, timeout=120, check=False)
    if check:
        assert run.returncode == 0, f"manage.py {' '.join(args)}:\n{run.stdout}\n{run.stderr}"
    return run


def env(dsn: str) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if k != "PGQUEUE_DSN"}
    return {**environ, "SHOP_DSN": dsn, "DJANGO_SETTINGS_MODULE": "shop.settings"}


def orders(dsn: str) -> list[tuple[int, bool]]:
    with psycopg.connect(dsn) as conn:
        return [(r[0], r[1]) for r in conn.execute(
            "SELECT number, invoiced FROM shop_order ORDER BY number")]


def test_an_order_and_its_job_commit_together_and_a_worker_under_manage_py_runs_it(
        dsn: str, q: pgqueue.Queue) -> None:
    manage(dsn, "migrate", "--verbosity", "0")
    manage(dsn, "pgqueue", "db", "upgrade")
    placed = manage(dsn, "shell", "-c", (
        "from shop.jobs import place_order\n"
        "place_order(1)\n"
        "try:\n"
        "    place_order(2, fail=True)\n"
        "except RuntimeError:\n"
        "    print('rolled back')\n"))
    assert "rolled back" in placed.stdout
    assert orders(dsn) == [(1, False)]
    jobs = q.jobs()
    assert [(j.kind, json.loads(j.payload)) for j in jobs] == [("invoice", {"order": 1})]

    listed = json.loads(manage(dsn, "pgqueue", "jobs", "list", "--json").stdout)
    assert [row["job_id"] for row in listed] == [jobs[0].job_id]

    worker = subprocess.Popen(
        [sys.executable, "manage.py", "pgqueue", "worker", "--app", "shop.jobs:app",
         "--poll-interval", "0.2"], cwd=PROJECT, env=env(dsn), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: orders(dsn) == [(1, True)], 30, "the worker to invoice order 1")
        wait_for(lambda: q.job(jobs[0].job_id) is None, 10, "the invoice job to be acked")
    finally:
        worker.send_signal(signal.SIGTERM)
        out, _ = worker.communicate(timeout=30)
    assert worker.returncode == 0, out
    assert "worker" in out and "stopped" in out


def test_the_database_is_taken_from_databases_and_a_bad_one_is_named(dsn: str) -> None:
    shown = manage(dsn, "shell", "-c", (
        "from pgqueue.contrib.django import dsn\n"
        "from psycopg.conninfo import conninfo_to_dict\n"
        "print(conninfo_to_dict(dsn())['dbname'])\n"
        "from django.conf import settings\n"
        "settings.PGQUEUE_DATABASE = 'other'\n"
        "try:\n"
        "    dsn()\n"
        "except ValueError as exc:\n"
        "    print(exc)\n"))
    lines = shown.stdout.strip().splitlines()[-2:]  # Django 5.2 first says what it imported
    assert lines[0] == psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    assert lines[1] == ("PGQUEUE_DATABASE names 'other', which DATABASES does not have (it has "
                        "default)")


def test_the_view_places_an_order_with_its_job_and_refuses_a_duplicate(
        dsn: str, q: pgqueue.Queue) -> None:
    """The guide's view, through Django's test client in the example project."""
    manage(dsn, "migrate", "--verbosity", "0")
    out = manage(dsn, "shell", "-c", (
        "from django.test import Client\n"
        "c = Client()\n"
        "print(c.post('/orders/5').status_code, c.post('/orders/5').status_code)\n"))
    assert out.stdout.split()[-2:] == ["200", "409"], out.stdout + out.stderr
    assert orders(dsn) == [(5, False)]
    assert [json.loads(j.payload) for j in q.jobs()] == [{"order": 5}]
