"""Fixtures of the integration tests beyond tests/conftest.py: the dashboard on a TestClient
(test_dashboard_*.py)."""
from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from tests.integration.dashboard.dashboard_help import TOKEN, dashboard


@pytest.fixture
def client(dsn: str) -> Iterator[TestClient]:
    """The dashboard with an admin token (its lifespan running)."""
    with dashboard(dsn) as c:
        yield c


@pytest.fixture
def read_only(dsn: str) -> Iterator[TestClient]:
    """The dashboard without an admin token."""
    with dashboard(dsn, None) as c:
        yield c


@pytest.fixture
def session(dsn: str) -> Iterator[TestClient]:
    """The dashboard with an admin token, logged in (the session cookie in the client's jar)."""
    with dashboard(dsn) as c:
        r = c.post("/login", data={"token": TOKEN, "next": "/"}, follow_redirects=False)
        assert r.status_code == 303, r.text
        assert c.cookies.get("pgqueue_session")
        yield c
