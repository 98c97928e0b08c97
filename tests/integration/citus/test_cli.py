"""The operator's command line against a Citus cluster's coordinator: the same commands as on
one server, each about a stream run on its node."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.acceptance.clihelp import as_json, ok
from tests.citusbed import CitusBed, CitusDatabase, stream_group


@pytest.fixture
def cdb(citus_bed: CitusBed) -> Iterator[CitusDatabase]:
    db = citus_bed.new_database()
    yield db
    citus_bed.drop(db)


def test_the_operator_s_commands_on_a_cluster(cdb: CitusDatabase) -> None:
    dsn = cdb.dsn
    streams = [f"cli-{i}" for i in range(4)]
    assert {stream_group(cdb, s) for s in streams} == {1, 2}
    ids = {s: [int(ok(dsn, "enqueue", s, f"{s}-{i}", "--kind", "k").stdout) for i in range(3)]
           for s in streams}
    for s in streams:
        assert all(i % 1024 == stream_group(cdb, s) for i in ids[s])  # drawn on its node
    stats = {(r["stream"], r["state"]): r["count"] for r in as_json(dsn, "stats")}
    assert stats == {(s, "pending"): 3 for s in streams}
    listed = as_json(dsn, "jobs", "list", "--stream", streams[0])
    assert sorted(j["job_id"] for j in listed) == ids[streams[0]]
    cancelled = ids[streams[1]][0]
    assert as_json(dsn, "jobs", "cancel", str(cancelled))["outcome"] == "cancelled"
    shown = as_json(dsn, "jobs", "inspect", str(cancelled))["history"]
    assert (shown["state"], [op["op"] for op in shown["ops"]]) == ("cancelled",
                                                                   ["Enqueue", "Cancel"])
    assert all(op["seq"] % 1024 == stream_group(cdb, streams[1]) for op in shown["ops"])
    ok(dsn, "jobs", "bulk", "cancel", "--stream", streams[2], "--yes")
    assert as_json(dsn, "jobs", "list", "--stream", streams[2]) == []
    ok(dsn, "kinds", "set", "k", "--stream", streams[3], "--max-concurrency", "2")
    assert [(k["kind"], k["max_concurrency"])
            for k in as_json(dsn, "kinds", "list", "--stream", streams[3])] == [("k", 2)]
    ok(dsn, "schedules", "add", "nightly", "0 3 * * *", "--stream", streams[3], "--payload", "x")
    assert [s["name"] for s in as_json(dsn, "schedules", "list", "--stream", streams[3])] == [
        "nightly"]
    tail = as_json(dsn, "oplog", "tail", "--stream", streams[3])
    assert {op["op"] for op in tail} == {"Enqueue", "ConfigureKind", "UpsertSchedule"}
    # the settings' and the schedule's ops too were written on the stream's node (0019)
    assert {op["seq"] % 1024 for op in tail} == {stream_group(cdb, streams[3])}
    assert as_json(dsn, "workers") == []
    assert as_json(dsn, "maintain", "--once")["leader"] is True
    assert "already balanced" in ok(dsn, "streams", "rebalance").stdout
