"""Who may act on the dashboard: read-only, the bearer token, a login session with its CSRF
token, cross-site posts; the token never echoed; odd input in cookies and tokens."""
from __future__ import annotations

import html

import httpx2
import pytest
from starlette.testclient import TestClient

import pgqueue
from pgqueue.dashboard import create_app
from pgqueue.models import VERBS
from tests.dbhelp import op_counts, state_snapshot
from tests.integration.dashboard.dashboard_help import (
    BEARER,
    TOKEN,
    act,
    csrf_of,
    dashboard,
    dead_job,
    set_cookies,
    state_of,
)

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
                     "/replicas", "/kinds", "/login", "/api/stats", "/api/jobs", "/api/kinds",
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


def test_logout_revokes_the_session_a_saved_cookie_held(dsn: str, q: pgqueue.Queue) -> None:
    """A copy of the session cookie (a shared machine, a stolen jar) acts no more once its
    owner logged out: the dashboard revokes the session, not only the browser's cookie."""
    job_id = q.enqueue(b"keep me")
    with dashboard(dsn) as c:
        assert c.post("/login", data={"token": TOKEN}, follow_redirects=False).status_code == 303
        saved = c.cookies.get("pgqueue_session")
        csrf = csrf_of(c, job_id)
        assert saved
        assert c.post("/logout", headers={"X-CSRF-Token": csrf},
                      follow_redirects=False).status_code == 303
        c.cookies.set("pgqueue_session", saved)  # the saved copy, sent again
        r = c.post(f"/api/jobs/{job_id}/cancel", headers={"X-CSRF-Token": csrf})
        assert r.status_code == 401, r.text
        assert state_of(q, job_id) == "pending"
        assert c.post("/login", data={"token": TOKEN},
                      follow_redirects=False).status_code == 303  # a new login works


@pytest.mark.parametrize("host, allowed", [
    ("127.0.0.1:8470", True), ("localhost", True), ("[::1]:8470", True),
    ("dash.example.com", True), ("a.ops.example.org", True),
    ("evil.example.net", False), ("127.0.0.1.evil.example.net", False), ("", False),
])
def test_only_the_allowed_host_names_are_answered(dsn: str, host: str, allowed: bool) -> None:
    """A DNS-rebinding page reaches 127.0.0.1 under its own name, which it sends as Host: a
    dashboard given its host names answers no other (pgqueue dashboard gives localhost and
    the address it listens on, and --allowed-hosts)."""
    app = create_app(dsn, allowed_hosts=["localhost", "127.0.0.1", "::1", "dash.example.com",
                                         "*.ops.example.org"])
    with TestClient(app) as c:
        for path in ("/", "/api/stats"):
            r = c.get(path, headers={"host": host})
            assert (r.status_code != 400) is allowed, (host, path, r.status_code)
            if not allowed:
                assert "--allowed-hosts" in r.text
