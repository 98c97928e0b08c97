"""A job's page in a real browser (headless Chromium, as test_dashboard_browser.py): it offers
only the actions the job's state allows (the rule the verbs check), names the worker holding
its lease by host and pid with a link to it, and reads its history as a timeline of times, a
checkpoint's cursor decoded, with the raw op behind a toggle."""
from __future__ import annotations

import re

import pgqueue
from pgqueue.db import connection
from pgqueue.runtime import registry
from tests.acceptance.browserhelp import TOKEN, Dashboard, Tab, require_chromium

require_chromium()


def _buttons(tab: Tab) -> list[str]:
    return [b.get_attribute("value") or "" for b in tab.page.locator("#actions button").all()]


def test_a_job_page_offers_only_what_the_job_s_state_allows(
        admin: Dashboard, tab: Tab, q: pgqueue.Queue) -> None:
    pending = q.enqueue(b"p")
    dead = q.enqueue(b"d", max_attempts=1, priority=9)
    (held,) = q.lease(1)
    assert held.job_id == dead
    q.nack(held, error="no")
    page = tab.page
    page.goto(f"{admin.url}/login")
    page.fill("input[name=token]", TOKEN)
    page.click("button[type=submit]")
    page.wait_for_url(f"{admin.url}/")
    page.goto(f"{admin.url}/jobs/{pending}")
    assert _buttons(tab) == ["restart", "cancel"]
    page.goto(f"{admin.url}/jobs/{dead}")
    assert _buttons(tab) == ["requeue", "cancel"]
    page.click("#actions button[value=requeue]")
    page.wait_for_url(re.compile(rf"/jobs/{dead}\?done=requeue"))
    assert _buttons(tab) == ["restart", "cancel"]  # pending now: what it allows changed


def test_a_lease_names_its_worker_and_the_history_reads_as_times(
        admin: Dashboard, tab: Tab, q: pgqueue.Queue, dsn: str) -> None:
    with connection.connect(dsn) as conn:  # a worker as `pgqueue worker` registers itself
        worker_id = registry.register(conn, node=2, streams=["default"], concurrency=1)
    assert worker_id is not None
    job_id = q.enqueue(b"x", kind="crawl")
    (held,) = q.lease(1, worker_node=2, worker_instance=worker_id)
    q.renew(held, checkpoint=pgqueue.Checkpoint(cursor_step="pages", cursor=b"page-17"))
    page = tab.page
    page.goto(f"{admin.url}/jobs/{job_id}")
    lease = page.inner_text("#lease")
    assert f"worker {worker_id}, node 2" in lease and "pid" in lease
    page.click("#lease-worker")
    page.wait_for_url(f"{admin.url}/workers#worker-{worker_id}")
    assert page.locator(f"#worker-{worker_id}").is_visible()
    page.goto(f"{admin.url}/jobs/{job_id}")
    entries = page.locator("#history li")
    assert [e.get_attribute("data-op") for e in entries.all()] == ["Enqueue", "Lease", "Renew"]
    for e in entries.all():  # times read as times ...
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC",
                            e.locator("time").inner_text())
    text = page.inner_text("#history")
    assert not re.search(r"\b\d{13}\b", text)  # ... never epoch milliseconds
    renew = page.locator("#history li[data-op=Renew]")
    assert "page-17" in renew.inner_text()  # the cursor decoded, as on the checkpoint panel
    assert "cGFnZS0xNw" not in renew.inner_text()  # (not its base64)
    raw = renew.locator("details.raw")
    assert not raw.locator("code").is_visible()  # the raw op is behind a toggle
    raw.locator("summary").click()
    assert "expires_at_ms" in raw.locator("code").inner_text()
