"""`pgqueue replica ...` and `pgqueue oplog prune` end to end, in-process (CliRunner), with the
leader on the bed's server and replicas on extra embedded servers (see
tests/integration/replicas/replicas_fixtures.py). Outcomes are checked through the library and SQL, not
only through what the commands print.
"""
from __future__ import annotations

from typing import Any

import pytest
from psycopg.conninfo import make_conninfo

import pgqueue
from pgqueue.db import connection
from pgqueue.replicas import replica

pytest.register_assert_rewrite("tests.integration.replicas.replicas_fixtures")
pytest_plugins = ["tests.integration.replicas.replicas_fixtures"]

from tests.acceptance.clihelp import as_json, ok, run  # noqa: E402
from tests.dbhelp import wait_for  # noqa: E402
from tests.integration.replicas.replicas_fixtures import Cluster, one, op_count  # noqa: E402

PASSWORD = "cli-Secret-42"  # noqa: S105  (trust auth accepts any password)





def seed(dsn: str) -> list[int]:
    with pgqueue.Queue(dsn) as q:
        ids = q.enqueue_many([pgqueue.NewJob(f"job {i}".encode(), priority=i % 4) for i in range(40)])
        for i, lease in enumerate(q.lease(20)):
            if i % 2:
                q.ack(lease)
            else:
                q.nack(lease, error="nope")
    return ids


def test_attach_follow_status_verify_prune_and_promote(cluster: Cluster) -> None:
    leader = make_conninfo(cluster.leader, password=PASSWORD)
    logical_db, follow_db = cluster.replica_db(0), cluster.replica_db(1)
    ids = seed(leader)

    out = ok(None, "replica", "attach", "--leader", leader, "--replica", logical_db, "--name", "cli_logical")
    assert "cli_logical" in out.stdout and "logical replication" in out.stdout
    assert f"seeded {op_count(cluster.leader)} op(s)" in out.stdout
    assert PASSWORD not in out.stdout + out.stderr
    assert replica.role(logical_db)["role"] == "replica"

    # follow --once catches up and exits; a second pass confirms the position to the leader.
    out = ok(None, "replica", "follow", "--once", "--leader", leader, "--replica", follow_db,
             "--name", "cli_follow")
    assert f"replica cli_follow: applied {op_count(cluster.leader)} op(s)" in out.stdout
    ok(None, "replica", "follow", "--once", "--leader", leader, "--replica", follow_db,
       "--name", "cli_follow")
    assert replica.role(follow_db)["role"] == "replica"

    def lagless(*names: str) -> list[dict[str, Any]] | None:
        found: list[dict[str, Any]] = as_json(None, "replica", "status", "--leader", leader)
        return found if all(r["lag_ops"] == 0 for r in found if r["name"] in names) else None

    status = wait_for(lambda: lagless("cli_logical", "cli_follow"), 30,
                      "both replicas to report lag 0")
    head = one(cluster.leader, "SELECT max(seq) FROM pgqueue.op_log")
    assert {r["name"]: (r["method"], r["applied_seq"], r["lag_ops"], r["lag_seconds"])
            for r in status} == {"cli_logical": ("logical", head, 0, 0),
                                 "cli_follow": ("follow", head, 0, 0)}
    assert all(r["stale"] is False for r in status)
    table = ok(None, "replica", "status", "--leader", leader).stdout
    assert "cli_logical" in table and "cli_follow" in table

    for target in (logical_db, follow_db):
        out = ok(None, "replica", "verify", "--leader", leader, "--replica", target)
        assert f"identical at op seq {head}" in out.stdout
    verdict = as_json(None, "replica", "verify", "--leader", leader, "--replica", logical_db)
    assert verdict == {"identical": True, "op_seq": head, "differences": []}

    # A replica row changed behind pgqueue's back: verify names it and exits 1.
    victim = one(follow_db, "SELECT min(id) FROM pgqueue.job")
    assert victim in ids
    with connection.connect(follow_db) as conn:
        conn.execute("UPDATE pgqueue.job SET priority = 200 WHERE id = %s", [victim])
    out = run(None, "replica", "verify", "--leader", leader, "--replica", follow_db)
    assert out.exit_code == 1, (out.stdout, out.stderr)
    assert f"job id {victim}: differs" in out.stdout
    assert "pgqueue: error: replica differs from the leader" in out.stderr

    # Both replicas confirmed everything: prune may take every op.
    pruned = as_json(None, "--dsn", leader, "oplog", "prune", "--keep", "0")
    assert pruned == {"pruned": head, "stale_replicas": []}
    assert op_count(cluster.leader) == 0

    with pgqueue.Queue(leader) as q:
        q.enqueue(b"after the prune")
    wait_for(lambda: lagless("cli_logical"), 30, "the logical replica to catch up")
    out = ok(None, "replica", "promote", "--replica", logical_db, "--old-leader", leader)
    assert "is the leader now (epoch 2" in out.stdout
    assert out.stderr == ""
    assert replica.role(logical_db)["role"] == "leader"

    # The old leader refuses writes, naming the new one; the new one takes them.
    dbname = connection.conninfo_to_dict(logical_db)["dbname"]
    out = run(None, "--dsn", leader, "enqueue", "default", "refused")
    assert out.exit_code == 1
    assert "replica" in out.stderr and f"dbname={dbname}" in out.stderr
    assert PASSWORD not in out.stderr
    out = ok(None, "--dsn", logical_db, "enqueue", "default", "accepted")
    with pgqueue.Queue(logical_db) as q:
        assert {j.payload for j in q.jobs(state="pending", limit=1000)} >= {b"accepted",
                                                                            b"after the prune"}


def test_prune_reports_a_stale_replica_and_does_not_wait_for_it(cluster: Cluster) -> None:
    leader = cluster.leader
    follow_db = cluster.replica_db(1)
    seed(leader)
    first = op_count(leader)
    for _ in range(2):
        ok(None, "replica", "follow", "--once", "--leader", leader, "--replica", follow_db,
           "--name", "laggard")
    seed(leader)
    second = op_count(leader) - first
    assert as_json(None, "--dsn", leader, "oplog", "prune", "--keep", "0") == {
        "pruned": first, "stale_replicas": []}  # the ops the follower confirmed
    with connection.connect(leader) as conn:
        conn.execute("UPDATE pgqueue.replica SET seen_at = now() - interval '2 days'")
    status = as_json(None, "replica", "status", "--leader", leader)
    assert [(r["name"], r["stale"]) for r in status] == [("laggard", True)]
    out = ok(None, "--dsn", leader, "oplog", "prune", "--keep", "0", "--stale-after", "3600")
    assert out.stdout.strip() == f"pruned {second} op(s)"
    assert "replica laggard has been silent longer than 3600s: not waited on" in out.stderr


def test_attach_to_an_unreachable_leader_fails_with_exit_3_and_no_password(
        cluster: Cluster) -> None:
    target = cluster.replica_db(0)
    out = run(None, "replica", "attach", "--leader", f"host=127.0.0.1 port=1 dbname=x password={PASSWORD}",
              "--replica", target)
    assert out.exit_code == 3
    assert "127.0.0.1:1" in out.stderr and PASSWORD not in out.stderr
    bad = run(None, "replica", "attach", "--leader", cluster.leader, "--replica", target,
              "--name", "Bad-Name")
    assert bad.exit_code == 2
    assert "replica name" in bad.stderr
