"""The dashboard in headless Chromium (Debian's package, driven by Playwright): a real
`pgqueue dashboard` process, a browser, and a tab that records every JavaScript error. The
fixtures (admin, read_only, browser, tab) are in tests/acceptance/conftest.py; a test module
that uses them calls `require_chromium()` first, which skips it where Chromium is missing,
except under CI (.ci/run installs it)."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOKEN = "browser-test-admin-token-0123456789"  # noqa: S105  (a test's token)
CHROMIUM = os.environ.get("PGQUEUE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"



def require_chromium() -> None:
    """Skip the calling test module where Chromium is missing (never under CI)."""
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI") == "true":
            raise RuntimeError(f"CI=true but Chromium is missing at {CHROMIUM}: .ci/run "
                               f"installs Debian's chromium package")
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium, or set "
                    f"PGQUEUE_CHROMIUM)", allow_module_level=True)


from playwright.sync_api import Browser, ConsoleMessage, Page, Response, sync_playwright  # noqa: E402


@dataclass
class Dashboard:
    url: str
    proc: subprocess.Popen[str]


def _start(dsn: str, *, token: str | None) -> Dashboard:
    env = {**os.environ, "PGQUEUE_DSN": dsn}
    env.pop("PGQUEUE_ADMIN_TOKEN", None)
    if token is not None:
        env["PGQUEUE_ADMIN_TOKEN"] = token
    proc = subprocess.Popen([sys.executable, "-m", "pgqueue", "dashboard", "--port", "0"],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    found = re.search(r"on (http://127\.0\.0\.1:\d+)/", line)
    if not found:
        proc.kill()
        raise AssertionError(f"dashboard did not start: {line!r} {proc.communicate()[1]!r}")
    return Dashboard(found.group(1), proc)


def _stop(d: Dashboard) -> None:
    d.proc.send_signal(signal.SIGTERM)
    try:
        assert d.proc.wait(timeout=15) == 0
    finally:
        if d.proc.poll() is None:
            d.proc.kill()
            d.proc.wait()
    _, err = d.proc.communicate()
    assert TOKEN not in err  # the token is never logged


def dashboard(dsn: str, token: str | None) -> Iterator[Dashboard]:
    d = _start(dsn, token=token)
    yield d
    _stop(d)


def chromium() -> Iterator[Browser]:
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


@dataclass
class Tab:
    """A browser page that records every JavaScript error it logs."""

    page: Page
    errors: list[str] = field(default_factory=list)

    def record(self, message: ConsoleMessage) -> None:
        # JavaScript errors and CSP refusals; a page answering 4xx on purpose is not one (a
        # missing script, style or icon is, and `broken` catches it)
        if message.type == "error" and not message.text.startswith("Failed to load resource"):
            self.errors.append(message.text)

    def broken(self, response: Response) -> None:
        if response.status >= 400 and response.request.resource_type != "document" \
                and "/api/" not in response.url:
            self.errors.append(f"{response.status} for {response.url}")


def open_tab(browser: Browser) -> Iterator[Tab]:
    context = browser.new_context()
    page = context.new_page()
    t = Tab(page)
    page.on("console", t.record)
    page.on("response", t.broken)
    page.on("pageerror", lambda exc: t.errors.append(f"uncaught: {exc}"))
    page.on("dialog", lambda dialog: dialog.accept())  # the confirm() before an action
    page.set_default_timeout(15_000)
    yield t
    context.close()
    assert t.errors == [], t.errors  # no page logged a JavaScript error
