"""Jobs leased ahead of their handlers (prefetch): a lease says which of its jobs start at once,
a renewal says which started since, and reclaim charges no attempt and no crash to a lease
whose handler never started. A job once reclaimed unstarted counts as started at every later
lease, so a job that kills its worker before its start was said is still charged from then on.
Every part travels in the op log: a replay and a follow replica hold the same columns."""
from __future__ import annotations

import datetime as dt
from typing import Any

import psycopg

import pgqueue
from pgqueue.client import lease, reclaim
from tests.dbhelp import T0, pinned, set_now

LATER = T0 + dt.timedelta(hours=1)


def columns(dsn: str, job_id: int) -> dict[str, Any]:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT state, attempts, crashes_by_step, lease_started, unstarted_reclaims "
            "FROM pgqueue.job WHERE id = %s", [job_id]).fetchone()
    assert row is not None
    return dict(zip(("state", "attempts", "crashes", "started", "unstarted"), row, strict=True))


def op_bodies(dsn: str, op: str) -> list[tuple[int, dict[str, Any]]]:
    with psycopg.connect(dsn) as conn:
        return [(r[0], r[1]) for r in conn.execute(
            "SELECT job_id, body FROM pgqueue.op_log WHERE op = %s ORDER BY seq", [op])]


def test_a_lease_says_which_jobs_start_and_reclaim_charges_only_those(
        dsn: str, q: pgqueue.Queue) -> None:
    ids = [q.enqueue(f"job {i}", priority=9 - i) for i in range(4)]  # leased in this order
    with pinned(dsn, T0) as conn:
        leases = lease.lease(conn, "default", 4, 10.0, 1, 1, start=1)
        assert [x.job_id for x in leases] == ids
        assert [x.started for x in leases] == [True, False, False, False]
        # the third job's handler started later: its renewal says so
        renewed = lease.renew_many(conn, [(x, None, None) for x in leases],
                                   [False, False, True, False])
        assert set(renewed) == {x.lease_id for x in leases}
        set_now(conn, LATER)
        assert reclaim.reclaim_expired(conn) == 4
    charged = {"state": "pending", "attempts": 1, "crashes": {"": 1}, "started": True,
               "unstarted": 0}
    free = {"state": "pending", "attempts": 0, "crashes": {}, "started": False, "unstarted": 1}
    assert [columns(dsn, i) for i in ids] == [charged, free, charged, free]
    assert [b.get("started", True) for _, b in op_bodies(dsn, "Lease")] == [
        True, False, False, False]
    reclaims = dict(op_bodies(dsn, "Reclaim"))
    assert [reclaims[i]["unstarted_reclaims"] for i in ids] == [0, 1, 0, 1]
    assert [reclaims[i]["attempts"] for i in ids] == [1, 0, 1, 0]


def test_a_job_once_reclaimed_unstarted_counts_as_started_at_every_later_lease(
        dsn: str, q: pgqueue.Queue) -> None:
    """A job that kills its worker the moment it starts, before any renewal said so, looks
    unstarted to the first reclaim; from its next lease on it is charged, and quarantined."""
    job_id = q.enqueue("poison")
    q.enqueue("ahead of it", priority=5)
    now = T0
    with pinned(dsn, now) as conn:
        first = lease.lease(conn, "default", 2, 10.0, 1, 1, start=1)
        assert [x.started for x in first if x.job_id == job_id] == [False]
        now += dt.timedelta(hours=1)
        set_now(conn, now)
        assert reclaim.reclaim_expired(conn) == 2
    assert columns(dsn, job_id)["attempts"] == 0
    for crashes in (1, 2, 3):
        with pinned(dsn, now) as conn:
            got = lease.lease(conn, "default", 10, 10.0, 1, 1, start=0)
            mine = [x for x in got if x.job_id == job_id]
            assert [x.started for x in mine] == [True], "a lease of start=0 still counts it"
            now += dt.timedelta(hours=1)
            set_now(conn, now)
            reclaim.reclaim_expired(conn)
        assert columns(dsn, job_id)["crashes"] == {"": crashes}
    info = q.job(job_id)
    assert info is not None and info.state == "quarantined"
    assert info.state_detail == {"step": "", "crashes": 3, "threshold": 3}
    assert columns(dsn, job_id)["unstarted"] == 1


def test_a_lease_without_start_counts_every_job_as_started(dsn: str, q: pgqueue.Queue) -> None:
    """Queue.lease and workers of an older release name no start: the old rule, all charged."""
    ids = [q.enqueue(f"job {i}") for i in range(2)]
    leases = q.lease(2)
    assert [x.started for x in leases] == [True, True]
    with pinned(dsn, LATER) as conn:
        assert reclaim.reclaim_expired(conn) == 2
    assert [columns(dsn, i)["attempts"] for i in ids] == [1, 1]


def test_a_negative_start_is_refused_naming_it(dsn: str, q: pgqueue.Queue) -> None:
    q.enqueue("x")
    with psycopg.connect(dsn) as conn:
        try:
            lease.lease(conn, "default", 1, 10.0, 1, 1, start=-1)
        except ValueError as exc:
            assert "start" in str(exc)
        else:
            raise AssertionError("start=-1 was accepted")


def test_a_replay_holds_the_same_started_flags_and_unstarted_counts(
        dsn: str, q: pgqueue.Queue, empty_dsn: str) -> None:
    ids = [q.enqueue(f"job {i}", priority=9 - i) for i in range(3)]
    with pinned(dsn, T0) as conn:
        leases = lease.lease(conn, "default", 3, 10.0, 1, 1, start=1)
        lease.renew_many(conn, [(x, None, None) for x in leases], [False, True, False])
        set_now(conn, LATER)
        reclaim.reclaim_expired(conn)
    q.lease(1, visibility_timeout=60)  # one leased again, live
    pgqueue.migrate(empty_dsn)
    pgqueue.replay(dsn, empty_dsn)
    assert [columns(empty_dsn, i) for i in ids] == [columns(dsn, i) for i in ids]
