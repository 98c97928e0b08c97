"""The dashboard's JSON API against a real Postgres: stats, keyset paging and its input
checks, one job with its steps and history, and every operator action with the state and op
it leaves (and the refusals: 400, 404, 409)."""
from __future__ import annotations

import pytest
from starlette.testclient import TestClient

import pgqueue
from pgqueue.db import connection
from pgqueue.models import JOB_STATES, VERBS
from tests.dbhelp import op_counts, state_snapshot
from tests.integration.dashboard.dashboard_help import (
    BEARER,
    H2,
    MAX_BIGINT,
    act,
    dead_job,
    leased_job,
    ops_of,
    quarantined_job,
    state_of,
    undecodable_job,
)

pytestmark = pytest.mark.layouts("single", "citus", "stock")

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
    assert (job["stream"], job["kind"], job["payload"], job["last_error"],
            job["error_summary"]) == ("default", "a", "3", "it failed", "it failed")
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


def test_cancel_a_leased_job_requests_it_once(client: TestClient, q: pgqueue.Queue) -> None:
    job_id = leased_job(q)
    r = act(client, job_id, "cancel")
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "leased"  # its worker ends it
    requested = r.json()["job"]["cancel_requested_at"]
    assert requested is not None
    assert ops_of(q, job_id)[-1] == "RequestCancel"
    # asked again: nothing changes, no second op
    r = act(client, job_id, "cancel")
    assert r.status_code == 200, r.text
    assert r.json()["job"]["cancel_requested_at"] == requested
    assert ops_of(q, job_id).count("RequestCancel") == 1
    page = client.get(f"/jobs/{job_id}?done=cancel")
    assert "cancel requested" in page.text and 'id="cancel-requested"' in page.text


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


def test_a_bulk_action_refuses_jobs_that_left_its_filter(q: pgqueue.Queue, dsn: str) -> None:
    """Each job is checked against the filter again under its lock: a dead letter requeued
    between the listing and the action is refused, not cancelled."""
    from pgqueue.client import operate

    dead, other = dead_job(q), dead_job(q)
    q.requeue_dead_letter(dead)  # it left state=dead after being listed
    with connection.connect(dsn) as conn:
        outcome = operate.apply_to_jobs(conn, "cancel", [dead, other], state="dead")
        refused = outcome.refused
        assert list(refused) == [dead] and "no longer matches the filter" in refused[dead]
        assert outcome.requested == []
        with pytest.raises(ValueError, match="at most 50"):
            operate.apply_to_jobs(conn, "cancel", list(range(1, 52)))
    assert state_of(q, dead) == "pending" and q.job(other) is None


def test_contention_is_a_503_to_try_again() -> None:
    from pgqueue.dashboard.context import status_for

    assert status_for(pgqueue.Contention("deadlock detected")) == 503
