"""`pgqueue dashboard` as a real process: it prints where it listens and how it was started
(never the token), takes the admin token from --admin-token-file, refuses a short token, an
unreadable file, a database without the schema and a port in use with clear errors, and exits
0 on SIGTERM."""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pgqueue

REPO = Path(__file__).resolve().parents[2]
TOKEN = "file-token-0123456789abcdef"  # noqa: S105  (a test's token)


def _dashboard(dsn: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PGQUEUE_DSN": dsn}
    env.pop("PGQUEUE_ADMIN_TOKEN", None)
    return subprocess.Popen([sys.executable, "-m", "pgqueue", "dashboard", *args], cwd=REPO,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@contextmanager
def _dashboard_at(command: list[str], dsn: str, cwd: Path) -> Iterator[str]:
    """`pgqueue dashboard --port 0` run as `command` (read-only: no token) from `cwd`; the URL
    it prints that it listens on. Stopped with SIGTERM at the end."""
    env = {k: v for k, v in os.environ.items() if k not in ("PGQUEUE_ADMIN_TOKEN", "PYTHONPATH")}
    proc = subprocess.Popen([*command, "dashboard", "--port", "0"], cwd=cwd,
                            env={**env, "PGQUEUE_DSN": dsn}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = re.search(r"on (http://127\.0\.0\.1:\d+)/", line)
        assert found, line + (proc.stderr.read() if proc.stderr and proc.poll() is not None else "")
        yield found.group(1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _post(url: str, token: str | None) -> int:
    request = urllib.request.Request(url, method="POST", data=b"")  # noqa: S310 (http://127.0.0.1)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 (http://127.0.0.1)
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_the_admin_token_comes_from_a_file_and_is_never_printed(dsn: str, q: pgqueue.Queue,
                                                                tmp_path: Path) -> None:
    job_id = q.enqueue("x")
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    proc = _dashboard(dsn, "--port", "0", "--admin-token-file", str(token_file))
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = re.search(r"on (http://127\.0\.0\.1:\d+)/ \(the admin token in (.+)\)", line)
        assert found, line
        assert found.group(2) == str(token_file)
        url = found.group(1)
        with urllib.request.urlopen(f"{url}/api/jobs/{job_id}", timeout=10) as response:  # noqa: S310
            assert json.load(response)["state"] == "pending"
        assert _post(f"{url}/api/jobs/{job_id}/cancel", None) == 401
        assert _post(f"{url}/api/jobs/{job_id}/cancel", "wrong-token-0123456789") == 401
        assert q.job(job_id) is not None
        assert _post(f"{url}/api/jobs/{job_id}/cancel", TOKEN) == 200
        assert q.job(job_id) is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        out, err = proc.communicate()
        assert TOKEN not in line + out + err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _refused(dsn: str, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    proc = subprocess.run([sys.executable, "-m", "pgqueue", "dashboard", *args], cwd=REPO,
                          env={**os.environ, "PGQUEUE_DSN": dsn, **(env or {})},
                          capture_output=True, text=True, timeout=60)
    return proc.returncode, proc.stdout + proc.stderr


def test_bad_starts_are_refused_with_clear_errors(dsn: str, empty_dsn: str, tmp_path: Path) -> None:
    short = "short-secret"
    code, text = _refused(dsn, "--port", "0", env={"PGQUEUE_ADMIN_TOKEN": short})
    assert code == 2 and "at least 16 characters" in text and "PGQUEUE_ADMIN_TOKEN" in text
    assert short not in text
    code, text = _refused(dsn, "--port", "0", "--admin-token-file", str(tmp_path / "missing"))
    assert code == 2 and "--admin-token-file: cannot read" in text
    code, text = _refused(empty_dsn, "--port", "0")
    assert code == 3 and "pgqueue db upgrade" in text
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, text = _refused(dsn, "--port", str(port))
    assert code == 3 and f"cannot listen on 127.0.0.1:{port}" in text


def _status(url: str, host: str) -> int:
    request = urllib.request.Request(url, headers={"Host": host})  # noqa: S310 (127.0.0.1)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_the_dashboard_answers_only_its_own_host_names(dsn: str) -> None:
    """`pgqueue dashboard` answers localhost and the address it listens on, and the names
    --allowed-hosts adds; a page that rebinds its own name to 127.0.0.1 gets 400."""
    proc = _dashboard(dsn, "--port", "0", "--allowed-hosts", "queue.internal")
    try:
        assert proc.stdout is not None
        found = re.search(r"on (http://127\.0\.0\.1:(\d+))/", proc.stdout.readline())
        assert found
        url, port = found.group(1), found.group(2)
        for host, status in ((f"127.0.0.1:{port}", 200), (f"localhost:{port}", 200),
                             ("queue.internal", 200), ("rebound.attacker.example", 400)):
            assert _status(f"{url}/api/stats", host) == status, host
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
