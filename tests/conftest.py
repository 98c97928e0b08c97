"""Fixtures shared by the integration and acceptance tests (see tests/pgbed.py)."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

import pgqueue
from tests.logins import Logins, session_logins
from tests.pgbed import Bed, session_bed


@pytest.fixture(scope="session")
def bed() -> Iterator[Bed]:
    """The session's Postgres server and migrated template."""
    yield from session_bed()


@pytest.fixture
def dsn(bed: Bed) -> Iterator[str]:
    """A fresh, migrated database for this test."""
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
def q(dsn: str) -> Iterator[pgqueue.Queue]:
    """A Queue on stream "default" of a fresh database."""
    with pgqueue.Queue(dsn, stream="default") as queue:
        yield queue


@pytest.fixture(scope="session")
def logins(bed: Bed) -> Iterator[Logins]:
    """Login roles holding each pgqueue role (and one holding none), for the access tests."""
    yield from session_logins(bed)
