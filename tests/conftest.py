"""Fixtures shared by the integration and acceptance tests (see tests/pgbed.py)."""
from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import cast

import pytest

import pgqueue
from tests.asyncbridge import BlockingAsyncQueue
from tests.citusbed import CitusBed, CitusDatabase, CitusUnavailable, Cluster, session_cluster
from tests.logins import Logins, session_logins
from tests.pgbed import Bed, session_bed, temp_files_in_memory
from tests.poolerbed import Pooler, PoolerUnavailable, session_pooler
from tests.stockbed import StockBed, StockUnavailable, session_stock

_MEMORY_TMP: Path | None = None


def pytest_configure(config: pytest.Config) -> None:
    """Temporary files (the servers' data among them) in memory when there is room."""
    global _MEMORY_TMP
    _MEMORY_TMP = temp_files_in_memory()


def pytest_unconfigure(config: pytest.Config) -> None:
    if _MEMORY_TMP is not None:
        shutil.rmtree(_MEMORY_TMP, ignore_errors=True)


#: The test modules that take longest (a minute or more of one process's time), collected
#: first: `--dist loadfile` hands modules out in collection order, and one of these dealt
#: last would run alone while the other process idles. Scheduling only: every test runs.
LONGEST_FIRST = ("tests/acceptance/test_soak.py", "tests/integration/test_large_payloads.py",
                 "tests/integration/db/test_schema.py", "tests/acceptance/test_recovery.py",
                 "tests/integration/replicas/test_replica.py",
                 "tests/integration/client/test_oplog.py",
                 "tests/integration/runtime/test_worker.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest modules first (LONGEST_FIRST), the rest in their order; each module's tests
    stay together and in order (a stable sort by module)."""
    root = Path(str(config.rootpath))
    rank = {name: n for n, name in enumerate(LONGEST_FIRST)}

    def module_rank(item: pytest.Item) -> int:
        return rank.get(Path(str(item.path)).relative_to(root).as_posix(), len(rank))

    items.sort(key=module_rank)


@pytest.fixture(scope="session")
def bed() -> Iterator[Bed]:
    """The session's Postgres server and migrated template."""
    yield from session_bed()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A module marked `pytest.mark.layouts("single", "citus", "stock")` runs each test that
    takes a database (`dsn`, `q`) once per layout: on one server, on the Citus cluster, and on
    the stock server users run (tests/stockbed.py: Debian's PostgreSQL 15, JIT on).

    One marked `pytest.mark.flavours("sync", "async")` runs each test that takes a queue (`q`,
    `queue_api`) with Queue and with AsyncQueue (tests/asyncbridge.py). The async flavour runs
    on the single server only: the two share every statement, so the other layouts add nothing
    for it but time."""
    layouts = metafunc.definition.get_closest_marker("layouts")
    flavours = metafunc.definition.get_closest_marker("flavours")
    takes_layout = "layout" in metafunc.fixturenames
    if flavours is not None and "flavour" in metafunc.fixturenames:
        names = layouts.args if layouts is not None and takes_layout else ("single",)
        pairs = [(layout, flavour) for layout in names for flavour in flavours.args
                 if flavour == "sync" or layout == "single"]
        metafunc.parametrize(("layout", "flavour"), pairs, indirect=True,
                             ids=[f"{layout}-{flavour}" for layout, flavour in pairs])
    elif layouts is not None and takes_layout:
        metafunc.parametrize("layout", layouts.args, indirect=True)


@pytest.fixture
def layout(request: pytest.FixtureRequest) -> str:
    """The layout of the test's database: "single" unless the module asks for more."""
    return str(getattr(request, "param", "single"))


@pytest.fixture
def dsn(layout: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh, migrated database for this test (across the Citus cluster when the layout is
    "citus": the coordinator's DSN). On the stock server the test fails when any statement it
    ran there was JIT-compiled."""
    if layout == "stock":
        stock: StockBed = request.getfixturevalue("stock_bed")
        d = stock.new_database()
        yield d
        compiled = stock.jit_compiled(d)
        stock.drop(d)
        assert not compiled, "JIT-compiled on the stock server:\n" + "\n".join(
            map(str, compiled))
        return
    if layout == "citus":
        citus_bed: CitusBed = request.getfixturevalue("citus_bed")
        db = citus_bed.new_database()
        yield db.dsn
        citus_bed.drop(db)
        return
    bed: Bed = request.getfixturevalue("bed")
    d = bed.new_database()
    yield d
    bed.drop(d)


@pytest.fixture
def empty_dsn(bed: Bed) -> Iterator[str]:
    """A fresh database without the pgqueue schema."""
    d = bed.new_database(migrated=False)
    yield d
    bed.drop(d)


@pytest.fixture
def flavour(request: pytest.FixtureRequest) -> str:
    """Which API the test's queue is: "sync" (Queue) unless the module asks for both."""
    return str(getattr(request, "param", "sync"))


@pytest.fixture
def queue_api(flavour: str) -> Callable[..., pgqueue.Queue]:
    """What opens the test's queues: Queue, or AsyncQueue behind Queue's blocking interface
    (the "async" flavour, tests/asyncbridge.py)."""
    if flavour == "async":
        return cast(Callable[..., pgqueue.Queue], BlockingAsyncQueue)
    return pgqueue.Queue


@pytest.fixture
def q(dsn: str, queue_api: Callable[..., pgqueue.Queue]) -> Iterator[pgqueue.Queue]:
    """A Queue (or, in the async flavour, an AsyncQueue) on stream "default" of a fresh
    database."""
    with queue_api(dsn, stream="default") as queue:
        yield queue


@pytest.fixture(scope="session")
def logins(bed: Bed) -> Iterator[Logins]:
    """Login roles holding each pgqueue role (and one holding none), for the access tests."""
    yield from session_logins(bed)


@pytest.fixture(scope="session")
def stock_bed() -> Iterator[StockBed]:
    """The stock server (Debian's PostgreSQL 15, JIT on) with a migrated template. Skips on a
    developer's machine without the package; under CI that is a failure."""
    try:
        yield from session_stock()
    except StockUnavailable as exc:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def pooler(bed: Bed) -> Iterator[Pooler]:
    """PgBouncer (Debian's 1.18) in transaction pooling mode in front of the session's server.
    Skips on a developer's machine without the package; under CI that is a failure."""
    try:
        yield from session_pooler(bed.server_dsn)
    except PoolerUnavailable as exc:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(str(exc))


@pytest.fixture
def pooled_dsn(dsn: str, pooler: Pooler) -> str:
    """The test's database through PgBouncer in transaction mode."""
    return pooler.dsn(dsn)


@pytest.fixture(scope="session")
def citus_cluster() -> Iterator[Cluster]:
    """A Citus coordinator and two workers for the session (Citus built once per machine).
    Skips on a developer's machine that cannot build Citus; under CI that is a failure."""
    try:
        yield from session_cluster()
    except CitusUnavailable as exc:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def citus_bed(citus_cluster: Cluster) -> CitusBed:
    """The cluster with a migrated template database."""
    return CitusBed(citus_cluster)


@pytest.fixture
def citus_db(citus_cluster: Cluster) -> Iterator[CitusDatabase]:
    """A fresh database across the Citus cluster, without the pgqueue schema."""
    db = citus_cluster.new_database()
    yield db
    citus_cluster.drop(db)
