"""Operator verbs on one job (release, rewind, restart, skip-step, accept-step-set, and requeue of
a dead letter): each that sends a parked job back to pending refuses with DedupConflict, naming
the holder, when a live job holds its dedup key, also one enqueued by a transaction that was
still open when the verb ran; messages read as sentences."""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

import pgqueue
from pgqueue.db import connection
from tests.asyncbridge import QueueApi
from tests.dbhelp import lock_waiters, op_counts, register_etl_step_sets, wait_for

pytestmark = [pytest.mark.layouts("single", "citus"),
              pytest.mark.flavours("sync", "async")]

KEY = "the-key"
H1, H2 = "hash-one", "hash-two"


def parked_job(q: pgqueue.Queue, dsn: str) -> int:
    """A step job (steps a, b; a completed) holding KEY, parked as undecodable because its
    step set changed to a, x, b (registered)."""
    register_etl_step_sets(dsn, H1, H2)
    job_id = q.enqueue(b"parked", kind="etl", dedup_key=KEY)
    (held,) = q.lease(1)
    q.renew(held, checkpoint=pgqueue.Checkpoint(last_completed_step="a", cursor_step="b",
                                                 step_set_hash=H1))
    with connection.connect(dsn) as conn:
        conn.execute("SELECT pgqueue.mark_undecodable(%s, %s, 'step_set_changed', %s, "
                     "p_stream => %s)",
                     [job_id, held.lease_id, Jsonb({"old_hash": H1, "new_hash": H2}), held.stream])
    info = q.job(job_id)
    assert info is not None and info.state == "undecodable"
    return job_id


def dead_job(q: pgqueue.Queue, dsn: str) -> int:
    """A dead letter holding KEY."""
    job_id = q.enqueue(b"dead", dedup_key=KEY, max_attempts=1)
    (held,) = q.lease(1)
    assert q.nack(held, error="failed") is True
    return job_id


#: verb -> (make the job it acts on, act on it)
VERBS: dict[str, tuple[Callable[[pgqueue.Queue, str], int], Callable[[pgqueue.Queue, int], Any]]] = {
    "release": (parked_job, lambda q, j: q.release(j)),
    "rewind": (parked_job, lambda q, j: q.rewind(j, "a")),
    "restart": (parked_job, lambda q, j: q.restart(j)),
    "skip_step": (parked_job, lambda q, j: q.skip_step(j)),
    "accept_step_set": (parked_job, lambda q, j: q.accept_step_set(j)),
    "requeue_dead_letter": (dead_job, lambda q, j: q.requeue_dead_letter(j)),
}


def _someone_waits_on_a_lock(dsn: str) -> bool:
    with connection.connect(dsn) as conn:
        return lock_waiters(conn) > 0


@pytest.mark.parametrize("verb", sorted(VERBS))
@pytest.mark.flavours("sync")  # conn= a sync connection
def test_a_verb_racing_an_uncommitted_enqueue_of_its_key_raises_dedup_conflict(
        dsn: str, q: pgqueue.Queue, verb: str, queue_api: QueueApi) -> None:
    make, act = VERBS[verb]
    job_id = make(q, dsn)
    before = q.job(job_id)
    ops_before = op_counts(dsn)
    with psycopg.connect(dsn) as rival_tx:  # a transaction, left open
        rival = q.enqueue(b"rival", dedup_key=KEY, conn=rival_tx)
        outcome: dict[str, Any] = {}
        with queue_api(dsn) as other:
            def run() -> None:
                try:
                    outcome["result"] = act(other, job_id)
                except BaseException as exc:  # examined below
                    outcome["error"] = exc

            worker = threading.Thread(target=run, daemon=True)
            worker.start()
            # the verb's write waits on the rival's uncommitted index entry
            wait_for(lambda: not worker.is_alive() or _someone_waits_on_a_lock(dsn), 10,
                     f"{verb} to wait for the open enqueue")
            rival_tx.commit()
            worker.join(30)
            assert not worker.is_alive()
    error = outcome.get("error")
    assert isinstance(error, pgqueue.DedupConflict), outcome
    assert error.holder == rival, (error, error.holder, rival)
    assert str(rival) in str(error)
    # nothing changed: the job is still where it was, and no op was logged for it
    after = q.job(job_id)
    assert after is not None and before is not None
    assert (after.state, after.checkpoint) == (before.state, before.checkpoint)
    ops_after = op_counts(dsn)
    ops_after["Enqueue"] -= 1  # the rival's
    assert ops_after == ops_before


@pytest.mark.parametrize("verb", sorted(VERBS))
@pytest.mark.flavours("sync")  # conn= a sync connection
def test_a_verb_whose_rival_enqueue_rolls_back_goes_ahead(
        dsn: str, q: pgqueue.Queue, verb: str, queue_api: QueueApi) -> None:
    make, act = VERBS[verb]
    job_id = make(q, dsn)
    with psycopg.connect(dsn) as rival_tx:
        q.enqueue(b"rival", dedup_key=KEY, conn=rival_tx)
        outcome: dict[str, Any] = {}
        with queue_api(dsn) as other:
            worker = threading.Thread(
                target=lambda: outcome.setdefault("result", act(other, job_id)), daemon=True)
            worker.start()
            wait_for(lambda: not worker.is_alive() or _someone_waits_on_a_lock(dsn), 10,
                     f"{verb} to wait for the open enqueue")
            rival_tx.rollback()
            worker.join(30)
            assert not worker.is_alive()
    info = q.job(job_id)
    assert info is not None and info.state == "pending"


def test_a_committed_holder_is_named_as_before(dsn: str, q: pgqueue.Queue) -> None:
    job_id = parked_job(q, dsn)
    holder = q.enqueue(b"holder", dedup_key=KEY)
    with pytest.raises(pgqueue.DedupConflict) as caught:
        q.release(job_id)
    assert caught.value.holder == holder


# -- messages -----------------------------------------------------------------------------------


def test_skip_step_on_a_leased_job_reads_as_a_sentence(q: pgqueue.Queue) -> None:
    job_id = q.enqueue(b"x")
    q.lease(1)
    with pytest.raises(pgqueue.InvalidState) as caught:
        q.skip_step(job_id)
    message = str(caught.value)
    assert message == (f"cannot skip a step of job {job_id}: it is leased, and skip-step "
                       "applies only to pending or scheduled or quarantined or undecodable jobs")


def test_accept_step_set_on_a_pending_job_reads_as_a_sentence(q: pgqueue.Queue) -> None:
    job_id = q.enqueue(b"x")
    with pytest.raises(pgqueue.InvalidState) as caught:
        q.accept_step_set(job_id)
    assert str(caught.value) == (f"cannot accept the step set of job {job_id}: it is pending, "
                                 "and accept-step-set applies only to undecodable jobs")


def test_release_of_a_pending_job_still_names_the_verb(q: pgqueue.Queue) -> None:
    job_id = q.enqueue(b"x")
    with pytest.raises(pgqueue.InvalidState) as caught:
        q.release(job_id)
    assert str(caught.value) == (f"cannot release job {job_id}: it is pending, and release "
                                 "applies only to quarantined or undecodable jobs")


# one server only: on Citus a verb names its stream (tests/integration/citus: the refusal)
@pytest.mark.layouts("single")
def test_in_psql_a_verb_reads_as_a_few_columns_of_the_job(dsn: str, q: pgqueue.Queue) -> None:
    """`SELECT * FROM pgqueue.accept_step_set(42)`: the job's id, stream, kind, state, attempts
    and checkpoint as columns, not its whole row (35 columns, payload included)."""
    job_id = parked_job(q, dsn)
    with connection.connect(dsn) as conn:
        cur = conn.execute("SELECT * FROM pgqueue.accept_step_set(%s)", [job_id])
        assert [d.name for d in cur.description or []] == [
            "id", "stream", "kind", "state", "attempts", "last_completed_step", "cursor_step"]
        assert cur.fetchall() == [(job_id, "default", "etl", "pending", 0, "a", "b")]
        cur = conn.execute("SELECT * FROM pgqueue.rewind(%s, 'a')", [job_id])
        assert cur.fetchall() == [(job_id, "default", "etl", "pending", 0, None, None)]
