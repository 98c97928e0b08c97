"""Helpers of the dashboard tests (test_dashboard_*.py): the app on a TestClient, jobs in each
state, the CSRF token of a session, and an action through the API."""
from __future__ import annotations

import html
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx2
from psycopg.types.json import Jsonb
from starlette.testclient import TestClient

import pgqueue
from pgqueue.dashboard import create_app
from pgqueue.db import connection
from tests.dbhelp import force_reclaim, register_etl_step_sets

TOKEN = "dashboard-admin-token-7f3a9c1e5b"  # noqa: S105 (a test token)
BEARER = {"Authorization": f"Bearer {TOKEN}"}
MAX_BIGINT = 2**63 - 1

H1, H2 = "dash-hash-one", "dash-hash-two"


# -- helpers -----------------------------------------------------------------------


@contextmanager
def dashboard(dsn: str, token: str | None = TOKEN, *,
              raise_server_exceptions: bool = True) -> Iterator[TestClient]:
    """A TestClient on the dashboard, its lifespan running (and with it the live listener)."""
    app = create_app(dsn, admin_token=token)
    with TestClient(app, raise_server_exceptions=raise_server_exceptions) as c:
        yield c


def dead_job(q: pgqueue.Queue, payload: Any = b"dead", *, kind: str | None = None) -> int:
    """A dead letter of q's stream (one attempt, leased, nacked). It is enqueued with a high
    priority, so the lease takes it whatever else is pending."""
    job_id = q.enqueue(payload, kind=kind, max_attempts=1, priority=255)
    (held,) = q.lease(1)
    assert held.job_id == job_id
    assert q.nack(held, error="it failed") is True
    info = q.job(job_id)
    assert info is not None and info.state == "dead"
    return job_id


def leased_job(q: pgqueue.Queue) -> int:
    job_id = q.enqueue(b"leased", priority=255)
    (held,) = q.lease(1, visibility_timeout=300)
    assert held.job_id == job_id
    return job_id


def quarantined_job(q: pgqueue.Queue, dsn: str) -> int:
    """A quarantined job of q's stream (threshold 1, one crash). Reclaims every lease of the
    database: make it before any leased job a test keeps."""
    q.configure_stream(quarantine_after=1)
    job_id = q.enqueue(b"fragile", priority=255)
    (held,) = q.lease(1)
    assert held.job_id == job_id
    assert force_reclaim(dsn) >= 1
    info = q.job(job_id)
    assert info is not None and info.state == "quarantined", info
    return job_id


def undecodable_job(q: pgqueue.Queue, dsn: str, *, step_job: bool = True) -> int:
    """An undecodable job of q's stream. A step job (steps a, b recorded; a completed, b in
    progress) is parked as step_set_changed to a, x, b; otherwise as unknown_kind."""
    job_id = q.enqueue(b"parked", kind="etl" if step_job else "mystery", priority=255)
    (held,) = q.lease(1)
    assert held.job_id == job_id
    if step_job:
        register_etl_step_sets(dsn, H1, H2)
        q.renew(held, checkpoint=pgqueue.Checkpoint(last_completed_step="a", cursor_step="b",
                                                     step_set_hash=H1))
        reason, detail = "step_set_changed", {"old_hash": H1, "new_hash": H2}
    else:
        reason, detail = "unknown_kind", {"kind": "mystery"}
    with connection.connect(dsn) as conn:
        conn.execute("SELECT pgqueue.mark_undecodable(%s, %s, %s, %s, p_stream => %s)",
                     [job_id, held.lease_id, reason, Jsonb(detail), held.stream])
    info = q.job(job_id)
    assert info is not None and info.state == "undecodable"
    return job_id


def ops_of(q: pgqueue.Queue, job_id: int) -> list[str]:
    """The job's ops, oldest first (any stream)."""
    return [o.op for o in reversed(q.op_log(job_id=job_id, limit=100, all_streams=True))]


def state_of(q: pgqueue.Queue, job_id: int) -> str:
    info = q.job(job_id)
    assert info is not None
    return info.state


def csrf_of(c: TestClient, job_id: int) -> str:
    """The CSRF token of the client's session, as the job page's forms carry it."""
    r = c.get(f"/jobs/{job_id}")
    assert r.status_code == 200, r.text
    tokens = set(re.findall(r'<input type="hidden" name="csrf" value="([^"]*)">', r.text))
    assert len(tokens) == 1, tokens
    (token,) = tokens
    assert token
    return html.unescape(token)


def set_cookies(r: httpx2.Response) -> list[str]:
    return r.headers.get_list("set-cookie")


def act(c: TestClient, job_id: int | str, verb: str, body: Any = None,
        headers: dict[str, str] | None = None) -> httpx2.Response:
    """POST /api/jobs/{id}/{verb} with the bearer token (unless other headers are given)."""
    kwargs: dict[str, Any] = {"headers": BEARER if headers is None else headers}
    if body is not None:
        kwargs["json"] = body
    return c.post(f"/api/jobs/{job_id}/{verb}", **kwargs)


