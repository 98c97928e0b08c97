"""Take the docs' screenshots of the dashboard: fill a database with a few streams of jobs
(pending, scheduled, leased, acked, retried, dead) and a step job a registered worker holds
with a checkpoint, serve the dashboard on it and photograph the overview (dashboard.png),
that job's page (job.png) and the dead letters grouped (dead.png) with headless Chromium
(Debian's package, driven by Playwright).

    .venv/bin/python examples/dashboard_screenshot.py DSN [OUT_DIR]   # default: docs/images

DSN must name an empty database it may migrate and fill (the jobs stay there).
"""
from __future__ import annotations

import socket
import sys
import threading
import time
from pathlib import Path

import uvicorn
from playwright.sync_api import sync_playwright

import pgqueue
from pgqueue.dashboard import create_app

CHROMIUM = "/usr/bin/chromium"


def fill(dsn: str) -> None:
    """Jobs in every common state across three streams, and a schedule."""
    pgqueue.migrate(dsn)
    for stream, n, failing in (("emails", 400, 3), ("reports", 40, 1), ("billing", 120, 2)):
        with pgqueue.Queue(dsn, stream=stream) as q:
            q.enqueue_many([pgqueue.NewJob({"n": i}, kind=f"{stream}.send", max_attempts=1)
                            for i in range(n)])
            q.enqueue_many([pgqueue.NewJob({"n": i}, kind=f"{stream}.later", delay=3600)
                            for i in range(n // 10)])
            for lease in q.lease(limit=n // 2):
                q.ack(lease)
            for i, lease in enumerate(q.lease(limit=failing)):
                q.nack(lease, error="ConnectionError: upstream refused" if i % 3
                       else "ValueError: no such customer")
            q.lease(limit=n // 20, visibility_timeout=600)
    with pgqueue.Queue(dsn, stream="reports") as q:
        q.upsert_schedule("nightly", "0 3 * * *", {"report": "daily"}, kind="reports.build")


def step_job(dsn: str) -> int:
    """A step job a registered worker holds, past its first step, that failed once before."""
    from pgqueue.db import connection
    from pgqueue.runtime import registry

    app = pgqueue.App()
    export = app.step_job("reports.export", max_attempts=5)

    @export.step("query")
    def query(ctx: pgqueue.StepContext) -> None: ...

    @export.step("render")
    def render(ctx: pgqueue.StepContext) -> None: ...

    @export.step("upload")
    def upload(ctx: pgqueue.StepContext) -> None: ...

    with connection.connect(dsn) as conn:
        worker = registry.register(conn, node=1, streams=["exports"], concurrency=4)
        registry.register_handlers(conn, app, ["exports"], worker)
    with pgqueue.Queue(dsn, stream="exports") as q:
        job_id = app.enqueue(q, "reports.export", {"report": "monthly", "month": "2026-11"})
        (held,) = q.lease(1, worker_node=1, worker_instance=worker or 0)
        q.nack(held, error="TimeoutError: warehouse query timed out", retry_in=0)
        (held,) = q.lease(1, worker_node=1, worker_instance=worker or 0)
        q.renew(held, checkpoint=pgqueue.Checkpoint(
            last_completed_step="query", cursor_step="render", cursor=b"page 12 of 40",
            step_set_hash=export.step_set_hash, schema_version=1))
    return job_id


def serve(dsn: str) -> tuple[uvicorn.Server, int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(dsn), log_level="warning"))
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("the dashboard did not start within 30 s")
        time.sleep(0.05)
    return server, int(sock.getsockname()[1])


def main() -> None:
    dsn = sys.argv[1]
    out = Path(sys.argv[2] if len(sys.argv) > 2 else "docs/images")
    fill(dsn)
    job_id = step_job(dsn)
    server, port = serve(dsn)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1280, "height": 720})
            page.goto(f"http://127.0.0.1:{port}/")
            deadline = time.monotonic() + 30
            while not page.evaluate("Object.keys(window.pgqueueCharts || {}).length"):
                if time.monotonic() > deadline:
                    raise RuntimeError("the overview drew no chart within 30 s")
                time.sleep(0.1)  # polling the page for its charts, with a deadline
            page.screenshot(path=str(out / "dashboard.png"), full_page=True)
            page.goto(f"http://127.0.0.1:{port}/jobs/{job_id}")
            page.wait_for_selector("#history")
            page.screenshot(path=str(out / "job.png"), full_page=True)
            page.goto(f"http://127.0.0.1:{port}/jobs?state=dead")
            page.wait_for_selector("#dead-groups")
            page.screenshot(path=str(out / "dead.png"), full_page=True)
            browser.close()
    finally:
        server.should_exit = True
    print(f"wrote {out / 'dashboard.png'}, {out / 'job.png'} and {out / 'dead.png'}")


if __name__ == "__main__":
    main()
