"""Handler threads without a database: the error summary their log lines carry, and the
one-way claim (Held.claim) that decides whether a handler or the drain owns a job's start."""
from __future__ import annotations

import datetime as dt
import threading

import pytest

from pgqueue.models import Lease
from pgqueue.runtime.running import Held
from pgqueue.telemetry.logs import MAX_LOGGED_ERROR_CHARS, error_summary


class CustomError(Exception):
    pass


@pytest.mark.parametrize(("exc", "expected"), [
    (RuntimeError("disk on fire"), "RuntimeError: disk on fire"),
    (ValueError(), "ValueError"),
    (CustomError("x"), "tests.unit.test_handlers.CustomError: x"),
    (RuntimeError("line one\n  line two"), "RuntimeError: line one line two"),
    (RuntimeError("cannot connect: host=db password=hunter2 dbname=app"),
     "RuntimeError: cannot connect: host=db password=*** dbname=app"),
    (RuntimeError("PGPASSWORD='s3 cret' is wrong"), "RuntimeError: PGPASSWORD=*** is wrong"),
    (RuntimeError("postgresql://bob:s3cret@db:5432/app refused"),
     "RuntimeError: postgresql://bob:***@db:5432/app refused"),
    (RuntimeError("password: hunter2"), "RuntimeError: password: ***"),
], ids=["message", "no message", "module-qualified type", "one line", "libpq keyword",
        "quoted", "URL", "colon"])
def test_an_error_summary_is_one_line_of_type_and_message_without_passwords(
        exc: BaseException, expected: str) -> None:
    assert error_summary(exc) == expected


def test_an_error_summary_is_cut_short() -> None:
    text = error_summary(RuntimeError("x" * 100_000))
    assert len(text) == MAX_LOGGED_ERROR_CHARS and text.endswith("…")


def race(held: Held, threads: int) -> list[bool]:
    """What `threads` threads released at once got from held.claim()."""
    start = threading.Barrier(threads)
    won: list[bool] = []

    def take() -> None:
        start.wait()
        won.append(held.claim())

    running = [threading.Thread(target=take) for _ in range(threads)]
    for t in running:
        t.start()
    for t in running:
        t.join()
    return won


def test_exactly_one_of_many_racing_threads_wins_a_claim() -> None:
    now = dt.datetime.now(dt.timezone.utc)
    row = (1, 2, "default", "noop", b"{}", 0, 0, 25, now, now, True, *[None] * 7, now, None, False, None)
    for _ in range(200):
        held = Held(Lease.from_lease_row(row, 30.0), 30.0)
        assert sorted(race(held, 8)) == [False] * 7 + [True]
        assert not held.claim()
