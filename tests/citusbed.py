"""A real Citus cluster for the suite: Citus built once per machine, a coordinator and workers.

Citus has no Debian or PyPI package for the embedded wheel's PostgreSQL, so it is built from
the source kept beside this file (tests/citus/, AGPL-3.0, a test dependency never shipped in
the wheel) against the wheel's own `pg_config` and headers. The build is cached outside the
checkout, keyed by the Citus and server versions (`cache_root`), under a file lock so that two
test processes build it once. The servers load it from there through PostgreSQL 18's
`extension_control_path` and `dynamic_library_path`: nothing is written into the wheel.

Building needs clang-14 and the lz4, zstd and Kerberos headers (`BUILD_PACKAGES`; .ci/run
installs them). Without them the Citus tests skip on a developer's machine and fail under CI.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import pgqueue
from pgqueue.db.embedded import EmbeddedServer, bin_dir
from tests.pgbed import TEST_SETTINGS

CITUS_VERSION = "14.0.1"
SOURCE = Path(__file__).resolve().parent / "citus" / f"citus-{CITUS_VERSION}.tar.gz"
SOURCE_SHA256 = "a1c1b8cd048bab16907d3b8542904d054e52f874c6b8d7e32d15904f17d0c0f8"
#: Debian packages the build needs (the wheel's server was built with clang's warning flags,
#: which gcc 12 refuses; its libpq-be.h includes gssapi).
BUILD_PACKAGES = ("clang-14", "liblz4-dev", "libzstd-dev", "libkrb5-dev", "make")
_HEADERS = ("/usr/include/lz4.h", "/usr/include/zstd.h", "/usr/include/gssapi/gssapi.h")


class CitusUnavailable(RuntimeError):
    """Citus cannot be built here (a build package is missing)."""


def _pg_config() -> Path:
    return bin_dir() / "pg_config"


def server_version() -> str:
    out = subprocess.run([str(_pg_config()), "--version"], capture_output=True, text=True,
                         check=True).stdout
    return out.split()[-1]  # "PostgreSQL 18.6"


def cache_root() -> Path:
    """Where builds are kept: $PGQUEUE_CITUS_CACHE, else /var/tmp/pgqueue-citus (readable by
    the unprivileged user the servers run as when the suite runs as root; /root is not)."""
    return Path(os.environ.get("PGQUEUE_CITUS_CACHE", "/var/tmp/pgqueue-citus"))  # noqa: S108


def missing_build_packages() -> list[str]:
    missing = [p for p in ("clang-14", "make") if shutil.which(p) is None]
    missing += [h for h in _HEADERS if not Path(h).exists()]
    return missing


def _run(args: list[str], cwd: Path, log: Path) -> None:
    with log.open("a") as out:
        done = subprocess.run(args, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"building Citus: {' '.join(args)} failed ({done.returncode}):\n{tail}")


def _build(into: Path) -> None:
    """Build Citus against the wheel's server and install its files into `into` (share/, lib/)."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()
    if digest != SOURCE_SHA256:
        raise RuntimeError(f"{SOURCE}: sha256 {digest}, expected {SOURCE_SHA256}")
    work = Path(tempfile.mkdtemp(prefix="citus-build-"))
    try:
        log = work / "build.log"
        _run(["tar", "-xzf", str(SOURCE)], work, log)
        src = work / f"citus-{CITUS_VERSION}"
        _run(["./configure", "-q", "CC=clang-14", f"PG_CONFIG={_pg_config()}",
              "--without-libcurl"], src, log)
        jobs = str(max(1, os.cpu_count() or 1))
        _run(["make", "-s", f"-j{jobs}", "with_llvm=no"], src, log)
        dest = work / "dest"
        _run(["make", "-s", "install", "with_llvm=no", f"DESTDIR={dest}"], src, log)
        # DESTDIR holds the server's own absolute paths: take its share/ and lib/ folders.
        pginstall = dest / str(_pg_config().parent.parent).lstrip("/")
        staged = into.with_name(into.name + ".tmp")
        shutil.rmtree(staged, ignore_errors=True)
        staged.mkdir(parents=True)
        for part in ("share", "lib"):
            shutil.copytree(pginstall / part, staged / part)
        for path in [staged, *staged.rglob("*")]:
            path.chmod(0o755 if path.is_dir() or path.suffix == ".so" else 0o644)
        staged.rename(into)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def citus_install() -> Path:
    """The cached Citus build for this server (built on first use): a folder with share/ and
    lib/. Raises CitusUnavailable when a build package is missing."""
    root = cache_root()
    into = root / f"citus-{CITUS_VERSION}-pg{server_version()}"
    if (into / "lib" / "citus.so").exists():
        return into
    missing = missing_build_packages()
    if missing:
        raise CitusUnavailable(
            f"Citus must be built here and these are missing: {', '.join(missing)} "
            f"(apt-get install -y {' '.join(BUILD_PACKAGES)})")
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)
    with (root / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (into / "lib" / "citus.so").exists():
            _build(into)
    return into


def citus_settings(install: Path) -> dict[str, str]:
    """Server settings that load Citus from the cached build."""
    return {
        "shared_preload_libraries": "'citus'",
        "extension_control_path": f"'{install / 'share'}:$system'",
        "dynamic_library_path": f"'{install / 'lib'}:$libdir'",
        "max_prepared_transactions": "100",
        "citus.enable_statistics_collection": "off",
        # four shards per distributed table (Citus makes 32): every partition of the rings is
        # a table of its own on each node, and a copy of the template copies them all
        "citus.shard_count": "4",
        # what the tests count: the calls each node ran (pg_stat_user_functions), and every
        # two-phase commit (pg_dist_transaction keeps its row: no recovery pass removes it)
        "track_functions": "'pl'",
        "citus.recover_2pc_interval": "-1",
    }


def _port(dsn: str) -> int:
    return int(str(conninfo_to_dict(dsn)["port"]))


@dataclass
class Cluster:
    """A coordinator and its workers, each an embedded server of its own."""

    coordinator: EmbeddedServer
    workers: list[EmbeddedServer]
    servers_dsn: list[str] = field(default_factory=list)  # coordinator first
    _count: int = 0

    def new_database(self) -> CitusDatabase:
        """A fresh database on every node, with the citus extension, its workers added."""
        self._count += 1
        name = f"pgqueue_c{os.getpid()}_{self._count}"
        for server_dsn in self.servers_dsn:
            with psycopg.connect(server_dsn, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                conn.execute(f'CREATE DATABASE "{name}"')
            with psycopg.connect(make_conninfo(server_dsn, dbname=name), autocommit=True) as conn:
                conn.execute("CREATE EXTENSION citus")
        coordinator = make_conninfo(self.servers_dsn[0], dbname=name)
        with psycopg.connect(coordinator, autocommit=True) as conn:
            conn.execute("SELECT citus_set_coordinator_host('127.0.0.1', %s)",
                         (_port(self.servers_dsn[0]),))
            for worker_dsn in self.servers_dsn[1:]:
                conn.execute("SELECT citus_add_node('127.0.0.1', %s)", (_port(worker_dsn),))
        return CitusDatabase(self, name, coordinator,
                             [make_conninfo(d, dbname=name) for d in self.servers_dsn[1:]])

    def drop(self, db: CitusDatabase) -> None:
        for server_dsn in self.servers_dsn:
            with psycopg.connect(server_dsn, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{db.name}" WITH (FORCE)')

    def stop(self) -> None:
        for server in [self.coordinator, *self.workers]:
            server.stop("immediate")
            shutil.rmtree(server.root, ignore_errors=True)


@dataclass
class CitusDatabase:
    """One database across the cluster: `dsn` is the coordinator's, `worker_dsns` the nodes'."""

    cluster: Cluster
    name: str
    dsn: str
    worker_dsns: list[str]


def start_cluster(workers: int = 2, *, durable: bool = False) -> Cluster:
    """Start a coordinator and `workers` workers on free ports (Citus built on first use);
    fsync off as the test bed's servers, unless `durable` (benchmarks)."""
    settings = {**({} if durable else TEST_SETTINGS), **citus_settings(citus_install())}
    servers = [EmbeddedServer(Path(tempfile.mkdtemp(prefix=f"citus-{role}-")), settings=settings)
               for role in ["coord", *[f"w{i}" for i in range(workers)]]]
    cluster = Cluster(servers[0], servers[1:])
    try:
        cluster.servers_dsn = [server.start() for server in servers]
    except BaseException:
        cluster.stop()
        raise
    return cluster


def session_cluster() -> Iterator[Cluster]:
    cluster = start_cluster()
    try:
        yield cluster
    finally:
        cluster.stop()


class CitusBed:
    """A cluster plus a database migrated once on it (the template): each test's database is
    a copy of it, made on every node at once. A copy keeps Citus's metadata true, since the
    metadata names nodes, not databases. Migrating takes 7-10 s, a copy about 1.5 s."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.template = cluster.new_database()
        pgqueue.migrate(self.template.dsn)
        for server_dsn in cluster.servers_dsn:
            with psycopg.connect(server_dsn, autocommit=True) as conn:
                # Citus's maintenance daemon holds a session in every database that has the
                # extension; a template must have none
                conn.execute(f'ALTER DATABASE "{self.template.name}" ALLOW_CONNECTIONS false')
                conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                             " WHERE datname = %s AND pid <> pg_backend_pid()",
                             (self.template.name,))

    def new_database(self) -> CitusDatabase:
        """A fresh migrated database across the cluster."""
        self.cluster._count += 1
        name = f"pgqueue_ct{os.getpid()}_{self.cluster._count}"
        with ThreadPoolExecutor(len(self.cluster.servers_dsn)) as pool:
            list(pool.map(lambda server_dsn: _copy(server_dsn, self.template.name, name),
                          self.cluster.servers_dsn))
        return CitusDatabase(self.cluster, name, make_conninfo(self.cluster.servers_dsn[0],
                                                               dbname=name),
                             [make_conninfo(d, dbname=name) for d in self.cluster.servers_dsn[1:]])

    def drop(self, db: CitusDatabase) -> None:
        self.cluster.drop(db)


def _copy(server_dsn: str, template: str, name: str, timeout: float = 30.0) -> None:
    """CREATE DATABASE `name` from `template` on one node, waiting out the sessions that the
    terminated maintenance daemon may still hold for a moment."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        while True:
            try:
                conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
                return
            except psycopg.errors.ObjectInUse:
                if time.monotonic() > deadline:
                    raise
                conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                             " WHERE datname = %s", (template,))
                time.sleep(0.05)  # polling a server-side condition, bounded by the deadline


def stream_group(db: CitusDatabase, stream: str) -> int:
    """The group id of the node holding `stream`'s shard of pgqueue.job."""
    with psycopg.connect(db.dsn) as conn:
        row = conn.execute(
            "SELECT p.groupid FROM pg_dist_placement p "
            "WHERE p.shardid = get_shard_id_for_distribution_column('pgqueue.job', %s::text)",
            (stream,)).fetchone()
    assert row is not None
    return int(row[0])


def function_calls(dsn: str) -> dict[str, int]:
    """How often each pgqueue function ran on the node behind `dsn` (track_functions)."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT funcname, calls FROM pg_stat_user_functions "
                            "WHERE schemaname = 'pgqueue'").fetchall()
    return {str(name): int(calls) for name, calls in rows}


def two_phase_commits(db: CitusDatabase) -> int:
    """Two-phase commits run in this database by any node: the coordinator, and the workers,
    which coordinate the transactions of the calls delegated to them (pg_dist_transaction
    keeps a row for each on the node that ran it: the bed turns recovery off)."""
    total = 0
    for dsn in [db.dsn, *db.worker_dsns]:
        with psycopg.connect(dsn) as conn:
            row = conn.execute("SELECT count(*) FROM pg_dist_transaction").fetchone()
        assert row is not None
        total += int(row[0])
    return total
