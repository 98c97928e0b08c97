"""max_attempts: a value given at enqueue always wins; when none is given the handler's
applies, else 25 (real worker processes)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pgqueue
from tests.acceptance.attempts_app import HANDLER_MAX_ATTEMPTS
from tests.dbhelp import wait_for

REPO = Path(__file__).resolve().parents[2]


def nack_limits(q: pgqueue.Queue, job_id: int) -> list[int]:
    return [int(op.body["max_attempts"]) for op in reversed(q.op_log(job_id=job_id, limit=100))
            if op.op == "Nack"]


def test_the_enqueue_value_wins_and_the_handler_s_applies_when_none_was_given(
        dsn: str, tmp_path: Path) -> None:
    with pgqueue.Queue(dsn) as q:
        q.configure_stream(retry_base=0.01, retry_cap=0.05)
        own = q.enqueue("own", kind="flaky", max_attempts=2)
        handlers = q.enqueue("handler's", kind="flaky")
        plain = q.enqueue("no handler limit")
        assert q.job(plain) is not None and q.job(plain).max_attempts == 25  # type: ignore[union-attr]
        log = open(tmp_path / "worker.log", "wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "pgqueue", "worker", "--app", "tests.acceptance.attempts_app:app",
             "--concurrency", "2", "--poll-interval", "0.1"],
            cwd=REPO, env={**os.environ, "PGQUEUE_DSN": dsn}, stdin=subprocess.DEVNULL,
            stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: {j.job_id for j in q.dead_letters()} >= {own, handlers}, 60,
                     "both flaky jobs to die")
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
            log.close()
        dead = {j.job_id: j for j in q.dead_letters()}
        assert (dead[own].attempts, dead[own].max_attempts) == (2, 2)
        assert nack_limits(q, own) == [2, 2]  # its Nack ops carry its own limit
        assert dead[handlers].attempts == HANDLER_MAX_ATTEMPTS
        assert nack_limits(q, handlers) == [HANDLER_MAX_ATTEMPTS] * HANDLER_MAX_ATTEMPTS
