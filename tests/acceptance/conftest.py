"""Fixtures shared by the acceptance tests: worker processes, and the dashboard in a browser
(tests/acceptance/browserhelp.py)."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.acceptance.browserhelp import TOKEN, Dashboard, Tab, chromium, dashboard, open_tab
from tests.acceptance.test_worker import Ledger, Workers

if TYPE_CHECKING:
    from playwright.sync_api import Browser


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


@pytest.fixture
def admin(dsn: str) -> Iterator[Dashboard]:
    """`pgqueue dashboard` on the test's database, with an admin token (TOKEN)."""
    yield from dashboard(dsn, TOKEN)


@pytest.fixture
def read_only(dsn: str) -> Iterator[Dashboard]:
    """`pgqueue dashboard` on the test's database, without an admin token."""
    yield from dashboard(dsn, None)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Headless Chromium, one per test module."""
    yield from chromium()


@pytest.fixture
def tab(browser: Browser) -> Iterator[Tab]:
    """A page that fails the test if it logs a JavaScript error."""
    yield from open_tab(browser)
