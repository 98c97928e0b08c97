"""The documentation site builds in strict mode (a broken link, anchor or reference fails it),
and its generated reference lists everything the code has."""
from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import click

from tests.docs.examples import ROOT

if TYPE_CHECKING:  # the installed name of the `cli` folder is pgqueue_cli (see clihelp)
    from cli import main
else:
    from pgqueue_cli import main


def reference() -> ModuleType:
    """docs/hooks/reference.py, the MkDocs hook that writes the reference tables."""
    spec = importlib.util.spec_from_file_location("docs_reference", ROOT / "docs/hooks/reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_site_builds_in_strict_mode(tmp_path: Path) -> None:
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                            str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True,
                           timeout=300)
    assert built.returncode == 0, built.stderr[-6000:]
    cli = (tmp_path / "site/reference/cli/index.html").read_text()
    ctx = click.Context(main, info_name="pgqueue")
    for name in main.list_commands(ctx):  # every command of the CLI has its section
        assert f"pgqueue {name}" in cli, name
    sql = (tmp_path / "site/reference/sql/index.html").read_text()
    assert "pgqueue.enqueue_one" in sql and "pgqueue.release" in sql
    python = (tmp_path / "site/reference/python/index.html").read_text()
    for name in ("Queue", "AsyncQueue", "App", "Worker", "JobContext", "StepContext"):
        assert f'id="pgqueue.{name}"' in python, name


def test_the_reference_lists_every_function_a_role_may_call() -> None:
    ref = reference()
    granted = ref.grants()
    assert granted["enqueue_one"] == "pgqueue_producer"
    assert granted["lease"] == "pgqueue_worker"
    assert granted["release"] == "pgqueue_operator"
    defined = ref.function_definitions()
    assert not set(granted) - set(defined), "granted but not defined in pgqueue/sql"
    page = ref.sql_functions()
    for name in granted:
        assert f"### `pgqueue.{name}`" in page


def test_the_reference_lists_every_metric_route_and_environment_variable() -> None:
    ref = reference()
    source = "\n".join(p.read_text() for p in [*(ROOT / "pgqueue").rglob("*.py"),
                                                 *(ROOT / "cli").rglob("*.py")])
    metrics = ref.metrics()
    made = re.findall(r'(GaugeMetricFamily|Counter|Histogram)\(\s*"(pgqueue_\w+)"', source, re.S)
    assert len(made) >= 13
    for kind, name in made:  # every metric the code makes
        assert f"`{name}{'_total' if kind == 'Counter' else ''}`" in metrics, name
    from pgqueue.dashboard import api, pages

    http = ref.http()
    for route in [*api.ROUTES, *pages.ROUTES]:
        assert f"`{route.path}`" in http
        row = next(r for r in ref.routes() if r[2] == route.path)
        assert row[3], f"{route.path} has no docstring to say what it does"
    settings = ref.settings()
    for var in set(re.findall(r"PGQUEUE_[A-Z_]+[A-Z]", source)):
        assert f"`{var}`" in settings, var
