"""The dashboard's pages: job data shown as text, the forms (one job, bulk, schedules),
workers and replicas, security headers, the live event stream, every page rendering, the
throughput cache, and shutting down while connections hang."""
from __future__ import annotations

import asyncio
import gc
import html
import re
import time
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool
from starlette.testclient import TestClient

import pgqueue
from pgqueue.dashboard import create_app
from pgqueue.db import connection
from pgqueue.runtime import registry
from tests.dbhelp import op_counts, state_snapshot
from tests.integration.dashboard.dashboard_help import (
    BEARER,
    TOKEN,
    csrf_of,
    dead_job,
    leased_job,
    ops_of,
    quarantined_job,
    state_of,
    undecodable_job,
)
from tests.proxy import LossyProxy

pytestmark = pytest.mark.layouts("single", "citus", "stock")

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
    confirm = session.get("/bulk", params={"stream": "default", "action": "restart"})
    assert "This will restart <strong>3</strong> jobs" in confirm.text
    fields = _hidden_fields(confirm.text, "bulk-confirm")
    r = session.post("/bulk", data=fields)
    assert r.status_code == 200, r.text
    assert "restart: 2 jobs done" in r.text
    assert "1 refused" in r.text  # restart does not apply to a leased job
    assert f'<a href="/jobs/{leased}">{leased}</a>' in r.text
    assert all(ops_of(q, j)[-1] == "Restart" for j in mine)
    assert state_of(q, leased) == "leased"
    assert state_of(q, theirs) == "pending"

    # cancel: the pending jobs go at once, the leased one is asked to stop
    confirm = session.get("/bulk", params={"stream": "default", "action": "cancel"})
    r = session.post("/bulk", data=_hidden_fields(confirm.text, "bulk-confirm"))
    assert "cancel: 2 jobs done, 1 leased jobs asked to stop." in r.text
    assert all(q.job(j) is None for j in mine)
    held = q.job(leased)
    assert held is not None and held.state == "leased" and held.cancel_requested_at is not None
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


def test_kinds_lists_every_streams_settings_as_text(client: TestClient, q: pgqueue.Queue,
                                                   read_only: TestClient) -> None:
    assert client.get("/api/kinds").json() == {"kinds": []}
    assert "No live worker handles a kind and no kind has settings" in client.get("/kinds").text
    q.configure_kind("mail", max_concurrency=3, rate_limit=(10, 1.5), max_per_key=2)
    q.for_stream("other").configure_kind("<b>odd</b>", quarantine_after=4)
    r = client.get("/api/kinds")
    assert r.status_code == 200
    assert r.json()["kinds"] == [
        {"stream": "default", "kind": "mail", "quarantine_after": None, "max_concurrency": 3,
         "rate_limit": {"count": 10, "seconds": 1.5}, "max_per_key": 2,
         "source": "configured", "handler": None, "workers": []},
        {"stream": "other", "kind": "<b>odd</b>", "quarantine_after": 4,
         "max_concurrency": None, "rate_limit": None, "max_per_key": None,
         "source": "configured", "handler": None, "workers": []}]
    for c in (client, read_only):  # a read-only dashboard shows them too
        page = c.get("/kinds")
        assert page.status_code == 200
        assert "<td>mail</td>" in page.text and "10/1.5s" in page.text
        assert "&lt;b&gt;odd&lt;/b&gt;" in page.text and "<b>odd</b>" not in page.text
        assert '<a href="/kinds"' in c.get("/").text  # in the navigation


def test_kinds_lists_the_kinds_live_workers_handle_and_says_which_are_configured(
        client: TestClient, q: pgqueue.Queue, dsn: str) -> None:
    app = pgqueue.App()

    @app.job("mail", max_attempts=5, timeout=30)
    def mail(ctx: pgqueue.JobContext) -> None: ...

    resize = app.step_job("resize", schema_version=2, max_concurrency=2)

    @resize.step("fetch")
    def fetch(ctx: pgqueue.StepContext) -> None: ...

    @resize.step("scale")
    def scale(ctx: pgqueue.StepContext) -> None: ...

    q.configure_kind("report", max_per_key=1)  # configured, no worker handles it
    with connection.connect(dsn) as conn:  # what a Worker does when it starts
        worker_id = registry.register(conn, node=3, streams=["default"], concurrency=4)
        assert worker_id is not None
        registry.register_handlers(conn, app, ["default"], worker_id)
        gone = registry.register(conn, node=4, streams=["default"], concurrency=1)
        assert gone is not None
        registry.register_handlers(conn, pgqueue.App(), ["default"], gone)
    kinds = {k["kind"]: k for k in client.get("/api/kinds").json()["kinds"]}
    assert {k: v["source"] for k, v in kinds.items()} == {
        "mail": "registered", "report": "configured", "resize": "both"}  # resize: its limit
    assert kinds["resize"]["max_concurrency"] == 2
    assert kinds["resize"]["handler"]["steps"] == ["fetch", "scale"]
    assert kinds["resize"]["handler"]["schema_version"] == 2
    assert kinds["mail"]["handler"]["max_attempts"] == 5
    assert kinds["mail"]["handler"]["timeout"] == 30
    assert kinds["mail"]["handler"]["type"] == "job"
    assert [w["id"] for w in kinds["mail"]["workers"]] == [worker_id]
    assert [w["node"] for w in kinds["mail"]["workers"]] == [3]
    page = client.get("/kinds").text
    assert "handled by a live worker" in page and "handled and configured" in page
    assert "configured, no live worker handles it" in page
    assert "fetch → scale" in page and f'href="/workers#worker-{worker_id}"' in page
    with connection.connect(dsn) as conn:  # a worker that stopped: its kinds are gone
        registry.deregister(conn, worker_id)
    kinds = {k["kind"]: k for k in client.get("/api/kinds").json()["kinds"]}
    assert {k: v["source"] for k, v in kinds.items()} == {"report": "configured",
                                                          "resize": "configured"}


# -- 11. security headers -----------------------------------------------------------------------


def test_every_response_has_the_security_headers(client: TestClient, read_only: TestClient,
                                                 q: pgqueue.Queue) -> None:
    job_id = q.enqueue(b"x")
    responses = [
        client.get("/"), client.get("/jobs"), client.get(f"/jobs/{job_id}"),
        client.get("/jobs/abc"), client.get("/jobs/424242"), client.get("/schedules"),
        client.get("/workers"), client.get("/replicas"), client.get("/login"),
        client.get("/kinds"), client.get("/api/kinds"),
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


async def _until(cond: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(0.01)


def _run_then_clean(scenario: Any, proxy: LossyProxy) -> None:
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
    proxy = LossyProxy(dsn, stall_after=0)  # every connection stalls
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
    proxy = LossyProxy(dsn, stall_after=1)  # the schema check passes; the pool's connection stalls
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


# -- the throughput cache ----------------------------------------------------------------------


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


def test_the_dead_letters_say_when_each_died_how_many_and_their_biggest_groups(
        client: TestClient, q: pgqueue.Queue) -> None:
    """The dead-letter list has a died column, the total, and the dead letters grouped by
    kind and error with each group's count, biggest first (a kind links to its filter)."""
    for _ in range(3):
        job_id = q.enqueue(b"x", kind="mail", max_attempts=1, priority=255)
        (held,) = q.lease(1)
        q.nack(held, error="SMTPError: 550 mailbox unavailable")
    dead_job(q, kind="report")
    page = client.get("/jobs?state=dead")
    assert page.status_code == 200
    text = html.unescape(page.text)
    assert re.search(r'id="dead-total">4</strong> dead letters', page.text), page.text[:2000]
    rows = re.findall(r"<tr><td>.*?</td>\s*<td class=\"error-cell\">(.*?)</td><td class=\"num\">"
                      r"(\d+)</td></tr>", text, re.S)
    assert rows[0] == ("SMTPError: 550 mailbox unavailable", "3"), rows
    assert ("it failed", "1") in rows
    assert "state=dead&kind=mail" in text
    assert "<th>died</th>" in page.text
    assert q.dead_letter_groups(all_streams=True)[0] == pgqueue.DeadLetterGroup(
        "mail", "SMTPError: 550 mailbox unavailable", 3)
    del job_id


def test_the_bulk_menu_offers_only_what_the_filtered_state_allows(
        client: TestClient, q: pgqueue.Queue) -> None:
    dead_job(q)
    def options(path: str) -> list[str]:
        return re.findall(r'<option value="([a-z-]+)">',
                          client.get(path).text.split('id="bulk"', 1)[1])

    assert options("/jobs?state=dead") == ["requeue", "cancel"]
    assert options("/jobs?state=quarantined") == ["release", "rewind", "restart", "skip-step",
                                                  "cancel"]
    assert options("/jobs") == list(pgqueue.VERBS)
    assert 'name="to_step"' not in client.get("/jobs?state=dead").text.split('id="bulk"', 1)[1]
