"""The web dashboard and its HTTP API (pgqueue.dashboard), driven through Starlette's TestClient
against a real Postgres: the JSON documents, keyset paging and input checks, every operator
action with the state and op it leaves in the database, who may act (read-only, bearer token,
login session with CSRF, cross-site posts), that the token is never echoed, that job data
shows as text in the pages, bulk actions bounded by the count confirmed, schedules, workers,
replicas, the security headers and the live event stream."""
from __future__ import annotations

import asyncio
import gc
import html
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx2
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool
from starlette.testclient import TestClient

import pgqueue
from pgqueue import connection, registry
from pgqueue.dashboard import create_app
from pgqueue.models import JOB_STATES, VERBS
from tests.dbhelp import force_reclaim, op_counts, state_snapshot

TOKEN = "dashboard-admin-token-7f3a9c1e5b"  # noqa: S105 (a test token)
BEARER = {"Authorization": f"Bearer {TOKEN}"}
MAX_BIGINT = 2**63 - 1

H1, H2 = "dash-hash-one", "dash-hash-two"


# -- fixtures and helpers -----------------------------------------------------------------------


@contextmanager
def dashboard(dsn: str, token: str | None = TOKEN, *,
              raise_server_exceptions: bool = True) -> Iterator[TestClient]:
    """A TestClient on the dashboard, its lifespan running (and with it the live listener)."""
    app = create_app(dsn, admin_token=token)
    with TestClient(app, raise_server_exceptions=raise_server_exceptions) as c:
        yield c


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


def _register_step_sets(dsn: str) -> None:
    with connection.connect(dsn) as conn:
        conn.execute("SELECT pgqueue.register_step_set(%s, 'etl', %s)",
                     [H1, Jsonb([{"name": "a", "version": 1}, {"name": "b", "version": 1}])])
        conn.execute("SELECT pgqueue.register_step_set(%s, 'etl', %s)",
                     [H2, Jsonb([{"name": "a", "version": 1}, {"name": "x", "version": 1},
                                 {"name": "b", "version": 1}])])


def undecodable_job(q: pgqueue.Queue, dsn: str, *, step_job: bool = True) -> int:
    """An undecodable job of q's stream. A step job (steps a, b recorded; a completed, b in
    progress) is parked as step_set_changed to a, x, b; otherwise as unknown_kind."""
    job_id = q.enqueue(b"parked", kind="etl" if step_job else "mystery", priority=255)
    (held,) = q.lease(1)
    assert held.job_id == job_id
    if step_job:
        _register_step_sets(dsn)
        q.renew(held, checkpoint=pgqueue.Checkpoint(last_completed_step="a", cursor_step="b",
                                                     step_set_hash=H1))
        reason, detail = "step_set_changed", {"old_hash": H1, "new_hash": H2}
    else:
        reason, detail = "unknown_kind", {"kind": "mystery"}
    with connection.connect(dsn) as conn:
        conn.execute("SELECT pgqueue.mark_undecodable(%s, %s, %s, %s)",
                     [job_id, held.lease_id, reason, Jsonb(detail)])
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


# -- 1. stats -----------------------------------------------------------------------------------


def test_stats_counts_every_state_of_two_streams(client: TestClient, q: pgqueue.Queue,
                                                 dsn: str) -> None:
    alpha, beta = q.for_stream("alpha"), q.for_stream("beta")
    # beta: nothing ready (quarantine first: it reclaims every lease)
    quarantined_job(beta, dsn)
    undecodable_job(beta, dsn, step_job=False)
    dead_job(beta)
    dead_job(beta)
    beta.enqueue(b"later", delay=3600)
    # alpha: one of everything but the parked states
    dead_job(alpha)
    leased_job(alpha)
    alpha.enqueue(b"p1")
    alpha.enqueue(b"p2")
    alpha.enqueue(b"s1", delay=3600)

    r = client.get("/api/stats")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/json")
    doc = r.json()
    assert isinstance(doc["streams"], list)
    assert [s["stream"] for s in doc["streams"]] == ["alpha", "beta"]
    by_stream = {s["stream"]: s for s in doc["streams"]}
    for s in doc["streams"]:
        assert {"stream", "states", "oldest_pending_age_seconds"} <= set(s)
        assert list(s["states"]) == list(JOB_STATES)
        assert set(s["states"]) == {"pending", "scheduled", "leased", "dead", "quarantined",
                                    "undecodable"}
    assert by_stream["alpha"]["states"] == {"pending": 2, "scheduled": 1, "leased": 1, "dead": 1,
                                            "quarantined": 0, "undecodable": 0}
    assert by_stream["beta"]["states"] == {"pending": 0, "scheduled": 1, "leased": 0, "dead": 2,
                                           "quarantined": 1, "undecodable": 1}
    age = by_stream["alpha"]["oldest_pending_age_seconds"]
    assert isinstance(age, int | float) and 0 <= age < 120
    assert by_stream["beta"]["oldest_pending_age_seconds"] is None


def test_stats_of_an_empty_database(client: TestClient) -> None:
    r = client.get("/api/stats")
    assert r.status_code == 200
    assert r.json()["streams"] == []


# -- 2. the jobs list ---------------------------------------------------------------------------


def _walk(c: TestClient, query: str, limit: int) -> tuple[list[int], list[int | None]]:
    """Every job id the list gives, page by page, and each page's `next`."""
    ids: list[int] = []
    cursors: list[int | None] = []
    after: int | None = None
    for _ in range(100):
        url = f"/api/jobs?{query}&limit={limit}" + ("" if after is None else f"&after={after}")
        r = c.get(url)
        assert r.status_code == 200, r.text
        doc = r.json()
        assert set(doc) == {"jobs", "next"}
        page = [j["job_id"] for j in doc["jobs"]]
        assert len(page) <= limit
        ids += page
        cursors.append(doc["next"])
        if doc["next"] is None:
            return ids, cursors
        assert page and doc["next"] == page[-1]
        after = doc["next"]
    raise AssertionError("the pages never ended")


@pytest.fixture
def mixed_jobs(q: pgqueue.Queue) -> dict[str, int]:
    """Jobs of two streams, three kinds and four states (one dead, in the dead-letter table)."""
    other = q.for_stream("other")
    made = {
        "d_a_pending": q.enqueue(b"1", kind="a"),
        "o_b_pending": other.enqueue(b"2", kind="b"),
        "d_a_dead": dead_job(q, b"3", kind="a"),
        "d_b_scheduled": q.enqueue(b"4", kind="b", delay=3600),
        "o_a_pending": other.enqueue(b"5", kind="a"),
        "d_none_pending": q.enqueue(b"6"),
    }
    made["o_a_leased"] = other.enqueue(b"7", kind="a", priority=255)
    (held,) = other.lease(1)
    assert held.job_id == made["o_a_leased"]
    ids = list(made.values())
    assert ids == sorted(ids)
    return made


@pytest.mark.parametrize("limit", [1, 2, 3, 7, 1000])
def test_keyset_paging_walks_every_job_newest_first_once(client: TestClient,
                                                         mixed_jobs: dict[str, int],
                                                         limit: int) -> None:
    everything = sorted(mixed_jobs.values(), reverse=True)
    ids, cursors = _walk(client, "", limit)
    assert ids == everything  # newest first, no duplicate, no gap
    assert cursors[-1] is None
    assert all(cursor is not None for cursor in cursors[:-1])
    pages = -(-len(everything) // limit)
    assert len(cursors) == pages  # no empty page at the end, also when the last page is full


def test_the_default_page_and_after_past_the_oldest(client: TestClient,
                                                    mixed_jobs: dict[str, int]) -> None:
    r = client.get("/api/jobs")
    assert r.status_code == 200
    doc = r.json()
    assert [j["job_id"] for j in doc["jobs"]] == sorted(mixed_jobs.values(), reverse=True)
    assert doc["next"] is None
    oldest = min(mixed_jobs.values())
    r = client.get(f"/api/jobs?after={oldest}")
    assert r.status_code == 200
    assert r.json() == {"jobs": [], "next": None}


def test_jobs_filter_by_stream_state_and_kind(client: TestClient,
                                              mixed_jobs: dict[str, int]) -> None:
    m = mixed_jobs

    def listed(query: str) -> list[tuple[int, str]]:
        r = client.get(f"/api/jobs?{query}")
        assert r.status_code == 200, r.text
        return [(j["job_id"], j["state"]) for j in r.json()["jobs"]]

    assert listed("stream=other") == [(m["o_a_leased"], "leased"), (m["o_a_pending"], "pending"),
                                      (m["o_b_pending"], "pending")]
    assert listed("state=dead") == [(m["d_a_dead"], "dead")]
    assert listed("state=leased") == [(m["o_a_leased"], "leased")]
    assert listed("state=scheduled") == [(m["d_b_scheduled"], "scheduled")]
    assert listed("state=quarantined") == []
    assert listed("kind=a") == [(m["o_a_leased"], "leased"), (m["o_a_pending"], "pending"),
                                (m["d_a_dead"], "dead"), (m["d_a_pending"], "pending")]
    assert listed("stream=default&kind=a&state=pending") == [(m["d_a_pending"], "pending")]
    assert listed("stream=default&state=dead&kind=b") == []
    assert listed("stream=nowhere") == []
    # an empty parameter means "any"
    assert len(listed("stream=&state=&kind=")) == len(m)
    # a dead letter is listed with everything it has
    r = client.get("/api/jobs?state=dead")
    (job,) = r.json()["jobs"]
    assert (job["stream"], job["kind"], job["payload"], job["last_error"]) == (
        "default", "a", "3", "it failed")
    assert job["died_at"] is not None


def test_paging_within_a_filter(client: TestClient, mixed_jobs: dict[str, int]) -> None:
    ids, cursors = _walk(client, "kind=a", 1)
    m = mixed_jobs
    assert ids == [m["o_a_leased"], m["o_a_pending"], m["d_a_dead"], m["d_a_pending"]]
    assert cursors == [m["o_a_leased"], m["o_a_pending"], m["d_a_dead"], None]


@pytest.mark.parametrize(("query", "parameter"), [
    ("state=bogus", "state"),
    ("state=acked", "state"),
    ("limit=0", "limit"),
    ("limit=1001", "limit"),
    ("limit=abc", "limit"),
    ("limit=-5", "limit"),
    ("limit=2.5", "limit"),
    ("after=-1", "after"),
    ("after=abc", "after"),
    ("after=0", "after"),
    (f"after={MAX_BIGINT + 1}", "after"),
    ("stream=" + "s" * 201, "stream"),
])
def test_jobs_refuses_bad_parameters_naming_them(client: TestClient, query: str,
                                                 parameter: str) -> None:
    r = client.get(f"/api/jobs?{query}")
    assert r.status_code == 400, r.text
    doc = r.json()
    assert doc["status"] == 400
    assert doc["error"].startswith(parameter), doc
    # the page answers the same status
    page = client.get(f"/jobs?{query}")
    assert page.status_code == 400
    assert "text/html" in page.headers["content-type"]


def test_the_limit_bounds_are_accepted(client: TestClient, q: pgqueue.Queue) -> None:
    q.enqueue(b"x")
    for limit in (1, 1000):
        r = client.get(f"/api/jobs?limit={limit}")
        assert r.status_code == 200
        assert len(r.json()["jobs"]) == 1


# -- 3. one job ---------------------------------------------------------------------------------


def test_one_job_with_its_history_oldest_first(client: TestClient, q: pgqueue.Queue) -> None:
    job_id = q.enqueue(b"hello", kind="greet")
    (held,) = q.lease(1)
    assert q.nack(held, error="try again", retry_in=3600) is False
    r = client.get(f"/api/jobs/{job_id}")
    assert r.status_code == 200
    doc = r.json()
    assert (doc["job_id"], doc["state"]) == (job_id, "scheduled")
    job = doc["job"]
    assert (job["job_id"], job["stream"], job["kind"], job["state"], job["payload"],
            job["payload_size"], job["attempts"], job["last_error"]) == (
        job_id, "default", "greet", "scheduled", "hello", 5, 1, "try again")
    assert doc["steps"] is None
    history = doc["history"]
    assert (history["job_id"], history["state"], history["ops_pruned"]) == (
        job_id, "scheduled", False)
    ops = [o["op"] for o in history["ops"]]
    assert ops[0] == "Enqueue"
    assert ops == ops_of(q, job_id) == ["Enqueue", "Lease", "Nack"]
    seqs = [o["seq"] for o in history["ops"]]
    assert seqs == sorted(seqs)
    assert all(o["job_id"] == job_id for o in history["ops"])


def test_an_acked_job_keeps_its_history(client: TestClient, q: pgqueue.Queue) -> None:
    job_id = q.enqueue(b"done")
    (held,) = q.lease(1)
    q.ack(held)
    assert q.job(job_id) is None
    r = client.get(f"/api/jobs/{job_id}")
    assert r.status_code == 200
    doc = r.json()
    assert doc["job"] is None
    assert doc["state"] == "acked"
    assert doc["history"]["state"] == "acked"
    assert doc["history"]["finished_at"] is not None
    assert [o["op"] for o in doc["history"]["ops"]] == ["Enqueue", "Lease", "Ack"]
    page = client.get(f"/jobs/{job_id}")
    assert page.status_code == 200
    assert "acked" in page.text


def test_a_step_job_shows_its_steps(client: TestClient, q: pgqueue.Queue, dsn: str) -> None:
    job_id = undecodable_job(q.for_stream("steps"), dsn)
    r = client.get(f"/api/jobs/{job_id}")
    assert r.status_code == 200
    doc = r.json()
    assert doc["state"] == "undecodable"
    assert doc["job"]["state_reason"] == "step_set_changed"
    assert doc["steps"] == [
        {"name": "a", "version": 1, "status": "completed", "crashes": 0},
        {"name": "b", "version": 1, "status": "in progress", "crashes": 0},
    ]


@pytest.mark.parametrize(("text", "status"), [
    ("123456789", 404),
    (str(MAX_BIGINT), 404),
    ("abc", 400),
    ("0", 400),
    ("-3", 400),
    ("1e3", 400),
    (str(MAX_BIGINT + 1), 400),
    ("99999999999999999999999999", 400),
])
def test_one_job_by_a_bad_or_unknown_id(client: TestClient, text: str, status: int) -> None:
    r = client.get(f"/api/jobs/{text}")
    assert r.status_code == status, r.text
    assert r.json()["status"] == status
    if status == 400:
        assert r.json()["error"].startswith("id ")
    else:
        assert text in r.json()["error"]
    page = client.get(f"/jobs/{text}")
    assert page.status_code == status
    assert "text/html" in page.headers["content-type"]


# -- 4. actions ---------------------------------------------------------------------------------


def test_requeue_a_dead_letter(client: TestClient, q: pgqueue.Queue) -> None:
    job_id = dead_job(q)
    r = act(client, job_id, "requeue")
    assert r.status_code == 200, r.text
    doc = r.json()
    assert (doc["job_id"], doc["state"]) == (job_id, "pending")
    assert doc["job"]["state"] == "pending"
    info = q.job(job_id)
    assert info is not None and (info.state, info.attempts) == ("pending", 0)
    assert ops_of(q, job_id)[-1] == "RequeueDeadLetter"


def test_requeue_a_pending_job_is_a_conflict(client: TestClient, q: pgqueue.Queue,
                                             dsn: str) -> None:
    job_id = q.enqueue(b"x")
    before = state_snapshot(dsn), op_counts(dsn)
    r = act(client, job_id, "requeue")
    assert r.status_code == 409
    assert r.json() == {"status": 409, "error": f"cannot requeue job {job_id}: it is pending, "
                                                f"not dead; only dead letters are requeued"}
    assert (state_snapshot(dsn), op_counts(dsn)) == before


def test_release_a_quarantined_job(client: TestClient, q: pgqueue.Queue, dsn: str) -> None:
    job_id = quarantined_job(q.for_stream("fragile"), dsn)
    r = act(client, job_id, "release")
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "pending"
    assert state_of(q, job_id) == "pending"
    assert ops_of(q, job_id)[-1] == "Release"


def test_release_an_undecodable_job(client: TestClient, q: pgqueue.Queue, dsn: str) -> None:
    job_id = undecodable_job(q, dsn, step_job=False)
    assert ops_of(q, job_id)[-1] == "MarkUndecodable"
    r = act(client, job_id, "release")
    assert r.status_code == 200, r.text
    assert (r.json()["state"], r.json()["job"]["state_reason"]) == ("pending", None)
    assert state_of(q, job_id) == "pending"
    assert ops_of(q, job_id)[-1] == "Release"


def test_release_a_pending_job_is_a_conflict(client: TestClient, q: pgqueue.Queue) -> None:
    job_id = q.enqueue(b"x")
    r = act(client, job_id, "release")
    assert r.status_code == 409
    assert r.json()["error"] == (f"cannot release job {job_id}: it is pending, and release "
                                 "applies only to quarantined or undecodable jobs")


def test_rewind_a_step_job(client: TestClient, q: pgqueue.Queue, dsn: str) -> None:
    job_id = undecodable_job(q.for_stream("steps"), dsn)
    r = act(client, job_id, "rewind", {"to_step": "a"})
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "pending"
    info = q.job(job_id)
    assert info is not None
    assert (info.state, info.checkpoint.last_completed_step, info.checkpoint.cursor_step) == (
        "pending", None, None)
    assert ops_of(q, job_id)[-1] == "Rewind"


def test_rewind_to_a_step_the_job_does_not_have(client: TestClient, q: pgqueue.Queue,
                                                dsn: str) -> None:
    job_id = undecodable_job(q.for_stream("steps"), dsn)
    plain = q.enqueue(b"no steps")
    before = state_snapshot(dsn), op_counts(dsn)
    r = act(client, job_id, "rewind", {"to_step": "zzz"})
    assert r.status_code == 409, r.text
    assert r.json()["error"] == f"cannot rewind job {job_id} to step 'zzz': its steps are a, b"
    r = act(client, plain, "rewind", {"to_step": "a"})
    assert r.status_code == 409, r.text
    assert "no recorded step list" in r.json()["error"]
    assert (state_snapshot(dsn), op_counts(dsn)) == before
    assert state_of(q, job_id) == "undecodable"


def test_restart_a_step_job(client: TestClient, q: pgqueue.Queue, dsn: str) -> None:
    job_id = undecodable_job(q.for_stream("steps"), dsn)
    r = act(client, job_id, "restart")
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "pending"
    info = q.job(job_id)
    assert info is not None and info.state == "pending"
    assert (info.checkpoint.last_completed_step, info.checkpoint.step_set_hash) == (None, None)
    assert ops_of(q, job_id)[-1] == "Restart"


def test_skip_the_step_in_progress(client: TestClient, q: pgqueue.Queue, dsn: str) -> None:
    job_id = undecodable_job(q.for_stream("steps"), dsn)
    r = act(client, job_id, "skip-step")
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "pending"
    assert r.json()["job"]["checkpoint"]["last_completed_step"] == "b"
    info = q.job(job_id)
    assert info is not None
    assert (info.state, info.checkpoint.last_completed_step) == ("pending", "b")
    (op,) = q.op_log(job_id=job_id, limit=1, all_streams=True)
    assert (op.op, op.body.get("skipped")) == ("SkipStep", "b")


def test_skip_step_on_a_leased_job_is_a_conflict(client: TestClient, q: pgqueue.Queue) -> None:
    job_id = leased_job(q)
    r = act(client, job_id, "skip-step")
    assert r.status_code == 409
    assert "leased" in r.json()["error"]
    assert state_of(q, job_id) == "leased"


def test_accept_the_new_step_set(client: TestClient, q: pgqueue.Queue, dsn: str) -> None:
    job_id = undecodable_job(q.for_stream("steps"), dsn)
    r = act(client, job_id, "accept-step-set")
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "pending"
    info = q.job(job_id)
    assert info is not None
    assert (info.state, info.checkpoint.step_set_hash, info.checkpoint.last_completed_step) == (
        "pending", H2, "a")
    assert ops_of(q, job_id)[-1] == "AcceptStepSet"


def test_accept_step_set_when_the_step_set_did_not_change(client: TestClient, q: pgqueue.Queue,
                                                          dsn: str) -> None:
    pending = q.enqueue(b"x")
    r = act(client, pending, "accept-step-set")
    assert r.status_code == 409
    assert r.json()["error"] == (f"cannot accept the step set of job {pending}: it is pending, "
                                 "and accept-step-set applies only to undecodable jobs")
    other = undecodable_job(q, dsn, step_job=False)  # undecodable, but for unknown_kind
    r = act(client, other, "accept-step-set")
    assert r.status_code == 409
    assert "not step_set_changed" in r.json()["error"]
    assert state_of(q, other) == "undecodable"
    assert ops_of(q, other)[-1] == "MarkUndecodable"


def test_cancel_a_pending_job(client: TestClient, q: pgqueue.Queue) -> None:
    job_id = q.enqueue(b"x")
    r = act(client, job_id, "cancel")
    assert r.status_code == 200, r.text
    assert r.json() == {"job_id": job_id, "state": "cancelled", "job": None}
    assert q.job(job_id) is None
    history = q.history(job_id)
    assert history is not None and history.state == "cancelled"
    assert ops_of(q, job_id) == ["Enqueue", "Cancel"]
    r = client.get(f"/api/jobs/{job_id}")
    assert r.status_code == 200
    assert (r.json()["job"], r.json()["state"]) == (None, "cancelled")
    # cancelled twice: there is nothing left to cancel
    assert act(client, job_id, "cancel").status_code == 404


def test_cancel_a_dead_letter(client: TestClient, q: pgqueue.Queue) -> None:
    job_id = dead_job(q)
    r = act(client, job_id, "cancel")
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "cancelled"
    assert q.job(job_id) is None
    assert ops_of(q, job_id)[-1] == "Cancel"


def test_cancel_a_leased_job_is_a_conflict(client: TestClient, q: pgqueue.Queue,
                                           dsn: str) -> None:
    job_id = leased_job(q)
    before = state_snapshot(dsn), op_counts(dsn)
    r = act(client, job_id, "cancel")
    assert r.status_code == 409
    assert r.json()["error"].startswith(f"cannot cancel job {job_id}: it is leased")
    assert state_of(q, job_id) == "leased"
    assert (state_snapshot(dsn), op_counts(dsn)) == before


@pytest.mark.parametrize("verb", VERBS)
def test_every_action_on_an_unknown_job_is_404(client: TestClient, q: pgqueue.Queue,
                                               verb: str) -> None:
    q.enqueue(b"x")
    r = act(client, 987654321, verb, {"to_step": "a"} if verb == "rewind" else None)
    assert r.status_code == 404, r.text
    assert r.json()["status"] == 404
    assert "987654321" in r.json()["error"]


def test_bad_action_requests(client: TestClient, q: pgqueue.Queue, dsn: str) -> None:
    job_id = undecodable_job(q.for_stream("steps"), dsn)
    before = state_snapshot(dsn), op_counts(dsn)

    r = act(client, job_id, "explode")
    assert r.status_code == 400
    assert r.json()["error"].startswith("action must be one of requeue, release, rewind")

    r = act(client, job_id, "rewind")
    assert r.status_code == 400
    assert "to_step is required" in r.json()["error"]
    r = act(client, job_id, "rewind", {})
    assert r.status_code == 400
    assert "to_step" in r.json()["error"]
    r = act(client, job_id, "rewind", {"to_step": ""})
    assert r.status_code == 400
    assert "to_step" in r.json()["error"]
    r = act(client, job_id, "rewind", {"to_step": 7})
    assert r.status_code == 400
    assert "to_step must be a string" in r.json()["error"]
    r = act(client, job_id, "release", {"to_step": "a"})
    assert r.status_code == 400
    assert "to_step is for rewind only" in r.json()["error"]

    for raw in (b"not json", b"{", b"\xff\xfe", b"[1, 2]", b'"a"', b"3"):
        r = client.post(f"/api/jobs/{job_id}/rewind", content=raw,
                        headers={**BEARER, "content-type": "application/json"})
        assert r.status_code == 400, (raw, r.text)
        assert r.json()["error"] == "the request body must be a JSON object"

    for text in ("abc", "0", str(MAX_BIGINT + 1)):
        r = act(client, text, "cancel")
        assert r.status_code == 400
        assert r.json()["error"].startswith("id ")

    assert client.get(f"/api/jobs/{job_id}/cancel").status_code == 405
    assert (state_snapshot(dsn), op_counts(dsn)) == before


# -- 5. who may act -----------------------------------------------------------------------------


@pytest.mark.parametrize("verb", VERBS)
def test_read_only_refuses_every_action(read_only: TestClient, q: pgqueue.Queue, dsn: str,
                                        verb: str) -> None:
    dead = dead_job(q)
    pending = q.enqueue(b"x")
    before = state_snapshot(dsn), op_counts(dsn)
    body = {"to_step": "a"} if verb == "rewind" else None
    for job_id in (dead, pending):
        for headers in ({}, BEARER):
            r = act(read_only, job_id, verb, body, headers=headers)
            assert r.status_code == 403, r.text
            assert "read-only" in r.json()["error"]
        page = read_only.post(f"/jobs/{job_id}/{verb}", data={"csrf": "x", "to_step": "a"})
        assert page.status_code == 403
        assert "read-only" in page.text
    r = read_only.post("/bulk", data={"state": "dead", "action": verb, "through": str(dead)})
    assert r.status_code == 403
    assert (state_snapshot(dsn), op_counts(dsn)) == before
    assert state_of(q, dead) == "dead"
    assert state_of(q, pending) == "pending"


def test_read_only_pages_offer_no_actions(read_only: TestClient, q: pgqueue.Queue) -> None:
    job_id = dead_job(q)
    page = read_only.get(f"/jobs/{job_id}")
    assert page.status_code == 200
    assert 'id="actions"' not in page.text
    assert "read-only" in page.text
    login = read_only.post("/login", data={"token": TOKEN}, follow_redirects=False)
    assert login.status_code == 403
    assert not set_cookies(login)


def test_bearer_token(client: TestClient, q: pgqueue.Queue, dsn: str) -> None:
    job_id = q.enqueue(b"x")
    before = state_snapshot(dsn), op_counts(dsn)
    for headers in ({}, {"Authorization": "Bearer wrong-token-but-long-enough"},
                    {"Authorization": f"Bearer {TOKEN}x"}, {"Authorization": f"Basic {TOKEN}"},
                    {"Authorization": TOKEN}, {"Authorization": "Bearer "}):
        r = act(client, job_id, "cancel", headers=headers)
        assert r.status_code == 401, (headers, r.text)
        assert r.json()["status"] == 401
    assert (state_snapshot(dsn), op_counts(dsn)) == before
    r = act(client, job_id, "cancel", headers={"Authorization": f"bearer {TOKEN}"})
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "cancelled"
    assert q.job(job_id) is None


def test_login_session_and_csrf(dsn: str, q: pgqueue.Queue) -> None:
    job_id = q.enqueue(b"x")
    other = q.enqueue(b"y")
    with dashboard(dsn) as c:
        assert c.get("/login").status_code == 200
        wrong = c.post("/login", data={"token": "not-the-token-at-all", "next": "/jobs"},
                       follow_redirects=False)
        assert wrong.status_code == 401
        assert not set_cookies(wrong)
        assert "not the admin token" in wrong.text
        assert not c.cookies

        right = c.post("/login", data={"token": TOKEN, "next": f"/jobs/{job_id}"},
                       follow_redirects=False)
        assert right.status_code == 303
        assert right.headers["location"] == f"/jobs/{job_id}"
        (cookie,) = set_cookies(right)
        assert cookie.startswith("pgqueue_session=")
        attributes = [a.strip().lower() for a in cookie.split(";")[1:]]
        assert "httponly" in attributes
        assert "samesite=strict" in attributes
        assert "path=/" in attributes
        assert c.cookies.get("pgqueue_session")

        before = state_snapshot(dsn), op_counts(dsn)
        r = c.post(f"/api/jobs/{job_id}/cancel")
        assert r.status_code == 403, r.text
        assert "CSRF" in r.json()["error"]
        r = c.post(f"/api/jobs/{job_id}/cancel", headers={"X-CSRF-Token": "0" * 64})
        assert r.status_code == 403
        assert (state_snapshot(dsn), op_counts(dsn)) == before

        csrf = csrf_of(c, job_id)
        assert csrf == csrf_of(c, other)  # one per session
        r = c.post(f"/api/jobs/{job_id}/cancel", headers={"X-CSRF-Token": csrf})
        assert r.status_code == 200, r.text
        assert r.json()["state"] == "cancelled"
        assert q.job(job_id) is None

        # a wrong bearer token is refused even with a good session
        r = c.post(f"/api/jobs/{other}/cancel",
                   headers={"X-CSRF-Token": csrf, "Authorization": "Bearer nope-nope-nope-nope"})
        assert r.status_code == 401
        assert state_of(q, other) == "pending"

        # the CSRF token of one session is no good with another
        c.cookies.clear()
        again = c.post("/login", data={"token": TOKEN}, follow_redirects=False)
        assert again.status_code == 303
        r = c.post(f"/api/jobs/{other}/cancel", headers={"X-CSRF-Token": csrf})
        assert r.status_code == 403
        assert state_of(q, other) == "pending"

        # logged out: the cookie is gone
        out = c.post("/logout", headers={"X-CSRF-Token": csrf_of(c, other)},
                     follow_redirects=False)
        assert out.status_code == 303
        assert not c.cookies.get("pgqueue_session")
        r = c.post(f"/api/jobs/{other}/cancel", headers={"X-CSRF-Token": csrf})
        assert r.status_code == 401
        assert state_of(q, other) == "pending"


def test_a_forged_session_cookie_is_no_session(client: TestClient, q: pgqueue.Queue) -> None:
    job_id = q.enqueue(b"x")
    for value in ("1.2.3", "garbage", "9999999999.abc.def", ""):
        client.cookies.set("pgqueue_session", value)
        r = client.post(f"/api/jobs/{job_id}/cancel", headers={"X-CSRF-Token": "x"})
        assert r.status_code == 401, (value, r.text)
    client.cookies.clear()
    assert state_of(q, job_id) == "pending"


def test_a_session_of_another_token_is_no_session(dsn: str, q: pgqueue.Queue) -> None:
    job_id = q.enqueue(b"x")
    with dashboard(dsn, "some-other-token-0123456789") as first:
        r = first.post("/login", data={"token": "some-other-token-0123456789"},
                       follow_redirects=False)
        assert r.status_code == 303
        cookie = first.cookies["pgqueue_session"]
        csrf = csrf_of(first, job_id)
    with dashboard(dsn) as second:
        second.cookies.set("pgqueue_session", cookie)
        r = second.post(f"/api/jobs/{job_id}/cancel", headers={"X-CSRF-Token": csrf})
        assert r.status_code == 401
    assert state_of(q, job_id) == "pending"


def test_a_cross_site_post_is_refused_even_with_the_token(session: TestClient, q: pgqueue.Queue,
                                                          dsn: str) -> None:
    job_id = q.enqueue(b"x")
    csrf = csrf_of(session, job_id)
    before = state_snapshot(dsn), op_counts(dsn)
    evil = {"Origin": "http://evil.example"}
    r = act(session, job_id, "cancel", headers={**BEARER, **evil})
    assert r.status_code == 403
    assert "cross-site" in r.json()["error"]
    r = act(session, job_id, "cancel", headers={"X-CSRF-Token": csrf, **evil})
    assert r.status_code == 403
    page = session.post(f"/jobs/{job_id}/cancel", data={"csrf": csrf}, headers=evil,
                        follow_redirects=False)
    assert page.status_code == 403
    login = session.post("/login", data={"token": TOKEN}, headers=evil, follow_redirects=False)
    assert login.status_code == 403
    assert not set_cookies(login)
    assert (state_snapshot(dsn), op_counts(dsn)) == before
    # the site's own origin is fine
    r = act(session, job_id, "cancel", headers={**BEARER, "Origin": "http://testserver"})
    assert r.status_code == 200
    assert q.job(job_id) is None


@pytest.mark.parametrize("token", ["short-token-123", "   abcdefghijklmno   ", " " * 40, ""])
def test_a_short_token_is_refused_without_being_named(dsn: str, token: str) -> None:
    with pytest.raises(ValueError, match="at least 16 characters") as caught:
        create_app(dsn, admin_token=token)
    if token.strip():
        assert token.strip() not in str(caught.value)
        assert token.strip() not in repr(caught.value)


# -- 6. the token is never echoed ---------------------------------------------------------------


def test_the_token_is_never_echoed(dsn: str, q: pgqueue.Queue) -> None:
    job_id = q.enqueue(b"x")
    dead = dead_job(q)
    q.upsert_schedule("nightly", "0 3 * * *")
    wrong_token = "an-attacker-guess-0123456789"  # noqa: S105
    seen: list[httpx2.Response] = []
    with dashboard(dsn) as c:
        seen.append(c.post("/login", data={"token": wrong_token}, follow_redirects=False))
        seen.append(c.post("/login", data={"token": TOKEN, "next": "/jobs"},
                           follow_redirects=False))
        for path in ("/", "/jobs", f"/jobs/{job_id}", f"/jobs/{dead}", "/schedules", "/workers",
                     "/replicas", "/login", "/api/stats", "/api/jobs",
                     f"/api/jobs/{job_id}", "/api/schedules", "/api/workers", "/api/replicas",
                     "/nowhere", "/api/nowhere", "/bulk?state=dead&action=requeue"):
            seen.append(c.get(path))
        seen.append(c.post(f"/api/jobs/{job_id}/cancel", headers={"Authorization": "Bearer x"}))
        seen.append(c.post(f"/api/jobs/{job_id}/cancel"))  # session, no CSRF
        seen.append(c.post(f"/api/jobs/{job_id}/cancel", headers=BEARER))
        seen.append(c.post(f"/api/jobs/{dead}/requeue", headers=BEARER))
        seen.append(c.post(f"/jobs/{dead}/cancel", data={"csrf": "wrong"}))
        seen.append(c.post("/api/schedules/default/nightly/pause", headers=BEARER))
    assert all(r.status_code < 500 for r in seen), [(r.url, r.status_code) for r in seen]
    assert any(set_cookies(r) for r in seen)
    for r in seen:
        assert TOKEN not in r.text, r.url
        assert wrong_token not in r.text, r.url
        for name, value in r.headers.multi_items():
            assert TOKEN not in value, (r.url, name)
            assert wrong_token not in value, (r.url, name)


# -- 7. job data shows as text ------------------------------------------------------------------


def test_job_data_is_escaped_in_the_pages(client: TestClient, q: pgqueue.Queue) -> None:
    kind = "<script>alert(1)</script>"
    payload = "<img src=x onerror=alert(1)>"
    job_id = q.enqueue(payload, kind=kind)
    dead = dead_job(q, payload, kind=kind)
    escaped_kind = "&lt;script&gt;alert(1)&lt;/script&gt;"
    escaped_payload = "&lt;img src=x onerror=alert(1)&gt;"
    pages = {
        "/jobs": client.get("/jobs"),
        "job": client.get(f"/jobs/{job_id}"),
        "dead": client.get(f"/jobs/{dead}"),
        "filtered": client.get("/jobs", params={"kind": kind}),
        "bulk": client.get("/bulk", params={"kind": kind, "action": "cancel"}),
    }
    for name, page in pages.items():
        assert page.status_code == 200, (name, page.text)
        assert "<script>alert(1)" not in page.text, name
        assert "<img src=x" not in page.text, name
        assert escaped_kind in page.text, name
    for name in ("/jobs", "job", "dead", "filtered"):
        assert escaped_payload in pages[name].text, name
    assert pages["/jobs"].text.count(escaped_kind) == 2
    # the JSON has the data as it is
    r = client.get(f"/api/jobs/{job_id}")
    assert (r.json()["job"]["kind"], r.json()["job"]["payload"]) == (kind, payload)


def test_an_error_page_escapes_the_path(client: TestClient) -> None:
    r = client.get("/nowhere/<script>alert(1)</script>")
    assert r.status_code == 404
    assert "<script>alert(1)" not in r.text
    r = client.get("/jobs/<b>x")
    assert r.status_code == 400
    assert "<b>x" not in r.text
    assert "&lt;b&gt;x" in r.text
    r = client.get("/jobs/1/<b>x")  # a route for POST only
    assert r.status_code == 405
    assert "<b>x" not in r.text


# -- 8. forms -----------------------------------------------------------------------------------


def test_the_requeue_form(session: TestClient, q: pgqueue.Queue, dsn: str) -> None:
    job_id = dead_job(q)
    csrf = csrf_of(session, job_id)

    before = state_snapshot(dsn), op_counts(dsn)
    refused = session.post(f"/jobs/{job_id}/requeue", data={}, follow_redirects=False)
    assert refused.status_code == 403
    assert "text/html" in refused.headers["content-type"]
    assert "CSRF" in refused.text
    refused = session.post(f"/jobs/{job_id}/requeue", data={"csrf": csrf + "0"},
                           follow_redirects=False)
    assert refused.status_code == 403
    assert (state_snapshot(dsn), op_counts(dsn)) == before
    assert state_of(q, job_id) == "dead"

    r = session.post(f"/jobs/{job_id}/requeue", data={"csrf": csrf, "action": "requeue"},
                     follow_redirects=False)
    assert r.status_code == 303, r.text
    assert r.headers["location"] == f"/jobs/{job_id}?done=requeue"
    assert state_of(q, job_id) == "pending"
    assert ops_of(q, job_id)[-1] == "RequeueDeadLetter"
    shown = session.get(r.headers["location"])
    assert shown.status_code == 200
    assert f"Job {job_id}: requeued." in shown.text

    # once more: it no longer fits, and the page says why
    again = session.post(f"/jobs/{job_id}/requeue", data={"csrf": csrf}, follow_redirects=False)
    assert again.status_code == 409
    assert "not dead" in again.text


def test_the_rewind_form(session: TestClient, q: pgqueue.Queue, dsn: str) -> None:
    job_id = undecodable_job(q.for_stream("steps"), dsn)
    page = session.get(f"/jobs/{job_id}")
    assert '<option value="a">a</option>' in page.text
    csrf = csrf_of(session, job_id)
    r = session.post(f"/jobs/{job_id}/rewind", data={"csrf": csrf}, follow_redirects=False)
    assert r.status_code == 400
    assert "to_step is required" in r.text
    r = session.post(f"/jobs/{job_id}/rewind", data={"csrf": csrf, "to_step": "a"},
                     follow_redirects=False)
    assert r.status_code == 303
    assert r.headers["location"] == f"/jobs/{job_id}?done=rewind"
    assert ops_of(q, job_id)[-1] == "Rewind"


def test_a_form_with_the_bearer_token(client: TestClient, q: pgqueue.Queue) -> None:
    job_id = q.enqueue(b"x")
    r = client.post(f"/jobs/{job_id}/cancel", data={}, follow_redirects=False)
    assert r.status_code == 401
    assert "Log in with the admin token" in r.text
    r = client.post(f"/jobs/{job_id}/cancel", data={}, headers=BEARER, follow_redirects=False)
    assert r.status_code == 303
    assert q.job(job_id) is None


def _hidden_fields(page: str, form_id: str) -> dict[str, str]:
    match = re.search(rf'<form [^>]*id="{form_id}">(.*?)</form>', page, re.S)
    assert match, page
    return {name: html.unescape(value) for name, value in
            re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', match.group(1))}


def test_bulk_requeue_touches_only_the_jobs_counted(session: TestClient, q: pgqueue.Queue,
                                                    dsn: str) -> None:
    counted = [dead_job(q, f"dead {i}") for i in range(3)]
    other_stream = dead_job(q.for_stream("elsewhere"))
    counted.append(other_stream)
    live = q.enqueue(b"live")

    confirm = session.get("/bulk", params={"state": "dead", "action": "requeue"})
    assert confirm.status_code == 200, confirm.text
    assert "This will requeue <strong>4</strong> jobs" in confirm.text
    fields = _hidden_fields(confirm.text, "bulk-confirm")
    # the bound is the newest job id there is (jobs_count's `newest`), the live one's here
    assert int(fields["through"]) == live
    assert (fields["state"], fields["action"], fields["stream"], fields["kind"]) == (
        "dead", "requeue", "", "")
    assert fields["csrf"]

    late = dead_job(q, b"died after the count")
    assert late > int(fields["through"]) >= max(counted)

    r = session.post("/bulk", data=fields)
    assert r.status_code == 200, r.text
    assert "requeue: 4 jobs done" in r.text
    for job_id in counted:
        assert state_of(q, job_id) == "pending"
        assert ops_of(q, job_id)[-1] == "RequeueDeadLetter"
    assert state_of(q, late) == "dead"
    assert state_of(q, live) == "pending"
    assert ops_of(q, live) == ["Enqueue"]


def test_bulk_within_a_stream_and_refusals(session: TestClient, q: pgqueue.Queue,
                                           dsn: str) -> None:
    mine = [q.enqueue(b"a"), q.enqueue(b"b")]
    leased = leased_job(q)
    theirs = q.for_stream("theirs").enqueue(b"c")
    confirm = session.get("/bulk", params={"stream": "default", "action": "cancel"})
    assert "This will cancel <strong>3</strong> jobs" in confirm.text
    fields = _hidden_fields(confirm.text, "bulk-confirm")
    r = session.post("/bulk", data=fields)
    assert r.status_code == 200, r.text
    assert "cancel: 2 jobs done" in r.text
    assert "1 refused" in r.text
    assert f'<a href="/jobs/{leased}">{leased}</a>' in r.text
    assert all(q.job(j) is None for j in mine)
    assert state_of(q, leased) == "leased"
    assert state_of(q, theirs) == "pending"

    none = session.get("/bulk", params={"state": "quarantined", "action": "release"})
    assert none.status_code == 200
    assert "No job matches" in none.text
    assert 'id="bulk-confirm"' not in none.text

    missing = session.post("/bulk", data={**fields, "through": ""})
    assert missing.status_code == 400
    assert "through is required" in missing.text
    no_csrf = session.post("/bulk", data={**fields, "csrf": ""})
    assert no_csrf.status_code == 403
    bad = session.get("/bulk", params={"state": "dead", "action": "explode"})
    assert bad.status_code == 400
    assert state_of(q, theirs) == "pending"


# -- 9. schedules -------------------------------------------------------------------------------


def test_schedules_pause_and_resume(client: TestClient, read_only: TestClient,
                                    q: pgqueue.Queue) -> None:
    q.upsert_schedule("nightly", "0 3 * * *")
    r = client.get("/api/schedules")
    assert r.status_code == 200
    (s,) = r.json()["schedules"]
    assert (s["stream"], s["name"], s["cron"], s["paused"]) == (
        "default", "nightly", "0 3 * * *", False)

    r = client.post("/api/schedules/default/nightly/pause")
    assert r.status_code == 401
    r = client.post("/api/schedules/default/nightly/pause", headers=BEARER)
    assert r.status_code == 200, r.text
    assert (r.json()["schedule"]["name"], r.json()["schedule"]["paused"]) == ("nightly", True)
    found = q.schedule("nightly")
    assert found is not None and found.paused
    assert client.get("/api/schedules").json()["schedules"][0]["paused"] is True

    r = read_only.post("/api/schedules/default/nightly/resume", headers=BEARER)
    assert r.status_code == 403
    found = q.schedule("nightly")
    assert found is not None and found.paused

    r = client.post("/api/schedules/default/nightly/resume", headers=BEARER)
    assert r.status_code == 200, r.text
    assert r.json()["schedule"]["paused"] is False
    found = q.schedule("nightly")
    assert found is not None and not found.paused

    for path in ("/api/schedules/default/weekly/pause", "/api/schedules/other/nightly/pause",
                 "/api/schedules/default/weekly/resume"):
        r = client.post(path, headers=BEARER)
        assert r.status_code == 404, (path, r.text)
        assert r.json()["status"] == 404
    r = read_only.post("/api/schedules/default/nightly/pause", headers=BEARER)
    assert r.status_code == 403
    found = q.schedule("nightly")
    assert found is not None and not found.paused

    page = client.get("/schedules")
    assert page.status_code == 200
    assert 'data-schedule="default/nightly"' in page.text


def test_the_schedule_form(session: TestClient, q: pgqueue.Queue) -> None:
    q.upsert_schedule("nightly", "0 3 * * *")
    job_id = q.enqueue(b"x")
    csrf = csrf_of(session, job_id)
    r = session.post("/schedules/default/nightly/pause", data={}, follow_redirects=False)
    assert r.status_code == 403
    found = q.schedule("nightly")
    assert found is not None and not found.paused
    r = session.post("/schedules/default/nightly/pause", data={"csrf": csrf},
                     follow_redirects=False)
    assert r.status_code == 303
    assert r.headers["location"] == "/schedules"
    found = q.schedule("nightly")
    assert found is not None and found.paused


# -- 10. workers and replicas -------------------------------------------------------------------


def test_workers_and_replicas(client: TestClient, dsn: str) -> None:
    r = client.get("/api/workers")
    assert r.status_code == 200
    assert r.json()["workers"] == []
    r = client.get("/api/replicas")
    assert r.status_code == 200
    assert r.json() == {"replicas": []}

    with connection.connect(dsn) as conn:
        worker_id = registry.register(conn, node=3, streams=["default", "other"], concurrency=5)
    assert worker_id is not None
    r = client.get("/api/workers")
    assert r.status_code == 200
    (w,) = r.json()["workers"]
    assert (w["id"], w["node"], w["streams"], w["concurrency"], w["live"], w["leases"]) == (
        worker_id, 3, ["default", "other"], 5, True, 0)
    assert client.get("/api/stats").json()["workers"] == {"live": 1, "stale": 0}
    for path in ("/workers", "/replicas"):
        assert client.get(path).status_code == 200
    assert "default, other" in client.get("/workers").text


# -- 11. security headers -----------------------------------------------------------------------


def test_every_response_has_the_security_headers(client: TestClient, read_only: TestClient,
                                                 q: pgqueue.Queue) -> None:
    job_id = q.enqueue(b"x")
    responses = [
        client.get("/"), client.get("/jobs"), client.get(f"/jobs/{job_id}"),
        client.get("/jobs/abc"), client.get("/jobs/424242"), client.get("/schedules"),
        client.get("/workers"), client.get("/replicas"), client.get("/login"),
        client.get("/bulk?action=cancel"), client.get("/api/stats"), client.get("/api/jobs"),
        client.get("/api/jobs?limit=0"), client.get(f"/api/jobs/{job_id}"),
        client.get("/api/jobs/424242"), client.get("/api/schedules"), client.get("/api/workers"),
        client.get("/api/replicas"), client.get("/nowhere"), client.get("/api/nowhere"),
        client.put("/api/stats"), client.get("/static/dashboard.css"),
        client.get("/static/dashboard.js"), client.get("/static/missing.js"),
        client.post(f"/api/jobs/{job_id}/cancel"),
        client.post(f"/api/jobs/{job_id}/requeue", headers=BEARER),
        client.post("/login", data={"token": "wrong-wrong-wrong-wrong"}),
        client.post("/login", data={"token": TOKEN}, follow_redirects=False),
        client.post("/logout", follow_redirects=False),
        client.post(f"/jobs/{job_id}/cancel", data={}),
        read_only.post(f"/api/jobs/{job_id}/cancel"), read_only.get("/"),
    ]
    for r in responses:
        csp = r.headers.get("content-security-policy", "")
        assert "script-src 'self'" in csp, (r.url, r.status_code)
        assert "frame-ancestors 'none'" in csp, r.url
        assert r.headers.get("x-frame-options") == "DENY", r.url
        assert r.headers.get("x-content-type-options") == "nosniff", r.url
        assert len(r.headers.get_list("content-security-policy")) == 1, r.url
    statuses = {r.status_code for r in responses}
    assert {200, 303, 400, 401, 404, 405, 409} <= statuses


# -- 12. live events ----------------------------------------------------------------------------


def test_the_event_stream(client: TestClient) -> None:
    with client.stream("GET", "/events") as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["cache-control"] == "no-store"
        assert "script-src 'self'" in r.headers["content-security-policy"]
        assert r.headers["x-frame-options"] == "DENY"
        first = next(r.iter_lines())
    assert first == "retry: 3000"
    # the app still answers after the stream was closed
    assert client.get("/api/stats").status_code == 200


# -- pages render ------------------------------------------------------------------------------


def test_the_pages_render(client: TestClient, q: pgqueue.Queue, dsn: str) -> None:
    dead_job(q)
    q.enqueue(b"x", kind="k")
    quarantined_job(q.for_stream("fragile"), dsn)
    overview = client.get("/")
    assert overview.status_code == 200
    assert 'data-stream="default"' in overview.text
    assert 'data-stream="fragile"' in overview.text
    jobs = client.get("/jobs?limit=1")
    assert jobs.status_code == 200
    assert 'id="older"' in jobs.text
    older = re.search(r'<a href="([^"]+)" id="older">', jobs.text)
    assert older
    second = client.get(html.unescape(older.group(1)))
    assert second.status_code == 200
    assert "« newest" in second.text


def test_a_non_ascii_csrf_token_or_session_cookie_is_refused_not_a_crash(
        dsn: str, q: pgqueue.Queue) -> None:
    """Whatever a client sends as its CSRF token or session cookie is an answer of 403 or
    "not logged in", never a server error (hmac.compare_digest refuses non-ASCII str)."""
    job_id = q.enqueue(b"x")
    before = state_snapshot(dsn), op_counts(dsn)
    seen: dict[str, httpx2.Response] = {}
    with dashboard(dsn, raise_server_exceptions=False) as c:
        r = c.post("/login", data={"token": TOKEN}, follow_redirects=False)
        assert r.status_code == 303
        seen["csrf header"] = c.post(f"/api/jobs/{job_id}/cancel",
                                     headers={b"X-CSRF-Token": b"\xe9"})
        seen["csrf form field"] = c.post(f"/jobs/{job_id}/cancel",
                                         data={"csrf": "\u00e9t\u00e9"}, follow_redirects=False)
    with dashboard(dsn, raise_server_exceptions=False) as c:
        cookie = {b"Cookie": b"pgqueue_session=1.2.\xe9"}
        seen["cookie page"] = c.get("/jobs", headers=cookie)
        seen["cookie action"] = c.post(f"/api/jobs/{job_id}/cancel", headers=cookie)
    statuses = {how: r.status_code for how, r in seen.items()}
    assert statuses == {"csrf header": 403, "csrf form field": 403, "cookie page": 200,
                        "cookie action": 401}
    for how, r in seen.items():
        assert r.headers.get("x-frame-options") == "DENY", how
    assert "log in to act" in seen["cookie page"].text
    assert (state_snapshot(dsn), op_counts(dsn)) == before


@pytest.mark.parametrize(("given", "lands"), [
    ("/jobs?state=dead", "/jobs?state=dead"),
    ("//evil.example/x", "/"),
    ("https://evil.example/", "/"),
    ("/\\evil.example", "/"),
    ("jobs", "/"),
    ("", "/"),
])
def test_login_sends_people_back_to_this_site_only(dsn: str, given: str, lands: str) -> None:
    with dashboard(dsn) as c:
        r = c.post("/login", data={"token": TOKEN, "next": given}, follow_redirects=False)
        assert r.status_code == 303
        assert r.headers["location"] == lands
        form = c.get("/login", params={"next": given})
        assert f'name="next" value="{html.escape(lands)}"' in form.text


def test_job_pages_of_every_state(client: TestClient, q: pgqueue.Queue, dsn: str) -> None:
    made = {"quarantined": quarantined_job(q.for_stream("fragile"), dsn),
            "undecodable": undecodable_job(q.for_stream("steps"), dsn),
            "dead": dead_job(q),
            "leased": leased_job(q),
            "scheduled": q.enqueue(b"later", delay=3600, dedup_key=b"\xff\x00key"),
            "pending": q.enqueue(bytes(range(256)) * 20, kind="binary")}
    for state, job_id in made.items():
        api = client.get(f"/api/jobs/{job_id}")
        assert api.status_code == 200, (state, api.text)
        assert api.json()["state"] == state
        page = client.get(f"/jobs/{job_id}")
        assert page.status_code == 200, (state, page.text)
        assert f'<span class="state {state}" id="job-state">{state}</span>' in page.text
        listed = client.get("/jobs", params={"state": state})
        assert listed.status_code == 200, (state, listed.text)
        assert f'data-job-id="{job_id}" data-state="{state}"' in listed.text
    big = client.get(f"/api/jobs/{made['pending']}").json()["job"]
    assert (big["payload_encoding"], big["payload_size"], big["payload_truncated"]) == (
        "base64", 5120, True)
    scheduled = client.get(f"/api/jobs/{made['scheduled']}").json()["job"]
    assert scheduled["dedup_key_encoding"] == "base64"
    page = client.get(f"/jobs/{made['pending']}")
    assert "base64 (not UTF-8)" in page.text
    assert "5.0 KiB (5,120 bytes)" in page.text


# -- shutdown -----------------------------------------------------------------------------------


class StallingProxy:
    """A TCP proxy in front of Postgres that forwards its first `forward` connections and
    holds every later one open without a byte of answer (a server that is slow to accept)."""

    def __init__(self, server_dsn: str, forward: int) -> None:
        parts = conninfo_to_dict(server_dsn)
        self.target = (str(parts.get("host") or "127.0.0.1"), int(parts.get("port") or 5432))
        self.forward = forward
        self.accepted = 0
        self.stalled: list[socket.socket] = []
        self._sockets: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closing = False
        threading.Thread(target=self._accept, daemon=True, name="stalling-proxy").start()

    def dsn(self, dsn: str) -> str:
        return make_conninfo(dsn, host="127.0.0.1", port=str(self.port))

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._sockets.append(client)
            self.accepted += 1
            if self.accepted > self.forward:
                self.stalled.append(client)
                continue
            server = socket.create_connection(self.target)
            self._sockets.append(server)
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=_pipe, args=(src, dst), daemon=True).start()

    def close(self) -> None:
        self._closing = True
        self._listener.close()
        for sock in self._sockets:
            _shut(sock)


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        _shut(src)
        _shut(dst)


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


async def _until(cond: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(0.01)


def _run_then_clean(scenario: Any, proxy: StallingProxy) -> None:
    """Run `scenario` on a fresh loop, then close whatever it left (so a failure leaks
    nothing into later tests)."""
    async def clean_up() -> None:
        proxy.close()
        for pool in [o for o in gc.get_objects() if isinstance(o, AsyncConnectionPool)]:
            if not pool.closed:
                await pool.close(timeout=2)
        me = asyncio.current_task()
        rest = [t for t in asyncio.all_tasks() if t is not me]
        for t in rest:
            t.cancel()
        if rest:
            await asyncio.wait(rest, timeout=2)

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(scenario())
    finally:
        loop.run_until_complete(clean_up())
        loop.close()


def _running(me: asyncio.Task[Any] | None) -> list[str]:
    return sorted(t.get_name() for t in asyncio.all_tasks() if t is not me and not t.done())


def test_shutting_down_while_the_listener_connects_leaks_nothing(dsn: str) -> None:
    """The lifespan starts the live listener; shut down while its connection waits on a
    server slow to answer, the app stops within its bound and leaves no task running (the
    listener opens no pool: it finds the leader itself)."""
    proxy = StallingProxy(dsn, forward=0)  # every connection stalls
    app = create_app(proxy.dsn(dsn), admin_token=TOKEN)
    leftover: list[str] = []

    async def scenario() -> None:
        lifespan = app.router.lifespan_context(app)
        await lifespan.__aenter__()
        try:
            await _until(lambda: proxy.stalled, 10, "the listener's connection")
        finally:
            await asyncio.wait_for(lifespan.__aexit__(None, None, None), 10)
        leftover.extend(_running(asyncio.current_task()))

    _run_then_clean(scenario, proxy)
    assert leftover == [], f"tasks still running after the app shut down: {leftover}"


def test_a_call_cancelled_while_the_pool_opens_leaves_no_pool_running(dsn: str) -> None:
    """AsyncQueue opens its pool on its first call; a call cancelled while the pool waits for
    its first connection (a request cut off, an app shutting down) leaves no pool task."""
    proxy = StallingProxy(dsn, forward=1)  # the schema check passes; the pool's connection stalls
    leftover: list[str] = []

    async def scenario() -> None:
        queue = pgqueue.AsyncQueue(proxy.dsn(dsn))
        call = asyncio.create_task(queue.stats(), name="the call")
        await _until(lambda: proxy.stalled, 10, "the pool's first connection")
        call.cancel()
        proxy.close()  # the stalled connection ends: a pool left open would go on retrying
        await asyncio.wait({call}, timeout=10)
        assert call.cancelled()
        await queue.close()
        me = asyncio.current_task()
        deadline = time.monotonic() + 10
        while _running(me) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)  # polling for the pool's tasks to end, with a deadline
        leftover.extend(_running(me))

    _run_then_clean(scenario, proxy)
    assert leftover == [], f"tasks still running after the cancelled call: {leftover}"


# -- found in review -----------------------------------------------------------------------------


def test_logging_in_from_a_refused_action_returns_to_its_page(client: TestClient,
                                                              q: pgqueue.Queue) -> None:
    """The 401 page of a form's answer links the login back to the page the form was on (the
    POST route answers no GET); a GET page's link keeps its query."""
    job_id = dead_job(q)
    refused = client.post(f"/jobs/{job_id}/requeue", data={"csrf": "x"})
    assert refused.status_code == 401
    assert f'/login?next=/jobs/{job_id}"' in refused.text
    listed = client.get("/jobs?state=dead")
    assert "/login?next=/jobs%3Fstate%3Ddead" in listed.text
    landed = client.post("/login", data={"token": TOKEN, "next": f"/jobs/{job_id}"},
                         follow_redirects=True)
    assert landed.status_code == 200 and landed.url.path == f"/jobs/{job_id}"


def test_a_proxys_basic_authorization_does_not_hide_the_session(session: TestClient,
                                                               q: pgqueue.Queue) -> None:
    """Behind an HTTP Basic proxy every request carries Authorization: Basic; the session
    (with its CSRF token) still acts, and a wrong Bearer is still refused."""
    job_id = dead_job(q)
    csrf = csrf_of(session, job_id)
    basic = {"Authorization": "Basic dXNlcjpwYXNz", "X-CSRF-Token": csrf}
    assert act(session, job_id, "requeue", headers=basic).status_code == 200
    assert state_of(q, job_id) == "pending"
    wrong = {"Authorization": "Bearer not-the-token-0123456789", "X-CSRF-Token": csrf}
    assert act(session, job_id, "cancel", headers=wrong).status_code == 401
    assert state_of(q, job_id) == "pending"


def test_a_cross_site_logout_is_refused(session: TestClient) -> None:
    r = session.post("/logout", headers={"Origin": "http://evil.example"}, follow_redirects=False)
    assert r.status_code == 403
    assert "pgqueue_session" not in r.headers.get("set-cookie", "")
    assert session.post("/logout", follow_redirects=False).status_code == 303


def test_a_bulk_action_refuses_jobs_that_left_its_filter(q: pgqueue.Queue, dsn: str) -> None:
    """Each job is checked against the filter again under its lock: a dead letter requeued
    between the listing and the action is refused, not cancelled."""
    from pgqueue import operate

    dead, other = dead_job(q), dead_job(q)
    q.requeue_dead_letter(dead)  # it left state=dead after being listed
    with connection.connect(dsn) as conn:
        refused = operate.apply_to_jobs(conn, "cancel", [dead, other], state="dead")
        assert list(refused) == [dead] and "no longer matches the filter" in refused[dead]
        with pytest.raises(ValueError, match="at most 50"):
            operate.apply_to_jobs(conn, "cancel", list(range(1, 52)))
    assert state_of(q, dead) == "pending" and q.job(other) is None


def test_contention_is_a_503_to_try_again() -> None:
    from pgqueue.dashboard.context import status_for

    assert status_for(pgqueue.Contention("deadlock detected")) == 503


def test_the_throughput_cache_counts_each_op_once_across_refreshes(q: pgqueue.Queue) -> None:
    from pgqueue.dashboard.data import Cache

    async def two_refreshes() -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
        cache = Cache()
        async with pgqueue.AsyncQueue(q.dsn) as aq:
            first = await cache.throughput(aq)
            q.enqueue_many([pgqueue.NewJob(b"x") for _ in range(3)])
            for lease in q.lease(limit=2):
                q.ack(lease)
            cache.at = -1e9  # past its TTL: the next call refreshes
            second = await cache.throughput(aq)
        return first, second

    q.enqueue(b"before")
    first, second = asyncio.run(two_refreshes())
    assert first["default"] == {"enqueued": 1, "acked": 0, "failed": 0, "cancelled": 0}
    assert second["default"] == {"enqueued": 4, "acked": 2, "failed": 0, "cancelled": 0}
