"""Fixtures shared by the acceptance tests that run worker processes."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.test_worker import Ledger, Workers


@pytest.fixture
def workers(dsn: str, tmp_path: Path) -> Iterator[Workers]:
    """The worker processes of one test; all are killed at teardown and their logs printed."""
    w = Workers(dsn, tmp_path)
    try:
        yield w
    finally:
        w.close()
        print(w.logs())  # shown by pytest when the test failed


@pytest.fixture
def ledger(dsn: str) -> Ledger:
    """The side-effect ledger of the test App's handlers (a table in the test database)."""
    return Ledger(dsn)
