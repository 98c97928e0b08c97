"""Queue.history: a job's state and ops, also after it finished, against a real database."""
from __future__ import annotations

import asyncio
import base64

import pytest

import pgqueue
from pgqueue.db import connection
from pgqueue.replicas import replica

pytestmark = [pytest.mark.layouts("single", "citus"),
              pytest.mark.flavours("sync", "async")]


def prune_older_than_a_week(dsn: str, *, job_id: int, before_op: str | None = None) -> None:
    """Make the job's ops (those before its first `before_op`, or all) look eight days old,
    and let the op log prune them as maintenance would."""
    with connection.connect(dsn) as conn:
        conn.execute(
            # one time for them all: Citus computes no column's new value by a STABLE
            # expression (timestamptz arithmetic) on the nodes
            "UPDATE pgqueue.op_log SET at = now() - interval '8 days' WHERE job_id = %(job)s "
            "AND (%(op)s::text IS NULL OR seq < (SELECT min(seq) FROM pgqueue.op_log "
            "WHERE job_id = %(job)s AND op = %(op)s))", {"job": job_id, "op": before_op})
        replica.prune_batches(conn, keep=7 * 86400.0, stale_after=86400.0, batch=10_000, wait=0)


def test_an_acked_job_has_a_history_though_job_says_it_is_gone(q: pgqueue.Queue) -> None:
    job_id = q.enqueue(b"x", kind="k")
    [held] = q.lease()
    q.nack(held, error="boom", retry_in=0)
    [again] = q.lease()
    q.ack(again)
    assert q.job(job_id) is None  # its contract is unchanged
    history = q.history(job_id)
    assert history is not None
    assert [o.op for o in history.ops] == ["Enqueue", "Lease", "Nack", "Lease", "Ack"]
    assert [o.seq for o in history.ops] == sorted(o.seq for o in history.ops)
    ack = history.ops[-1]
    assert (history.job_id, history.state, history.lease_id, history.finished_at) == (
        job_id, "acked", again.lease_id, ack.at)
    assert history.ops_pruned is False and history.payloads_cut is False
    assert base64.b64decode(history.ops[0].body["payload"]) == b"x"


def test_a_cancelled_job_ends_cancelled(q: pgqueue.Queue) -> None:
    job_id = q.enqueue(b"x")
    q.cancel(job_id)
    history = q.history(job_id)
    assert history is not None
    assert (history.state, history.lease_id) == ("cancelled", None)
    assert [o.op for o in history.ops] == ["Enqueue", "Cancel"]
    assert history.finished_at == history.ops[-1].at


def test_a_live_job_has_its_current_state_and_lease(q: pgqueue.Queue) -> None:
    job_id = q.enqueue(b"x")
    pending = q.history(job_id)
    assert pending is not None
    assert (pending.state, pending.lease_id, pending.finished_at) == ("pending", None, None)
    [held] = q.lease()
    leased = q.history(job_id)
    assert leased is not None
    assert (leased.state, leased.lease_id, leased.finished_at) == ("leased", held.lease_id, None)
    assert [o.op for o in leased.ops] == ["Enqueue", "Lease"]


def test_a_dead_letter_finished_when_it_died(q: pgqueue.Queue) -> None:
    job_id = q.enqueue(b"x", max_attempts=1)
    [held] = q.lease()
    assert q.nack(held, error="no") is True
    history = q.history(job_id)
    info = q.job(job_id)
    assert history is not None and info is not None
    assert (history.state, history.finished_at) == ("dead", info.died_at)


# one server only: the op log's retention across a Citus cluster's nodes is not built yet
@pytest.mark.layouts("single")
def test_a_pruned_history_says_so_and_a_job_with_nothing_left_is_none(
        q: pgqueue.Queue, dsn: str) -> None:
    live = q.enqueue(b"x")
    [held] = q.lease()
    prune_older_than_a_week(dsn, job_id=live)
    history = q.history(live)
    assert history is not None
    assert (history.state, history.ops, history.ops_pruned) == ("leased", [], True)
    q.ack(held)
    after = q.history(live)
    assert after is not None and (after.state, after.ops_pruned) == ("acked", True)
    assert [o.op for o in after.ops] == ["Ack"]
    prune_older_than_a_week(dsn, job_id=live)
    assert q.history(live) is None
    assert q.history(10**12) is None and q.history(2**70) is None


def test_a_preview_history_cuts_payloads_in_the_database(q: pgqueue.Queue) -> None:
    job_id = q.enqueue(b"A" * 5000)
    history = q.history(job_id, preview_bytes=10)
    assert history is not None and history.payloads_cut
    assert base64.b64decode(history.ops[0].body["payload"]) == b"A" * 10
    with pytest.raises(ValueError, match="preview_bytes"):
        q.history(job_id, preview_bytes=-1)
    with pytest.raises(TypeError, match="job_id"):
        q.history("1")  # type: ignore[arg-type]


def test_async_queue_history_is_the_same(dsn: str, q: pgqueue.Queue) -> None:
    job_id = q.enqueue(b"x")
    [held] = q.lease()
    q.ack(held)

    async def read() -> pgqueue.JobHistory | None:
        async with pgqueue.AsyncQueue(dsn) as aq:
            return await aq.history(job_id)

    assert asyncio.run(read()) == q.history(job_id)
