"""Starting fast: which heavy libraries `import pgqueue`, the CLI's help and a CLI command load.

A library imported by every web process and a CLI called from scripts pay for every module at
each start; optional libraries load when the feature that needs them is used. These tests
assert the module lists (what loads), never a timing: bench/startup.py measures the time.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: Libraries that must load only with their feature: migrations (alembic, SQLAlchemy),
#: frameworks, the dashboard, metrics, traces, and the CLI's tables.
HEAVY = ("alembic", "sqlalchemy", "django", "starlette", "jinja2", "prometheus_client",
         "opentelemetry", "rich", "psycopg", "psycopg_pool", "croniter", "click", "uvicorn")

_PROBE = """
import json, sys
try:
{body}
except SystemExit:
    pass
finally:
    roots = sorted({{name.split(".")[0] for name in sys.modules}})
    sys.__stderr__.write("\\nMODULES " + json.dumps(roots) + "\\n")
"""


def loaded(body: str, *env: tuple[str, str]) -> set[str]:
    """The heavy libraries loaded by running `body` in a fresh interpreter (outside the
    checkout, as an installed program runs)."""
    code = _PROBE.format(body="\n".join("    " + line for line in body.strip().splitlines()))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=REPO / "tests", env={**os.environ, **dict(env)})
    line = [x for x in done.stderr.splitlines() if x.startswith("MODULES ")]
    assert line, done.stdout + done.stderr
    return set(json.loads(line[-1][len("MODULES "):])) & set(HEAVY)


def test_import_pgqueue_loads_none_of_them() -> None:
    assert loaded("import pgqueue") == set()


def test_a_producer_loads_the_driver_and_the_pool_only() -> None:
    """A web process that enqueues: the driver, its pool and the cron rule of schedules."""
    assert loaded("from pgqueue import Queue, AsyncQueue, NewJob") <= {
        "psycopg", "psycopg_pool", "croniter"}


def test_a_worker_loads_no_metrics_traces_migrations_or_tables() -> None:
    assert loaded("from pgqueue import App, Worker, StepContext, JobContext") <= {
        "psycopg", "psycopg_pool", "croniter"}


def test_the_cli_help_loads_click_alone() -> None:
    """`pgqueue --help` lists every command without importing one: no database driver."""
    body = "sys.argv = ['pgqueue', '--help']\nfrom pgqueue_cli import main\nmain()"
    assert loaded(body) == {"click"}


def test_a_command_loads_what_it_uses(dsn: str) -> None:
    """`pgqueue stats`: the driver, the pool and the tables it prints; no migrations, web,
    metrics or trace library."""
    body = "sys.argv = ['pgqueue', 'stats']\nfrom pgqueue_cli import main\nmain()"
    assert loaded(body, ("PGQUEUE_DSN", dsn)) <= {"click", "psycopg", "psycopg_pool", "rich",
                                                  "croniter"}


@pytest.mark.parametrize("feature, body, needs", [
    ("migrations", "from pgqueue.db import schema\nschema.head()", {"alembic", "sqlalchemy"}),
    ("metrics", "from pgqueue.telemetry import metrics", {"prometheus_client"}),
    ("dashboard", "from pgqueue.dashboard import create_app", {"starlette", "jinja2"}),
])
def test_each_feature_loads_its_library_when_used(feature: str, body: str, needs: set[str]) -> None:
    """The probe sees the libraries a feature loads (so the tests above can fail)."""
    assert needs <= loaded(body), feature
