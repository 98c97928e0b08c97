"""Why a job failed, at a glance: a failure is kept as a one-line summary and the handler's
traceback (schema 0010), on the job and dead-letter rows and in the Nack and Reclaim ops, so
replay keeps both; lists show the summary, `jobs show`/`dead show` and the dashboard's job page
the traceback with its line breaks, and rows from before 0010 get a summary from their
traceback's last line."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

import pgqueue
from pgqueue import failures, validate
from pgqueue.db import connection, schema
from tests.acceptance.clihelp import as_json, ok
from tests.dbhelp import force_reclaim, wait_for
from tests.integration.client.test_oplog import replay_all
from tests.integration.runtime.test_worker import job, ops, running, state
from tests.pgbed import Bed

pytestmark = pytest.mark.layouts("single", "citus", "stock")

PACKAGE = str(Path(pgqueue.__file__).resolve().parent)


def charge(card: str) -> None:
    """A helper the handler calls: its frame belongs in the traceback."""
    try:
        {"visa": 1}[card]
    except KeyError as exc:
        raise ValueError(f"card {card!r} was declined\nby the bank") from exc


def assert_handler_traceback(text: str, handler: str) -> None:
    """The handler's frames and the chained cause, none of the worker's own."""
    assert text.startswith("Traceback (most recent call last):"), text
    assert f"in {handler}" in text and "in charge" in text, text
    assert "KeyError: 'amex'" in text and "direct cause" in text, text
    assert text.rstrip().endswith("ValueError: card 'amex' was declined\nby the bank"), text
    assert PACKAGE not in text, text  # no frame of pgqueue's worker
    assert "/threading.py" not in text and "/asyncio/" not in text, text


def test_a_plain_handlers_failure_is_a_summary_and_its_own_traceback(
        dsn: str, q: pgqueue.Queue) -> None:
    app = pgqueue.App()

    @app.job("pay", max_attempts=5)
    def pay(ctx: pgqueue.JobContext) -> None:
        charge(ctx.json()["card"])

    q.configure_stream(retry_base=3600)  # one failure, then it waits
    job_id = q.enqueue({"card": "amex"}, kind="pay")
    with running(app, dsn):
        wait_for(lambda: job(q, job_id).attempts == 1, 10, "the failure")
    info = job(q, job_id)
    assert info.error_summary == "ValueError: card 'amex' was declined by the bank"
    assert info.last_error is not None
    assert_handler_traceback(info.last_error, "pay")
    (nack,) = [o for o in ops(q, job_id) if o.op == "Nack"]
    assert (nack.body["error_summary"], nack.body["last_error"]) == (
        info.error_summary, info.last_error)


def test_an_async_handlers_failure_leaves_out_the_event_loop(dsn: str, q: pgqueue.Queue) -> None:
    app = pgqueue.App()

    @app.job("pay", max_attempts=1)
    async def pay(ctx: pgqueue.JobContext) -> None:
        await asyncio.sleep(0)
        charge(ctx.json()["card"])

    job_id = q.enqueue({"card": "amex"}, kind="pay")
    with running(app, dsn):
        wait_for(lambda: state(q, job_id) == "dead", 10, "the job to die")
    (dead,) = q.dead_letters()
    assert dead.error_summary == "ValueError: card 'amex' was declined by the bank"
    assert dead.last_error is not None
    assert_handler_traceback(dead.last_error, "pay")


def test_summary_and_traceback_survive_dead_letters_requeue_reclaim_and_replay(
        bed: Bed, dsn: str, q: pgqueue.Queue) -> None:
    doomed = q.enqueue("x", max_attempts=1)
    (lease,) = q.lease()
    try:
        charge("amex")
    except ValueError as exc:
        assert q.nack(lease, error=exc) is True  # an exception: its summary and traceback
    dead = job(q, doomed)
    assert dead.state == "dead"
    assert dead.error_summary == "ValueError: card 'amex' was declined by the bank"
    assert dead.last_error is not None and "in charge" in dead.last_error
    q.requeue_dead_letter(doomed)
    requeued = job(q, doomed)
    assert (requeued.error_summary, requeued.last_error) == (dead.error_summary, dead.last_error)

    crashed = q.enqueue("y", priority=9)
    (held,) = q.lease(visibility_timeout=30)
    assert held.job_id == crashed
    assert force_reclaim(dsn) == 1
    reclaimed = job(q, crashed)
    assert reclaimed.error_summary == f"LeaseExpired: {reclaimed.last_error}"
    assert reclaimed.last_error is not None and reclaimed.last_error.startswith(
        f"lease {held.lease_id} expired")
    (reclaim,) = [o for o in ops(q, crashed) if o.op == "Reclaim"]
    assert reclaim.body["error_summary"] == reclaimed.error_summary

    target = bed.new_database()
    try:
        replay_all(dsn, target)
        with pgqueue.Queue(target) as copy:
            for job_id in (doomed, crashed):
                mine, theirs = job(q, job_id), job(copy, job_id)
                assert (theirs.error_summary, theirs.last_error) == (
                    mine.error_summary, mine.last_error)
    finally:
        bed.drop(target)


def test_a_text_error_is_summarised_by_its_first_line_or_a_tracebacks_last(
        q: pgqueue.Queue) -> None:
    said = {
        "timeout talking to smtp\nretry later": "timeout talking to smtp",
        "\n\n   spaced    out  \n": "spaced out",
        'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n'
        "KeyError: 'k'\n": "KeyError: 'k'",
        "x" * 500: "x" * 199 + "…",
    }
    for text, summary in said.items():
        job_id = q.enqueue("x")
        (lease,) = q.lease()
        assert lease.job_id == job_id
        q.nack(lease, error=text, retry_in=3600)
        info = job(q, job_id)
        assert (info.last_error, info.error_summary) == (text, summary)


def test_rows_from_before_0010_get_a_summary_from_their_tracebacks_last_line(bed: Bed) -> None:
    """A database at 0009 with a failed job and a dead letter whose last_error is a
    traceback; upgraded, both read with the traceback's last line as their summary."""
    db = bed.new_database(migrated=False)
    traceback_text = ('Traceback (most recent call last):\n  File "app.py", line 3, in pay\n'
                      "    charge(card)\nValueError: card declined\n")
    try:
        schema.upgrade(db, "0009")
        with connection.connect(db) as conn:
            for max_attempts in (5, 1):
                (job_id,) = conn.execute(
                    "SELECT pgqueue.enqueue_one('old', 'x'::bytea, p_max_attempts => %s)",
                    (max_attempts,)).fetchall()
                (lease,) = conn.execute(
                    "SELECT lease_id FROM pgqueue.lease('old', 1, 30000, 0, 0)").fetchall()
                conn.execute("SELECT * FROM pgqueue.nack(%s, %s, %s, 3600000)",
                             (job_id[0], lease[0], traceback_text))
        schema.upgrade(db)
        with pgqueue.Queue(db, stream="old") as q:
            infos = q.jobs()  # live and dead
            assert sorted(i.state for i in infos) == ["dead", "scheduled"]
            for info in infos:
                assert (info.error_summary, info.last_error) == (
                    "ValueError: card declined", traceback_text)
    finally:
        bed.drop(db)


def test_lists_show_the_summary_and_show_prints_the_traceback_line_by_line(
        dsn: str, q: pgqueue.Queue) -> None:
    job_id = q.enqueue("x", max_attempts=1)
    (lease,) = q.lease()
    try:
        charge("amex")
    except ValueError as exc:
        q.nack(lease, error=exc)
    summary = "ValueError: card 'amex' was declined by the bank"
    lists: list[tuple[str, ...]] = [("jobs", "list", "--state", "dead"), ("dead", "list")]
    for args in lists:
        out = ok(dsn, *args).stdout
        assert "ValueError: card" in out and "Traceback" not in out, out
        (row,) = as_json(dsn, *args)
        assert row["error_summary"] == summary and row["last_error"].startswith("Traceback")
    for args in (("jobs", "show", str(job_id)), ("dead", "show", str(job_id))):
        out = ok(dsn, *args).stdout
        assert summary in out
        lines = out.splitlines()
        at = lines.index("last error:")
        stored = (job(q, job_id).last_error or "").rstrip("\n").split("\n")
        assert lines[at + 1:at + 1 + len(stored)] == stored, out  # line by line, as stored
        shown = json.loads(ok(dsn, *args, "--json").stdout)
        assert shown["error_summary"] == summary
        assert shown["last_error"] == job(q, job_id).last_error


def test_the_handler_traceback_keeps_every_frame_from_the_first_of_the_callers() -> None:
    """Frames are left out only before the first that is not pgqueue's or the standard
    library's: pgqueue code a handler called (here: validation) stays in."""
    try:
        validate.payload(object(), "payload")
    except TypeError as exc:
        text = failures.handler_traceback(exc)
        summary = failures.summary(exc)
    assert "in test_the_handler_traceback_keeps" in text and "validate.py" in text
    assert summary.startswith("TypeError: payload must be")
