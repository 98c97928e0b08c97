"""Take the docs' screenshot of the dashboard's overview: fill a database with a few streams
of jobs (pending, scheduled, leased, acked, retried, dead), serve the dashboard on it and
photograph the page with headless Chromium (Debian's package, driven by Playwright).

    .venv/bin/python examples/dashboard_screenshot.py DSN [OUT.png]

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
            for lease in q.lease(limit=failing):
                q.nack(lease, error="ConnectionError: upstream refused")
            q.lease(limit=n // 20, visibility_timeout=600)
    with pgqueue.Queue(dsn, stream="reports") as q:
        q.upsert_schedule("nightly", "0 3 * * *", {"report": "daily"}, kind="reports.build")


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
    out = Path(sys.argv[2] if len(sys.argv) > 2 else "docs/images/dashboard.png")
    fill(dsn)
    server, port = serve(dsn)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1280, "height": 520})
            page.goto(f"http://127.0.0.1:{port}/")
            page.wait_for_selector("#streams")
            page.screenshot(path=str(out), full_page=True)
            browser.close()
    finally:
        server.should_exit = True
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
