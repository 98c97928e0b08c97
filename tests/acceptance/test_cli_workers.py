"""`pgqueue workers` marks a worker stale when its heartbeat is old (issue 11, break 7): a
real worker process, SIGKILLed so it never deregisters, and the database's clock."""
from __future__ import annotations

import subprocess
from typing import Any

from pgqueue.db import connection
from pgqueue.runtime.worker import HEARTBEAT_SECONDS
from tests.acceptance.clihelp import as_json, ok
from tests.acceptance.test_worker import Workers
from tests.dbhelp import wait_for


def mine(dsn: str, proc: subprocess.Popen[bytes], *flags: str) -> dict[str, Any] | None:
    """The `workers --json` row of `proc`, if it is registered."""
    rows = [r for r in as_json(dsn, "workers", *flags) if r["pid"] == proc.pid]
    return rows[0] if rows else None


def backdate(dsn: str, seconds: float) -> None:
    """Set every worker's last heartbeat `seconds` before the database's now()."""
    with connection.connect(dsn) as conn:
        conn.execute("UPDATE pgqueue.worker "
                     "SET heartbeat_at = now() - make_interval(secs => %s)", (seconds,))


def test_a_sigkilled_worker_is_listed_stale(dsn: str, workers: Workers) -> None:
    proc = workers.start()
    row = wait_for(lambda: mine(dsn, proc), 30, "the worker to register")
    assert row["stale"] is False
    assert 0 <= row["heartbeat_age_seconds"] < 3 * HEARTBEAT_SECONDS
    assert "stale" not in ok(dsn, "workers").stdout.split("┡")[1]

    proc.kill()  # SIGKILL: no drain, no deregistration
    proc.wait(timeout=10)
    # still registered (maintenance forgets it much later), soon stale with a short threshold
    row = wait_for(lambda: (r := mine(dsn, proc, "--stale-after", "1")) and r["stale"] and r,
                   30, "the killed worker to be marked stale")
    assert row["heartbeat_age_seconds"] > 1
    table = ok(dsn, "workers", "--stale-after", "1").stdout
    (line,) = [ln for ln in table.splitlines() if f" {proc.pid} " in ln]
    assert "stale" in line


def test_the_default_threshold_is_three_heartbeats_by_the_databases_clock(
        dsn: str, workers: Workers) -> None:
    proc = workers.start()
    wait_for(lambda: mine(dsn, proc), 30, "the worker to register")
    proc.kill()
    proc.wait(timeout=10)
    threshold = 3 * HEARTBEAT_SECONDS
    backdate(dsn, threshold - 2)
    row = mine(dsn, proc)
    assert row is not None and row["stale"] is False
    assert threshold - 2 <= row["heartbeat_age_seconds"] < threshold
    backdate(dsn, threshold + 2)
    row = mine(dsn, proc)
    assert row is not None and row["stale"] is True
    assert threshold + 2 <= row["heartbeat_age_seconds"] < threshold + 30
    row = mine(dsn, proc, "--stale-after", str(threshold + 60))
    assert row is not None and row["stale"] is False
    assert f"{threshold:g}" in ok(dsn, "workers", "--help").stdout
