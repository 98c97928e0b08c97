"""What users install: the sdist and the wheel built from this checkout, the wheel installed
into a fresh virtual environment (never editable) and used from outside the checkout.

The editable install the rest of the suite runs on imports from the source tree, so a module,
SQL file, template or migration the wheel leaves out passes every other test (a missing
subpackage once made `import pgqueue` fail only for users). Here the build must carry every
file of the package folders, say no warning, and the installed wheel must import every module
it holds, answer `pgqueue --help`, migrate a database, run the demo on it and serve a
dashboard page with its static files.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import urllib.request
import venv
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import pgqueue
from tests.acceptance.test_dashboard_cli import _dashboard_at

REPO = Path(__file__).resolve().parents[2]
#: The installed package name of each folder of the repository the distribution carries.
FOLDERS = {"pgqueue": "pgqueue", "cli": "pgqueue_cli", "migrations": "pgqueue_migrations"}


def _tracked(folder: str) -> set[str]:
    """Files of a package folder as they install (git-tracked; generated modules included)."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard",
                             folder], cwd=REPO, capture_output=True, text=True,
                            check=True).stdout.split()
    return {FOLDERS[folder] + path[len(folder):] for path in listed}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """The sdist and the wheel, built as a release is (no build isolation: the tools are in
    the test environment already), and what the build printed."""
    out = tmp_path_factory.mktemp("dist")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    done = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--sdist", "--wheel",
                           "--outdir", str(out), str(REPO)], capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel,) = out.glob("*.whl")
    (sdist,) = out.glob("*.tar.gz")
    return sdist, wheel, done.stdout + done.stderr


@pytest.fixture(scope="module")
def installed(built: tuple[Path, Path, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with the wheel and its extras installed by pip, as a user
    would (dependencies from the package index); its bin folder."""
    root = tmp_path_factory.mktemp("venv")
    venv.create(root, with_pip=True)
    pip = [str(root / "bin" / "python"), "-m", "pip", "install", "--quiet",
           "--disable-pip-version-check"]
    wheel = built[1]
    done = subprocess.run([*pip, f"{wheel}[dashboard,django,sqlalchemy,otel]"],
                          capture_output=True, text=True, timeout=900, cwd=root)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return root / "bin"


def test_the_build_says_no_warning(built: tuple[Path, Path, str]) -> None:
    lines = [line for line in built[2].splitlines() if re.search(r"(?i)\bwarn", line)]
    assert lines == []


def test_the_wheel_and_the_sdist_carry_every_file_of_the_package_folders(
        built: tuple[Path, Path, str]) -> None:
    sdist, wheel, _ = built
    expected = set().union(*(_tracked(folder) for folder in FOLDERS))
    assert {"pgqueue/sql/lease.sql", "pgqueue/dashboard/static/htmx.min.js",
            "pgqueue/dashboard/templates/base.html", "pgqueue/py.typed",
            "pgqueue_migrations/versions/code/0007.sql", "pgqueue_cli/__init__.py",
            "pgqueue/client/queue.py", "pgqueue/client/queue_async.py"} <= expected
    with zipfile.ZipFile(wheel) as zf:
        in_wheel = {n for n in zf.namelist() if not n.split("/")[0].endswith(".dist-info")}
    assert sorted(expected - in_wheel) == []
    assert sorted(n for n in in_wheel - expected if not n.endswith(".pyc")) == []
    # the development tools (the code generator) stay in the repository
    assert not any(n.startswith("tools/") or n.endswith("/generate.py") for n in in_wheel)
    with tarfile.open(sdist) as tf:
        top = tf.getnames()[0].split("/")[0]
        in_sdist = {n.removeprefix(top + "/") for n in tf.getnames()}
    for folder in FOLDERS:
        tracked = {folder + p[len(FOLDERS[folder]):] for p in _tracked(folder)}
        assert sorted(tracked - in_sdist) == []


def _python(bin_dir: Path, code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run code with the installed environment's Python from outside the checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([str(bin_dir / "python"), "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


def test_every_module_of_the_wheel_imports_from_outside_the_checkout(
        built: tuple[Path, Path, str], installed: Path, tmp_path: Path) -> None:
    with zipfile.ZipFile(built[1]) as zf:
        modules = sorted(n[:-3].replace("/", ".").removesuffix(".__init__")
                         for n in zf.namelist() if n.endswith(".py"))
    # Two are scripts their host runs, not modules to import: alembic runs the migrations'
    # env.py (`pgqueue db upgrade` below), `python -m pgqueue` runs __main__ (run here).
    modules.remove("pgqueue_migrations.env")
    modules.remove("pgqueue.__main__")
    as_module = _python(installed, "import runpy, sys; sys.argv = ['pgqueue', '--version']; "
                        "runpy.run_module('pgqueue', run_name='__main__')", tmp_path)
    assert as_module.returncode == 0 and "pgqueue, version" in as_module.stdout, as_module.stderr
    assert "pgqueue.client.queue" in modules and "pgqueue_cli" in modules
    code = ("import importlib, sys\n"
            f"for name in {modules!r}:\n"
            "    module = importlib.import_module(name)\n"
            "    assert 'site-packages' in module.__file__, (name, module.__file__)\n"
            "print(len(sys.modules))\n")
    done = _python(installed, code, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]


def _cli(bin_dir: Path, tmp_path: Path, *args: str, dsn: str | None = None
         ) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    if dsn is not None:
        env["PGQUEUE_DSN"] = dsn
    return subprocess.run([str(bin_dir / "pgqueue"), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_installed_cli_helps_migrates_and_runs_the_demo(
        installed: Path, empty_dsn: str, tmp_path: Path) -> None:
    helped = _cli(installed, tmp_path, "--help")
    assert helped.returncode == 0 and "Usage: pgqueue" in helped.stdout, helped.stderr
    upgraded = _cli(installed, tmp_path, "db", "upgrade", dsn=empty_dsn)
    assert upgraded.returncode == 0, upgraded.stdout + upgraded.stderr
    demo = _cli(installed, tmp_path, "demo", "--threads", "2", dsn=empty_dsn)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    with pgqueue.Queue(empty_dsn, "demo") as q:
        assert [(s.state, s.count) for s in q.stats() if s.stream == "demo"] == [("dead", 2)]


@pytest.fixture
def dashboard_url(installed: Path, dsn: str, tmp_path: Path) -> Iterator[str]:
    with _dashboard_at([str(installed / "pgqueue")], dsn, tmp_path) as url:
        yield url


def test_the_installed_dashboard_serves_a_page_and_its_static_files(dashboard_url: str) -> None:
    with urllib.request.urlopen(f"{dashboard_url}/", timeout=10) as response:  # noqa: S310
        page = response.read().decode()
    assert response.status == 200 and "/static/htmx.min.js" in page
    for name in ("htmx.min.js", "dashboard.css"):
        with urllib.request.urlopen(f"{dashboard_url}/static/{name}", timeout=10) as r:  # noqa: S310
            assert r.status == 200 and len(r.read()) > 100
