"""Dead letters: jobs that used up their attempts, listed per stream, found by id, and
requeued by an operator (attempts reset, checkpoint kept, dedup respected)."""
from __future__ import annotations

import pytest

import pgqueue
from tests.asyncbridge import QueueApi
from tests.dbhelp import op_counts, state_snapshot

pytestmark = [pytest.mark.layouts("single", "citus"),
              pytest.mark.flavours("sync", "async")]


def kill(q: pgqueue.Queue, payload: bytes = b"x", *, dedup_key: str | None = None,
         checkpoint: pgqueue.Checkpoint | None = None) -> int:
    """Enqueue a job with max_attempts=1 and fail it once: it is dead."""
    job_id = q.enqueue(payload, max_attempts=1, dedup_key=dedup_key, priority=4, kind="k")
    [held] = q.lease()
    assert held.job_id == job_id
    if checkpoint is not None:
        q.renew(held, checkpoint=checkpoint)
    assert q.nack(held, error="it broke") is True
    return job_id


def test_a_dead_job_is_found_by_id_with_state_dead(q: pgqueue.Queue) -> None:
    job_id = kill(q, b"payload")
    info = q.job(job_id)
    assert info is not None
    assert (info.state, info.payload, info.kind, info.priority, info.attempts,
            info.max_attempts, info.last_error) == ("dead", b"payload", "k", 4, 1, 1, "it broke")


def test_dead_letters_lists_the_queues_own_stream_only(dsn: str, queue_api: QueueApi) -> None:
    with queue_api(dsn, stream="a") as qa, queue_api(dsn, stream="b") as qb:
        a1 = kill(qa)
        b1 = kill(qb)
        a2 = kill(qa)
        qa.enqueue(b"alive")
        assert sorted(d.job_id for d in qa.dead_letters()) == sorted([a1, a2])
        assert [d.job_id for d in qb.dead_letters()] == [b1]
        assert {d.state for d in qa.dead_letters()} == {"dead"}
        assert {d.stream for d in qa.dead_letters()} == {"a"}
        assert len(qa.dead_letters(limit=1)) == 1
        # q.job finds any stream's dead letter
        info = qa.job(b1)
        assert info is not None and (info.stream, info.state) == ("b", "dead")


def test_requeue_returns_the_job_to_pending_with_attempts_reset(q: pgqueue.Queue,
                                                                 dsn: str) -> None:
    checkpoint = pgqueue.Checkpoint(last_completed_step="one", cursor_step="two",
                                    cursor=b"\x00\x10", schema_version=2, step_set_hash="h")
    job_id = kill(q, b"again", checkpoint=checkpoint)
    dead = q.job(job_id)
    assert dead is not None
    ops = op_counts(dsn)
    q.requeue_dead_letter(job_id)
    info = q.job(job_id)
    assert info is not None
    assert (info.state, info.attempts, info.payload, info.kind, info.priority,
            info.max_attempts) == ("pending", 0, b"again", "k", 4, 1)
    assert info.checkpoint == dead.checkpoint
    assert info.checkpoint.cursor == b"\x00\x10"
    assert q.dead_letters() == []
    after = op_counts(dsn)
    assert after.pop("RequeueDeadLetter") == 1
    assert after == ops
    [op] = q.op_log(job_id=job_id, limit=1)
    assert (op.op, op.body["attempts"], op.body["state"]) == ("RequeueDeadLetter", 0, "pending")
    [held] = q.lease()
    assert (held.job_id, held.attempts, held.checkpoint.last_completed_step) == (
        job_id, 0, "one")
    # attempts start over: max_attempts=1 kills it on the next failure again
    assert q.nack(held, error="twice") is True


def test_requeue_of_a_job_that_is_not_a_dead_letter_raises_job_not_found(
    q: pgqueue.Queue, dsn: str,
) -> None:
    pending = q.enqueue(b"p")
    leased = q.enqueue(b"l")
    acked = q.enqueue(b"a")
    [held_l, held_a] = [h for h in q.lease(limit=3) if h.job_id in (leased, acked)]
    q.ack(held_a)
    snapshot, ops = state_snapshot(dsn), op_counts(dsn)
    for job_id in (pending, leased, acked, 999_999):
        with pytest.raises(pgqueue.JobNotFound, match=str(job_id)):
            q.requeue_dead_letter(job_id)
    assert state_snapshot(dsn) == snapshot
    assert op_counts(dsn) == ops
    assert held_l.job_id == leased
    assert issubclass(pgqueue.JobNotFound, pgqueue.PgQueueError)


def test_requeue_twice_raises_job_not_found(q: pgqueue.Queue) -> None:
    job_id = kill(q)
    q.requeue_dead_letter(job_id)
    with pytest.raises(pgqueue.JobNotFound):
        q.requeue_dead_letter(job_id)


def test_requeue_refuses_when_a_live_job_holds_the_dedup_key(q: pgqueue.Queue,
                                                             dsn: str) -> None:
    dead = kill(q, dedup_key="once")
    holder = q.enqueue(b"newer", dedup_key="once")
    assert holder != dead
    snapshot, ops = state_snapshot(dsn), op_counts(dsn)
    with pytest.raises(pgqueue.DedupConflict) as caught:
        q.requeue_dead_letter(dead)
    assert isinstance(caught.value, pgqueue.PgQueueError)
    assert caught.value.holder == holder
    assert str(holder) in str(caught.value)
    assert state_snapshot(dsn) == snapshot
    assert op_counts(dsn) == ops
    info = q.job(dead)
    assert info is not None and info.state == "dead"
    # once the holder is done, the dead letter can come back, and holds the key again
    [held] = q.lease()
    q.ack(held)
    q.requeue_dead_letter(dead)
    assert q.enqueue(b"third", dedup_key="once") == dead


def test_requeue_is_allowed_when_the_key_is_held_in_another_stream(dsn: str, queue_api: QueueApi) -> None:
    with queue_api(dsn, stream="a") as qa, queue_api(dsn, stream="b") as qb:
        dead = kill(qa, dedup_key="k")
        qb.enqueue(b"other stream", dedup_key="k")
        qa.requeue_dead_letter(dead)
        info = qa.job(dead)
        assert info is not None and info.state == "pending"


def test_requeue_rejects_a_bad_id(q: pgqueue.Queue) -> None:
    with pytest.raises(TypeError, match="job_id"):
        q.requeue_dead_letter("1")  # type: ignore[arg-type]


def test_requeue_of_an_id_beyond_bigint_is_not_a_missing_schema(q: pgqueue.Queue,
                                                                 dsn: str) -> None:
    snapshot, ops = state_snapshot(dsn), op_counts(dsn)
    with pytest.raises((ValueError, pgqueue.JobNotFound)):
        q.requeue_dead_letter(2**63)
    assert state_snapshot(dsn) == snapshot
    assert op_counts(dsn) == ops
