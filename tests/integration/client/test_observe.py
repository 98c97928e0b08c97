"""Inspection: one job, lists, stats, and the op log as a reader sees it."""
from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import re
from collections.abc import Mapping

import pytest

import pgqueue
from pgqueue.client import observe, observe_async
from pgqueue.db import connection, queries
from tests.asyncbridge import QueueApi
from tests.dbhelp import force_reclaim, wait_for

pytestmark = [pytest.mark.layouts("single", "citus", "stock"),
              pytest.mark.flavours("sync", "async")]


def by_key(stats: list[pgqueue.StreamStats]) -> dict[tuple[str, str], int]:
    return {(s.stream, s.state): s.count for s in stats}


def test_job_returns_none_for_acked_and_unknown_ids(q: pgqueue.Queue) -> None:
    job_id = q.enqueue(b"x")
    [held] = q.lease()
    q.ack(held)
    assert q.job(job_id) is None
    assert q.job(job_id + 1000) is None
    assert q.job(0) is None
    assert q.job(2**63) is None


@pytest.mark.parametrize("state", ["pending", "scheduled", "leased", "dead", "quarantined"])
def test_job_reports_every_state(q: pgqueue.Queue, dsn: str, state: str) -> None:
    job_id = q.enqueue(b"x", delay=60 if state == "scheduled" else None,
                       max_attempts=1 if state == "dead" else 25)
    if state in ("leased", "dead"):
        [held] = q.lease()
        if state == "dead":
            q.nack(held)
    if state == "quarantined":
        q.configure_stream(quarantine_after=1)
        q.lease()
        assert force_reclaim(dsn) == 1  # its lease expired: one crash
    info = q.job(job_id)
    assert info is not None
    assert info.state == state
    assert info.job_id == job_id
    assert info.stream == "default"


def test_jobs_lists_newest_first_with_filters(dsn: str, queue_api: QueueApi) -> None:
    with queue_api(dsn, stream="a") as qa, queue_api(dsn, stream="b") as qb:
        a1, a2, a3 = qa.enqueue_many([pgqueue.NewJob(b"1"), pgqueue.NewJob(b"2"),
                                      pgqueue.NewJob(b"3", delay=60)])
        b1 = qb.enqueue(b"b")
        [held] = qa.lease()
        assert held.job_id == a1
        assert [j.job_id for j in qa.jobs()] == [a3, a2, a1]
        assert [j.job_id for j in qa.jobs(state="pending")] == [a2]
        assert [j.job_id for j in qa.jobs(state="scheduled")] == [a3]
        assert [j.job_id for j in qa.jobs(state="leased")] == [a1]
        assert [j.job_id for j in qa.jobs(all_streams=True)] == [b1, a3, a2, a1]
        assert [j.job_id for j in qa.jobs(limit=2)] == [a3, a2]
        assert [j.job_id for j in qb.jobs()] == [b1]
        with pytest.raises(ValueError, match="state"):
            qa.jobs(state="running")


def test_jobs_lists_dead_letters_too(q: pgqueue.Queue) -> None:
    job_id = q.enqueue(b"x", max_attempts=1)
    [held] = q.lease()
    q.nack(held, error="e")
    assert [(j.job_id, j.state) for j in q.jobs(state="dead")] == [(job_id, "dead")]
    assert [j.job_id for j in q.jobs()] == [job_id]


def test_stats_counts_jobs_by_stream_and_state(dsn: str, queue_api: QueueApi) -> None:
    with queue_api(dsn, stream="a") as qa, queue_api(dsn, stream="b") as qb:
        assert qa.stats() == []
        qa.enqueue_many([pgqueue.NewJob(f"{i}") for i in range(4)])
        qa.enqueue(b"later", delay=60)
        qb.enqueue_many([pgqueue.NewJob(b"x", max_attempts=1), pgqueue.NewJob(b"y")])
        qa.lease(limit=1)
        [dying] = qb.lease(limit=1)
        qb.nack(dying)

        def aged() -> list[pgqueue.StreamStats] | None:  # the clock moved on from the enqueue
            stats = qa.stats()
            age = {(s.stream, s.state): s.oldest_age_seconds for s in stats}.get(("a", "pending"))
            return stats if age else None

        stats = wait_for(aged, 10, "the oldest pending job to be older than 0 s")
        assert by_key(stats) == {
            ("a", "pending"): 3, ("a", "scheduled"): 1, ("a", "leased"): 1,
            ("b", "pending"): 1, ("b", "dead"): 1,
        }
        assert by_key(qb.stats()) == by_key(stats)  # stats are database-wide
        ages = {(s.stream, s.state): s.oldest_age_seconds for s in stats}
        age = ages[("a", "pending")]
        assert age is not None and 0 < age < 30


def test_op_log_tells_a_jobs_whole_history(q: pgqueue.Queue, dsn: str) -> None:
    job_id = q.enqueue(b"\x00hi", kind="k", priority=3, dedup_key="dk", max_attempts=5)
    [held] = q.lease(worker_node=1, worker_instance=2)
    q.renew(held, checkpoint=pgqueue.Checkpoint(cursor_step="s"))
    q.nack(held, error="e", retry_in=0)
    [again] = q.lease()
    q.ack(again)
    ops = q.op_log(job_id=job_id)
    assert [op.op for op in ops] == ["Ack", "Lease", "Nack", "Renew", "Lease", "Enqueue"]
    seqs = [op.seq for op in ops]
    assert seqs == sorted(seqs, reverse=True)
    assert {op.stream for op in ops} == {"default"}
    enq = ops[-1].body
    for field in ("job_id", "payload", "enqueued_at_ms", "next_job_id", "priority",
                  "not_before_ms", "dedup_key", "attempts", "max_attempts"):
        assert field in enq, field
    assert (enq["job_id"], enq["priority"], enq["attempts"], enq["max_attempts"]) == (
        job_id, 3, 0, 5)
    assert base64.b64decode(enq["payload"]) == b"\x00hi"
    assert base64.b64decode(enq["dedup_key"]) == b"dk"
    assert enq["next_job_id"] > job_id
    nack = ops[2]
    assert (nack.lease_id, nack.body["attempts"], nack.body["last_error"]) == (
        held.lease_id, 1, "e")
    # each transition's op was written by its own transaction
    assert len({op.xid for op in ops}) == len(ops)
    with connection.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM pgqueue.op_log WHERE job_id = %s",
                           (job_id,)).fetchone()
    assert row is not None and row[0] == 6


def test_op_log_is_per_stream_unless_asked(dsn: str, queue_api: QueueApi) -> None:
    with queue_api(dsn, stream="a") as qa, queue_api(dsn, stream="b") as qb:
        a = qa.enqueue(b"a")
        b = qb.enqueue(b"b")
        assert [op.job_id for op in qa.op_log()] == [a]
        assert [op.job_id for op in qa.op_log(all_streams=True)] == [b, a]
        assert len(qa.op_log(all_streams=True, limit=1)) == 1


def test_every_public_queue_method_follows_the_leader() -> None:
    """Each Queue method that talks to the database moves to the leader when its database
    turned out to be a replica (the wrapper is what does it)."""
    import inspect as pyinspect

    # enqueue and enqueue_many open their producer span, then call the wrapped methods below;
    # for_stream makes a queue (no call)
    exempt = {"close", "connection", "enqueue", "enqueue_many", "for_stream"}
    for name, member in pyinspect.getmembers(pgqueue.Queue, pyinspect.isfunction):
        if name.startswith("_") or name in exempt:
            continue
        assert getattr(member, "__wrapped__", None) is not None, f"Queue.{name} does not follow the leader"
    for queue in (pgqueue.Queue, pgqueue.AsyncQueue):
        assert getattr(queue._enqueue_job, "__wrapped__", None) is not None
        assert getattr(queue._enqueue_jobs, "__wrapped__", None) is not None


# -- previews: payloads cut by the database --------------------------------------------------


def test_job_preview_cuts_the_payload_and_gives_its_size(q: pgqueue.Queue) -> None:
    payload = bytes(range(256)) * 40  # 10,240 bytes
    job_id = q.enqueue(payload, kind="k", dedup_key="d")
    small = q.enqueue(b"tiny")
    found = q.job_preview(job_id, preview_bytes=100)
    assert found is not None
    assert (found.job.payload, found.payload_size, found.payload_truncated) == (
        payload[:100], len(payload), True)
    whole = q.job(job_id)
    assert whole is not None
    # every other field is the whole snapshot's
    assert dataclasses.replace(found.job, payload=whole.payload) == whole
    tiny = q.job_preview(small)
    assert tiny is not None and tiny.job == q.job(small)
    assert (tiny.payload_size, tiny.payload_truncated) == (4, False)
    at_zero = q.job_preview(job_id, preview_bytes=0)
    assert at_zero is not None and at_zero.job.payload == b"" and at_zero.payload_truncated
    assert q.job_preview(job_id + 1000) is None
    assert q.job_preview(2**63) is None
    with pytest.raises(ValueError, match="preview_bytes"):
        q.job_preview(job_id, preview_bytes=-1)


def test_jobs_and_dead_letter_previews_list_like_the_whole_readers(dsn: str, queue_api: QueueApi) -> None:
    with queue_api(dsn, stream="a") as qa, queue_api(dsn, stream="b") as qb:
        qa.enqueue_many([pgqueue.NewJob(b"x" * 5000, max_attempts=1),
                         pgqueue.NewJob(b"y" * 10, max_attempts=1)])
        qb.enqueue(b"z" * 3000)
        for held in qa.lease(limit=2):
            assert qa.nack(held, error="e")
        for all_streams, state in ((True, None), (False, None), (False, "dead"), (True, "pending")):
            previews = qa.jobs_preview(all_streams=all_streams, state=state, preview_bytes=64)
            whole = qa.jobs(all_streams=all_streams, state=state)
            assert [p.job.job_id for p in previews] == [j.job_id for j in whole]
            for p, j in zip(previews, whole, strict=True):
                assert p.job.payload == j.payload[:64] and p.payload_size == len(j.payload)
        dead = qa.dead_letters_preview(preview_bytes=64)
        assert [p.job.job_id for p in dead] == [j.job_id for j in qa.dead_letters()]
        assert [(p.payload_size, p.payload_truncated) for p in dead] == [
            (len(j.payload), len(j.payload) > 64) for j in qa.dead_letters()]
        assert sorted(p.payload_size for p in dead) == [10, 5000]
        assert qb.dead_letters_preview() == []


@pytest.mark.flavours("sync")  # runs its own statements on q.connection()
def test_op_log_preview_is_op_body_with_the_payload_cut(q: pgqueue.Queue) -> None:
    """For payloads within the preview, the preview's bodies are exactly op_body's (so the
    query that rebuilds Enqueue bodies cannot drift from pgqueue.op_body); beyond it only the
    payload is cut, also in bodies that hold a payload themselves (Upcast, UpsertSchedule)."""
    big = bytes(range(256)) * 20  # 5,120 bytes
    q.enqueue(b"\x00hi", kind="k", priority=3, dedup_key="dk", max_attempts=5)
    q.enqueue(b"later", delay=60)
    job_id = q.enqueue(big, kind="big")
    q.upsert_schedule("nightly", "0 3 * * *", big)
    [held] = q.lease()  # the first job (FIFO at one priority)
    with q.connection() as conn:
        assert queries.scalar(conn, "upcast_job", {
            "stream": held.stream, "job_id": held.job_id, "lease_id": held.lease_id, "payload": big,
            "schema_version": 2})
    whole = q.op_log(limit=100)
    wide = q.op_log_preview(limit=100, preview_bytes=len(big))
    assert [p.op for p in wide] == whole
    assert all(not p.payload_truncated for p in wide)
    cut = q.op_log_preview(limit=100, preview_bytes=100)
    assert [p.op.seq for p in cut] == [o.seq for o in whole]
    by_op = {(p.op.op, p.op.job_id): p for p in cut}
    for key in (("Enqueue", job_id), ("Upcast", held.job_id), ("UpsertSchedule", None)):
        p = by_op[key]
        assert (p.payload_size, p.payload_truncated) == (len(big), True), key
        assert base64.b64decode(p.op.body["payload"]) == big[:100], key
        full = next(o for o in whole if o.seq == p.op.seq)
        assert {k: v for k, v in p.op.body.items() if k != "payload"} == \
            {k: v for k, v in full.body.items() if k != "payload"}, key
    assert by_op[("Lease", held.job_id)].payload_size is None
    assert [p.op.job_id for p in q.op_log_preview(job_id=job_id)] == [job_id]
    assert len(q.op_log_preview(limit=2)) == 2


# -- keyset pages (the dashboard's job lists) ----------------------------------------------------


def _page_plan(conn: connection.Conn, params: Mapping[str, str]) -> str:
    import json

    sql = queries.get("jobs_page").sql
    # the branch jobs_page would choose: a stream's ready jobs few among many by their entries
    by_ready = observe._by_ready(conn, params.get("stream"), params.get("state"), 50)
    row = conn.execute(f"EXPLAIN (FORMAT JSON) {sql}", prepare=False, params={
        "stream": None, "state": None, "kind": None, "after": None, "through": None,
        "limit": 51, "preview": 100, "by_ready": by_ready, **params}).fetchone()
    return json.dumps(row)


# one server only: it reads one server's plans (on Citus each node plans its own shards)
@pytest.mark.layouts("single")
def test_a_page_of_a_stream_and_state_reads_its_index_not_the_whole_table(
        q: pgqueue.Queue, dsn: str) -> None:
    """Rare jobs (a small stream's, in any state) behind 20,000 others are found through
    their ready entries (pgqueue.ready), job_listed_idx and job_leased_idx; a state reads only its table; and
    jobs_page is never prepared, so a plan made for earlier calls' arguments (no filter: the
    primary keys) is never reused for others."""
    for _ in range(20):
        q.enqueue_many([pgqueue.NewJob(b"x", kind="bulk") for _ in range(1000)])
    with connection.connect(dsn, prepare_threshold=5) as conn:  # psycopg's default
        conn.execute("ANALYZE pgqueue.job")
        conn.execute("ANALYZE pgqueue.dead_letter")
        conn.execute("ANALYZE pgqueue.ready")
        for params, index in [({"stream": "small", "state": "pending"}, "ready_"),
                              ({"stream": "small", "state": "scheduled"},
                               ("job_listed_idx", "job_scheduled_idx")),
                              ({"stream": "small", "state": "quarantined"}, "job_listed_idx"),
                              ({"stream": "small", "state": "leased"}, "job_leased_idx")]:
            plan = _page_plan(conn, params)
            assert any(i in plan for i in ((index,) if isinstance(index, str) else index)), \
                (params, plan)
            # (a ready partition found empty is read as such: no page to read)
            assert not re.search(r'"Node Type": "Seq Scan"[^{}]*"Relation Name": "(job|dead_letter)"',
                                 plan), (params, plan)
        assert '"Relation Name": "dead_letter"' not in _page_plan(conn, {"state": "pending"})
        assert '"Relation Name": "job"' not in _page_plan(conn, {"state": "dead"})
        for _ in range(12):  # more than psycopg's prepare threshold (5)
            observe.jobs_page(conn, limit=5)
            observe.jobs_page(conn, stream="default", state="pending", limit=5)
            observe.stats(conn)  # an ordinary query: prepared after 5 runs
        prepared = [r[0] for r in conn.execute("SELECT statement FROM pg_prepared_statements")]
        assert not [s for s in prepared if "planned per call" in s], prepared
        assert [s for s in prepared if "GROUP BY stream, state" in s], prepared
    assert queries.get("jobs_page").prepare is False and queries.get("lease_jobs").prepare


def test_pages_walk_every_job_once_newest_first(q: pgqueue.Queue) -> None:
    dead = q.enqueue(b"d", kind="k", max_attempts=1)
    for lease in q.lease(limit=1):
        q.nack(lease, error="x")  # dies: a dead letter, in the other table
    ids = q.enqueue_many([pgqueue.NewJob({"i": i}, kind="k" if i % 3 else "other")
                          for i in range(23)])
    seen: list[int] = []
    after = None
    while True:
        page = q.jobs_page(kind="k", after=after, limit=4)
        seen += [p.job.job_id for p in page.jobs]
        if page.next is None:
            break
        assert page.next == seen[-1]
        after = page.next
    wanted = sorted([i for n, i in enumerate(ids) if n % 3] + [dead], reverse=True)
    assert seen == wanted
    assert {p.job.state for p in q.jobs_page(state="dead").jobs} == {"dead"}
    newest = max([*ids, dead])
    assert q.count_jobs(kind="k") == pgqueue.JobCount(len(wanted), newest)
    assert q.count_jobs(state="pending") == pgqueue.JobCount(len(ids), newest)  # kept counts
    assert q.count_jobs(stream="default", state="dead") == pgqueue.JobCount(1, newest)
    assert q.count_jobs(stream="elsewhere") == pgqueue.JobCount(0, newest)
    with pytest.raises(ValueError, match="limit"):
        q.jobs_page(limit=0)
    with pytest.raises(ValueError, match="state must be one of"):
        q.jobs_page(state="finished")


def test_throughput_counts_the_op_log_by_stream_and_minute(dsn: str, q: pgqueue.Queue,
                                                           queue_api: QueueApi) -> None:
    q.enqueue_many([pgqueue.NewJob(b"x") for _ in range(4)])
    first, second = q.lease(limit=2)
    q.ack(first)
    q.nack(second, error="no")
    with queue_api(dsn, stream="other") as other:
        job_id = other.enqueue(b"y")
        other.cancel(job_id)
    whole = q.throughput()
    totals = {s: [sum(getattr(t, f) for t in whole.minutes if t.stream == s)
                  for f in ("enqueued", "acked", "failed", "cancelled")]
              for s in ("default", "other")}
    assert totals == {"default": [4, 1, 1, 0], "other": [1, 0, 0, 1]}
    assert all(t.minute <= whole.now_minute and t.minute.second == 0 for t in whole.minutes)
    later = q.throughput(since=whole.now_minute + dt.timedelta(minutes=1))
    assert later.minutes == [] and later.now_minute >= whole.now_minute
    with pytest.raises(ValueError, match="timezone-aware"):
        q.throughput(since=dt.datetime(2026, 1, 1))


def test_a_kind_page_looks_at_a_bounded_window_and_the_walk_still_finds_every_job(
        q: pgqueue.Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a kind, a page reads at most KIND_WINDOW jobs: a kind no job near the top has
    gives an empty page with a next cursor, and following next finds every job of it."""
    monkeypatch.setattr(observe, "KIND_WINDOW", 5)
    monkeypatch.setattr(observe_async, "KIND_WINDOW", 5)  # the async flavour's
    rare = [q.enqueue(b"r", kind="rare")]
    q.enqueue_many([pgqueue.NewJob(b"x", kind="bulk") for _ in range(12)])
    rare.append(q.enqueue(b"r", kind="rare"))
    q.enqueue_many([pgqueue.NewJob(b"x", kind="bulk") for _ in range(7)])
    first = q.jobs_page(kind="rare", limit=10)
    assert first.jobs == [] and first.next is not None  # 5 bulk jobs looked at, none rare
    seen: list[int] = []
    pages = 0
    page = first
    while page.next is not None:
        page = q.jobs_page(kind="rare", limit=10, after=page.next)
        seen += [p.job.job_id for p in page.jobs]
        pages += 1
        assert pages < 10
    assert seen == sorted(rare, reverse=True)
    assert [p.job.job_id for p in q.jobs_page(kind="nothing", limit=3).jobs] == []
    # more jobs of the kind in the window than a page holds: next is the last one shown
    many = q.jobs_page(kind="bulk", limit=2)
    assert len(many.jobs) == 2 and many.next == many.jobs[-1].job.job_id


def test_the_streams_the_database_knows_and_a_typo_of_one(q: pgqueue.Queue) -> None:
    """Streams with jobs (or that had some), settings or schedules; a name none of them has
    is said so with the closest."""
    q.enqueue(b"x")
    with q.for_stream("payments") as pay:
        pay.configure_stream(retry_base=2.0)
    with q.for_stream("reports") as rep:
        rep.upsert_schedule("nightly", "0 3 * * *")
    assert q.streams() == ["default", "payments", "reports"]
    assert q.unknown_stream("payments") is None
    assert q.unknown_stream("paymnets") == "no stream 'paymnets': did you mean 'payments'?"
