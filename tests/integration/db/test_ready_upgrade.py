"""Revision 0011 (ready jobs found through pgqueue.ready) moves a running queue in place: jobs
in every state keep their rows, checkpoints and ops; ready ones are leased in the same order
as before; clients of the previous release (its SQL calls) keep enqueueing, leasing and
acking through the upgrade, and none of their jobs is lost or leased twice."""
from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

import pgqueue
from pgqueue.db import connection, schema
from tests.dbhelp import force_reclaim, state_snapshot
from tests.pgbed import Bed


@pytest.fixture
def at_0010(bed: Bed) -> Iterator[str]:
    db = bed.new_database(migrated=False)
    schema.upgrade(db, "0010")
    try:
        yield db
    finally:
        bed.drop(db)


def one(conn: psycopg.Connection[tuple[Any, ...]], sql: str, *args: object) -> tuple[Any, ...]:
    row = conn.execute(sql, args).fetchone()
    assert row is not None
    return tuple(row)


def fill_every_state(db: str) -> list[int]:
    """Through 0010's functions: ready jobs of several priorities and kinds, scheduled, leased
    (one with a checkpoint), quarantined, undecodable, retried and dead ones. Returns the
    ready jobs' ids."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT pgqueue.configure_stream('a', p_quarantine_after => 1)")
        crashed = int(one(conn, "SELECT pgqueue.enqueue_one('a', 'c'::bytea, 'work', 10)")[0])
        (lease_id,) = one(conn, "SELECT lease_id FROM pgqueue.lease('a', 1, 1, 1, 1)")
        assert lease_id is not None
    assert force_reclaim(db) == 1  # crashed once on its step: quarantined (after 1)
    with psycopg.connect(db, autocommit=True) as conn:
        ready = [int(one(conn, "SELECT pgqueue.enqueue_one('a', %s::bytea, %s, %s)",
                         f"r{i}".encode(), f"k{i % 3}", i % 4)[0]) for i in range(60)]
        one(conn, "SELECT pgqueue.enqueue_one('a', 'later'::bytea, p_delay_ms => 3600000)")
        for i in range(5):
            one(conn, "SELECT pgqueue.enqueue_one('a', %s::bytea, 'work', 9)", f"w{i}".encode())
        leases = conn.execute("SELECT id, lease_id FROM pgqueue.lease('a', 5, 3600000, 1, 1)"
                              ).fetchall()
        assert len(leases) == 5
        (j0, l0), (j1, l1), (j2, l2), (j3, l3), (j4, l4) = leases
        checkpoint = {"last_completed_step": "fetch", "cursor_step": "load",
                      "cursor": "AAH+/w==", "schema_version": 2, "step_set_hash": "h1"}
        conn.execute("SELECT * FROM pgqueue.renew(%s, %s, %s, %s)",
                     ([j0], [l0], [3600000], [Jsonb(checkpoint)]))
        conn.execute("SELECT pgqueue.mark_undecodable(%s, %s, 'unknown_kind', NULL)", (j1, l1))
        conn.execute("SELECT * FROM pgqueue.nack(%s, %s, 'ValueError: no', 3600000)", (j2, l2))
        conn.execute("SELECT * FROM pgqueue.nack(%s, %s, 'ValueError: dead', 0, 1)", (j3, l3))
        conn.execute("SELECT * FROM pgqueue.ack(%s, %s)", ([j4], [l4]))
    with psycopg.connect(db) as conn:
        states: dict[str, int] = dict(conn.execute("SELECT state, count(*) FROM pgqueue.job GROUP BY state"
                                   ).fetchall())
        assert one(conn, "SELECT state FROM pgqueue.job WHERE id = %s", crashed) == (
            "quarantined",)
    assert states == {"pending": 60, "scheduled": 2, "leased": 1, "quarantined": 1,
                      "undecodable": 1}
    return ready


class OldClients:
    """The previous release's producer and worker, as SQL calls (its library makes these same
    calls): enqueue one at a time into stream b, lease 5 and ack them, until stopped."""

    def __init__(self, db: str) -> None:
        self.db = db
        self.stop = threading.Event()
        self.enqueued: list[int] = []
        self.acked: list[int] = []
        self.errors: list[BaseException] = []
        self.threads = [threading.Thread(target=self._guard, args=(f,))
                        for f in (self._produce, self._work)]

    def _guard(self, f: object) -> None:
        try:
            f()  # type: ignore[operator]
        except BaseException as exc:  # reported by the test
            self.errors.append(exc)

    def _produce(self) -> None:
        with psycopg.connect(self.db, autocommit=True) as conn:
            while not self.stop.is_set():
                self.enqueued.append(int(one(conn, "SELECT pgqueue.enqueue_one('b', 'x'::bytea)")[0]))

    def _work(self) -> None:
        with psycopg.connect(self.db, autocommit=True) as conn:
            while not self.stop.is_set():
                rows = conn.execute("SELECT id, lease_id FROM pgqueue.lease('b', 5, 60000, 2, 2)"
                                    ).fetchall()
                if rows:
                    done = conn.execute("SELECT * FROM pgqueue.ack(%s, %s)",
                                        ([r[0] for r in rows], [r[1] for r in rows])).fetchall()
                    self.acked.extend(int(d[0]) for d in done)

    def report(self) -> str:
        """The errors, each with the server's detail (a deadlock's names both processes)."""
        return "\n".join(f"{e!r}: {getattr(getattr(e, 'diag', None), 'message_detail', '')}"
                         for e in self.errors)

    def __enter__(self) -> OldClients:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=60)
        # what the worker had not taken yet when it stopped: every job must still be leasable
        with psycopg.connect(self.db, autocommit=True) as conn:
            while rows := conn.execute("SELECT id, lease_id FROM pgqueue.lease('b', 50, 60000, 2, 2)"
                                       ).fetchall():
                done = conn.execute("SELECT * FROM pgqueue.ack(%s, %s)",
                                    ([r[0] for r in rows], [r[1] for r in rows])).fetchall()
                self.acked.extend(int(d[0]) for d in done)


def test_0011_upgrades_a_running_queue_in_place(at_0010: str) -> None:
    db = at_0010
    ready = fill_every_state(db)
    with psycopg.connect(db) as conn:
        order = [int(r[0]) for r in conn.execute(
            "SELECT id FROM pgqueue.job WHERE stream = 'a' AND state = 'pending' "
            "ORDER BY priority DESC, id")]
        ops_before = conn.execute("SELECT * FROM pgqueue.op_log ORDER BY seq").fetchall()
    assert sorted(order) == sorted(ready)
    before = state_snapshot(db)
    with OldClients(db) as clients:
        while len(clients.acked) < 50:  # running before the upgrade
            assert not clients.errors, clients.report()
        schema.upgrade(db)
        assert schema.current(db) == connection.SCHEMA_REVISION
        upgraded_at = len(clients.enqueued)
        while len(clients.enqueued) < upgraded_at + 200:  # and after it
            assert not clients.errors, clients.report()
    assert not clients.errors, clients.report()
    assert sorted(clients.acked) == sorted(clients.enqueued)  # each once: none lost or twice
    # stream a untouched: every row, its checkpoint and every op as they were
    with psycopg.connect(db) as conn:
        ops_after = conn.execute("SELECT * FROM pgqueue.op_log WHERE seq <= %s ORDER BY seq",
                                 [ops_before[-1][0]]).fetchall()
    assert [o for o in ops_after if o[1] == "a"] == [o for o in ops_before if o[1] == "a"]
    after = state_snapshot(db)
    assert [r for r in after[0] if r[1] == "a"] == [r for r in before[0] if r[1] == "a"]
    assert [r for r in after[1] if r[1] == "a"] == [r for r in before[1] if r[1] == "a"]
    # the ready jobs lease in the order they had, each once, through their entries
    with pgqueue.Queue(db, stream="a") as q:
        leased: list[int] = []
        while batch := q.lease(limit=7, visibility_timeout=60):
            leased.extend(held.job_id for held in batch)
            q.ack_many(batch)
    assert leased == order
