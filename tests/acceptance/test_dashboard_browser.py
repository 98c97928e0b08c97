"""The dashboard in a real browser: `pgqueue dashboard` as a real process, headless Chromium
(Debian's package) driven by Playwright.

It loads the overview, opens a dead job, requeues it with the admin token and sees it leave
the dead list; fails to act without the token (and on a read-only dashboard); sees a job
enqueued meanwhile appear without a reload; pauses its live refresh while the tab is hidden;
cancels a job a real worker process runs and sees it end as cancelled; and no page logs a
JavaScript error (a CSP violation is one). Skips, saying why, where
Chromium is missing, except under CI (.ci/run installs it).
"""
from __future__ import annotations

import re
from typing import Any

import pgqueue
from tests.acceptance.browserhelp import TOKEN, Dashboard, Tab, require_chromium
from tests.acceptance.test_worker import Ledger, Workers
from tests.dbhelp import listening, wait_for

require_chromium()

def _dead_job(q: pgqueue.Queue, payload: Any = None) -> int:
    job_id = q.enqueue(payload if payload is not None else {"to": "a@example.com"},
                       kind="send_email", max_attempts=1)
    for lease in q.lease(limit=10):
        q.nack(lease, error="SMTP 554: rejected")
    info = q.job(job_id)
    assert info is not None and info.state == "dead"
    return job_id


def _login(tab: Tab, d: Dashboard) -> None:
    tab.page.goto(f"{d.url}/login")
    tab.page.fill("input[name=token]", TOKEN)
    tab.page.click("button[type=submit]")
    tab.page.wait_for_url(f"{d.url}/")


def test_requeue_a_dead_job_with_the_admin_token(admin: Dashboard, tab: Tab,
                                                 q: pgqueue.Queue) -> None:
    job_id = _dead_job(q)
    q.enqueue({"n": 1}, kind="report")
    page = tab.page
    page.goto(admin.url + "/")
    dead = page.locator("tr[data-stream=default] td[data-state=dead]")
    assert dead.inner_text().strip() == "1"
    assert "alarm" in (dead.get_attribute("class") or "")  # dead jobs stand out
    _login(tab, admin)
    page.click("tr[data-stream=default] td[data-state=dead] a")
    page.wait_for_url(re.compile(r"/jobs\?.*state=dead"))
    page.click(f"tr[data-job-id='{job_id}'] a")
    page.wait_for_url(f"{admin.url}/jobs/{job_id}")
    assert page.inner_text("#job-state") == "dead"
    assert page.inner_text("#error-summary") == "SMTP 554: rejected"
    assert page.locator("#last-error").count() == 0  # the text said no more than its summary
    page.click("#actions button[value=requeue]")
    page.wait_for_url(re.compile(rf"/jobs/{job_id}\?done=requeue"))
    assert page.inner_text("#job-state") == "pending"
    assert "requeued" in page.inner_text("#done")
    info = q.job(job_id)
    assert info is not None and info.state == "pending"
    assert [o.op for o in q.op_log(job_id=job_id, limit=1)] == ["RequeueDeadLetter"]
    page.goto(f"{admin.url}/jobs?state=dead")
    assert page.locator(f"tr[data-job-id='{job_id}']").count() == 0
    assert page.locator("#no-jobs").is_visible()


def _refuse(card: str) -> None:
    raise ValueError(f"card {card!r} declined\n<b>by</b> the bank")


def test_a_failure_reads_as_its_summary_in_the_list_and_its_traceback_on_the_page(
        admin: Dashboard, tab: Tab, q: pgqueue.Queue) -> None:
    job_id = q.enqueue("x", kind="pay", max_attempts=1)
    (lease,) = q.lease()
    try:
        _refuse("amex")
    except ValueError as exc:
        q.nack(lease, error=exc)
    summary = "ValueError: card 'amex' declined <b>by</b> the bank"
    page = tab.page
    page.goto(f"{admin.url}/jobs?state=dead")
    assert page.inner_text(f"tr[data-job-id='{job_id}'] .error-cell") == summary
    page.goto(f"{admin.url}/jobs/{job_id}")
    assert page.inner_text("#error-summary") == summary  # job data is text, never markup
    shown = page.inner_text("#last-error").rstrip("\n").split("\n")
    assert shown[0] == "Traceback (most recent call last):"
    assert shown[-2:] == ["ValueError: card 'amex' declined", "<b>by</b> the bank"]
    assert any("in _refuse" in line for line in shown)
    assert page.locator("#last-error b").count() == 0


def test_acting_without_the_token_fails_and_changes_nothing(admin: Dashboard, tab: Tab,
                                                            q: pgqueue.Queue) -> None:
    job_id = _dead_job(q)
    page = tab.page
    page.goto(f"{admin.url}/jobs/{job_id}")
    page.click("#actions button[value=requeue]")  # not logged in: the form has no session
    assert page.inner_text("h1") == "401"
    assert "admin token" in page.inner_text("#error-message")
    info = q.job(job_id)
    assert info is not None and info.state == "dead"
    # a script in the page without the token is refused as well
    status = page.evaluate(
        "async (id) => (await fetch(`/api/jobs/${id}/requeue`, {method: 'POST'})).status", job_id)
    assert status == 401
    info = q.job(job_id)
    assert info is not None and info.state == "dead"


def test_a_read_only_dashboard_offers_no_action_and_refuses_one(read_only: Dashboard, tab: Tab,
                                                                q: pgqueue.Queue) -> None:
    job_id = _dead_job(q)
    page = tab.page
    page.goto(f"{read_only.url}/jobs/{job_id}")
    assert page.inner_text("header .badge") == "read-only"
    assert page.locator("#actions").count() == 0
    status = page.evaluate(
        "async (id) => (await fetch(`/api/jobs/${id}/requeue`, {method: 'POST'})).status", job_id)
    assert status == 403
    info = q.job(job_id)
    assert info is not None and info.state == "dead"


def test_a_job_enqueued_meanwhile_appears_without_a_reload(admin: Dashboard, tab: Tab,
                                                           q: pgqueue.Queue) -> None:
    first = q.enqueue("first")
    page = tab.page
    page.goto(f"{admin.url}/jobs")
    page.wait_for_selector(".live.on")  # the event stream is open
    page.evaluate("window.sameDocument = true")
    assert page.locator(f"tr[data-job-id='{first}']").count() == 1
    later = q.enqueue("<b>later</b>", kind="<i>kind</i>")
    row = page.locator(f"tr[data-job-id='{later}']")
    row.wait_for()  # woken by NOTIFY: well within the periodic refresh
    assert page.evaluate("window.sameDocument") is True  # no reload: the same document
    assert "<b>later</b>" in row.inner_text()  # job data shows as text, never as markup
    assert row.locator("b").count() == 0 and row.locator("i").count() == 0


def test_live_refresh_pauses_while_the_tab_is_hidden(admin: Dashboard, tab: Tab,
                                                     q: pgqueue.Queue) -> None:
    page = tab.page
    page.goto(f"{admin.url}/jobs")
    page.wait_for_selector(".live.on")
    page.evaluate("""() => {
        Object.defineProperty(document, 'hidden', {configurable: true, get: () => true});
        document.dispatchEvent(new Event('visibilitychange'));
    }""")
    page.wait_for_selector(".live.paused")  # the stream is closed while hidden
    job_id = q.enqueue("while hidden")
    page.evaluate("""() => {
        Object.defineProperty(document, 'hidden', {configurable: true, get: () => false});
        document.dispatchEvent(new Event('visibilitychange'));
    }""")
    page.locator(f"tr[data-job-id='{job_id}']").wait_for()  # shown again: refreshed at once
    page.wait_for_selector(".live.on")


def test_every_page_loads_without_a_javascript_error(admin: Dashboard, tab: Tab,
                                                     q: pgqueue.Queue) -> None:
    job_id = _dead_job(q, payload="<script>window.pwned = 1</script>")
    q.upsert_schedule("nightly", "0 3 * * *", kind="report")
    page = tab.page
    q.configure_kind("<script>window.pwned = 1</script>", max_concurrency=2)
    for path in ("/", "/jobs", f"/jobs/{job_id}", "/schedules", "/kinds", "/workers", "/replicas",
                 "/login", "/jobs?state=dead", "/bulk?state=dead&action=requeue", "/nope"):
        page.goto(admin.url + path)
        page.wait_for_load_state("load")
        assert page.evaluate("window.pwned === undefined")  # job data never runs as script
    assert "<script>window.pwned = 1</script>" in page.evaluate(
        "async (id) => (await (await fetch(`/api/jobs/${id}`)).json()).job.payload", job_id)


def test_cancel_a_running_job_from_its_page(admin: Dashboard, tab: Tab, q: pgqueue.Queue,
                                            workers: Workers, ledger: Ledger) -> None:
    """A job a real worker process runs: the operator cancels it on its page, reads that the
    cancel was requested, and then (the worker heard it and stopped the handler) that it
    finished as cancelled."""
    job_id = q.enqueue({"sleep": 120}, kind="patient")
    workers.start(visibility_timeout=30.0, renew_interval=10.0)
    wait_for(lambda: listening(workers.dsn, "pgqueue_cancel"), 30, "the worker to listen")
    wait_for(lambda: ledger.count(job_id, "patient:start") == 1, 30, "the handler to start")
    page = tab.page
    _login(tab, admin)
    page.goto(f"{admin.url}/jobs/{job_id}")
    assert page.inner_text("#job-state") == "leased"
    page.click("#actions button[value=cancel]")
    page.wait_for_url(re.compile(rf"/jobs/{job_id}\?done=cancel"))
    assert "cancel" in page.inner_text("#done")  # requested (or, if the worker was quick, done)
    wait_for(lambda: q.job(job_id) is None, 20, "the worker to stop the job")
    assert ledger.count(job_id, "patient:stopped") == 1
    page.goto(f"{admin.url}/jobs/{job_id}")
    assert page.inner_text("#job-state") == "cancelled"
    ops_shown = page.locator("#history li[data-op]").evaluate_all(
        "rows => rows.map(r => r.dataset.op)")
    # the request, the renewal its notification brought about (which told the worker), the end
    assert [op for op in ops_shown if op != "Renew"][-2:] == ["RequestCancel", "Cancel"]
