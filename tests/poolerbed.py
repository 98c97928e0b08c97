"""A real PgBouncer for the suite: Debian's `pgbouncer` (1.18, as Debian 12 ships it) in front
of the session's server, in transaction pooling mode unless asked otherwise.

PgBouncer 1.18 forwards no protocol-level prepared statement (that came in 1.21), so in
transaction mode a statement psycopg prepared on one server connection is missing, or already
there, on the next; and a LISTEN is held by whichever server connection ran it. It refuses to
run as root: as root it runs as the unprivileged user the embedded servers run as. `.ci/run`
installs the package when missing; without it the pooler tests skip on a developer's machine
and fail under CI.
"""
from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgqueue.db.embedded import RUN_AS

PGBOUNCER = Path(os.environ.get("PGQUEUE_PGBOUNCER", "/usr/sbin/pgbouncer"))
PACKAGE = "pgbouncer"


class PoolerUnavailable(RuntimeError):
    """No PgBouncer here (the package is not installed)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Pooler:
    """One PgBouncer process in front of the server of `server_dsn` (trust authentication,
    every database by its own name)."""

    def __init__(self, server_dsn: str, *, mode: str = "transaction") -> None:
        if not PGBOUNCER.exists():
            raise PoolerUnavailable(f"no PgBouncer at {PGBOUNCER} (apt-get install -y {PACKAGE})")
        parts = conninfo_to_dict(server_dsn)
        self.mode = mode
        self.root = Path(tempfile.mkdtemp(prefix="pgqueue-pgbouncer-"))
        self.port = _free_port()
        users = self.root / "users.txt"
        users.write_text('"postgres" ""\n')
        ini = self.root / "pgbouncer.ini"
        ini.write_text("\n".join([
            "[databases]",
            f"* = host={parts.get('host', '127.0.0.1')} port={parts.get('port', 5432)}",
            "[pgbouncer]",
            "listen_addr = 127.0.0.1",
            f"listen_port = {self.port}",
            "unix_socket_dir =",
            "auth_type = trust",
            f"auth_file = {users}",
            f"pool_mode = {mode}",
            "max_client_conn = 1000",
            "default_pool_size = 20",
            f"logfile = {self.root / 'pgbouncer.log'}",
            "admin_users = postgres",
        ]) + "\n")
        kwargs: dict[str, object] = {}
        if os.geteuid() == 0:
            user = pwd.getpwnam(RUN_AS)
            os.chown(self.root, user.pw_uid, user.pw_gid)
            for f in (users, ini):
                os.chown(f, user.pw_uid, user.pw_gid)
            kwargs = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
        self.proc = subprocess.Popen(  # type: ignore[call-overload]
            [str(PGBOUNCER), str(ini)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL, **kwargs)
        self._wait_ready(server_dsn)

    def dsn(self, direct: str) -> str:
        """The DSN of `direct`'s database through this pooler."""
        return make_conninfo(direct, host="127.0.0.1", port=str(self.port))

    def _wait_ready(self, server_dsn: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                psycopg.connect(self.dsn(server_dsn), connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.close()
                    raise RuntimeError(f"PgBouncer did not start:\n{self.log()}") from None
                time.sleep(0.05)

    def log(self) -> str:
        with contextlib.suppress(OSError):
            return (self.root / "pgbouncer.log").read_text()[-3000:]
        return ""

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)


def session_pooler(server_dsn: str, mode: str = "transaction") -> Iterator[Pooler]:
    pooler = Pooler(server_dsn, mode=mode)
    try:
        yield pooler
    finally:
        pooler.close()
