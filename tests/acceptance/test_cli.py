"""The `pgqueue` command line end to end: each command's happy path, its error exits, and the
JSON scripts read, against a fresh database per test (CliRunner) and, for `--help` and the
embedded default, a real subprocess.

Behaviour is checked through the library (or through another command's --json), so a command
that printed the right words but did the wrong thing fails.
"""
from __future__ import annotations

import base64
import datetime as dt
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from click.testing import Result

import pgqueue
from pgqueue.db import connection, queries, schema
from pgqueue.db import dsn as dsn_module
from pgqueue.db.embedded import EmbeddedServer
from pgqueue.replicas import replica
from tests.acceptance.clihelp import as_json, ok, run
from tests.pgbed import Bed

UNREACHABLE = "host=127.0.0.1 port=1 dbname=x password=secret"
REPO = Path(__file__).resolve().parents[2]





def assert_one_line_error(result: Result, code: int, *needles: str) -> None:
    """Exit `code`, nothing on stdout, and one `pgqueue: error:` line naming each needle."""
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pgqueue: error: "), result.stderr
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def enqueue(dsn: str, stream: str, payload: str, *opts: str) -> int:
    """`pgqueue enqueue`; its stdout must be just the id."""
    out = ok(dsn, "enqueue", stream, payload, *opts).stdout
    assert out.strip().isdigit(), out
    return int(out)


def dead_job(dsn: str, stream: str = "default", *opts: str) -> int:
    """A job of `stream` that is in the dead letters (max_attempts=1, failed once); its
    priority 255 makes it the one leased among the stream's other jobs."""
    job_id = enqueue(dsn, stream, "doomed", "--max-attempts", "1", "--priority", "255", *opts)
    with pgqueue.Queue(dsn, stream=stream) as q:
        (lease,) = q.lease()
        assert lease.job_id == job_id
        assert q.nack(lease, error="boom") is True
    return job_id


# -- enqueue ----------------------------------------------------------------------------------


def test_enqueue_prints_the_id_and_show_returns_every_field(dsn: str) -> None:
    job_id = enqueue(dsn, "mail", "hello wörld", "--kind", "send", "--priority", "7",
                     "--max-attempts", "3", "--dedup-key", "k-1")
    shown = as_json(dsn, "jobs", "show", str(job_id))
    assert shown["job_id"] == job_id
    assert (shown["payload"], shown["payload_encoding"]) == ("hello wörld", "utf-8")
    assert (shown["stream"], shown["kind"], shown["state"]) == ("mail", "send", "pending")
    assert (shown["priority"], shown["attempts"], shown["max_attempts"]) == (7, 0, 3)
    assert (shown["dedup_key"], shown["dedup_key_encoding"]) == ("k-1", "utf-8")
    with pgqueue.Queue(dsn) as q:
        info = q.job(job_id)
    assert info is not None and info.payload == "hello wörld".encode()


def test_enqueue_with_a_held_dedup_key_prints_the_holder_and_adds_nothing(dsn: str) -> None:
    first = enqueue(dsn, "mail", "a", "--dedup-key", "same")
    assert enqueue(dsn, "mail", "b", "--dedup-key", "same") == first
    assert [j["job_id"] for j in as_json(dsn, "jobs", "list")] == [first]


def test_enqueue_dash_reads_raw_bytes_from_stdin(dsn: str) -> None:
    raw = b"\xff\x00binary\x80"
    job_id = int(ok(dsn, "enqueue", "blobs", "-", input=raw).stdout)
    shown = as_json(dsn, "jobs", "show", str(job_id))
    assert shown["payload_encoding"] == "base64"
    assert base64.b64decode(shown["payload"]) == raw
    with pgqueue.Queue(dsn) as q:
        info = q.job(job_id)
    assert info is not None and info.payload == raw


def test_enqueue_json_payload_is_parsed_and_bad_json_is_refused(dsn: str) -> None:
    job_id = enqueue(dsn, "s", '{"to": "a@example.com", "n": 1}', "--json-payload")
    assert json.loads(as_json(dsn, "jobs", "show", str(job_id))["payload"]) == {
        "to": "a@example.com", "n": 1}
    assert_one_line_error(run(dsn, "enqueue", "s", "{not json", "--json-payload"), 2, "JSON")
    assert len(as_json(dsn, "jobs", "list")) == 1


def test_enqueue_takes_a_jobs_own_time_limit(dsn: str) -> None:
    job_id = enqueue(dsn, "s", "x", "--timeout", "2.5")
    assert as_json(dsn, "jobs", "show", str(job_id))["timeout"] == 2.5
    assert "2.5" in ok(dsn, "jobs", "show", str(job_id)).stdout


def test_enqueue_delay_holds_the_job_back(dsn: str) -> None:
    job_id = enqueue(dsn, "later", "x", "--delay", "3600")
    with pgqueue.Queue(dsn, stream="later") as q:
        assert q.lease() == []
        info = q.job(job_id)
    assert info is not None and info.not_before is not None
    assert info.not_before.timestamp() > time.time() + 3000


@pytest.mark.parametrize(("opts", "needle"), [
    (["--priority", "300"], "priority"),
    (["--priority", "-1"], "priority"),
    (["--delay", "-5"], "delay"),
    (["--max-attempts", "-1"], "max_attempts"),
    (["--dedup-key", "k" * 2000], "dedup_key"),
    (["--timeout", "0"], "timeout must be > 0 seconds"),
])
def test_bad_enqueue_arguments_exit_2_naming_the_argument_and_add_nothing(
        dsn: str, opts: list[str], needle: str) -> None:
    assert_one_line_error(run(dsn, "enqueue", "s", "payload", *opts), 2, needle)
    assert as_json(dsn, "jobs", "list") == []
    assert as_json(dsn, "oplog", "tail") == []


def test_bad_stream_name_and_non_number_priority_are_usage_errors(dsn: str) -> None:
    assert_one_line_error(run(dsn, "enqueue", "", "x"), 2, "stream")
    assert_one_line_error(run(dsn, "enqueue", "s" * 201, "x"), 2, "stream")
    result = run(dsn, "enqueue", "s", "x", "--priority", "high")
    assert result.exit_code == 2 and "--priority" in result.stderr
    assert as_json(dsn, "jobs", "list") == []


# -- jobs -------------------------------------------------------------------------------------


def test_jobs_list_filters_by_stream_state_and_limit(dsn: str) -> None:
    a1 = enqueue(dsn, "a", "a1")
    a2 = enqueue(dsn, "a", "a2")
    b1 = enqueue(dsn, "b", "b1")
    with pgqueue.Queue(dsn, stream="a") as q:
        (lease,) = q.lease()
    assert lease.job_id == a1

    assert [j["job_id"] for j in as_json(dsn, "jobs", "list")] == [b1, a2, a1]
    assert [j["job_id"] for j in as_json(dsn, "jobs", "list", "--stream", "a")] == [a2, a1]
    leased = as_json(dsn, "jobs", "list", "--state", "leased")
    assert [(j["job_id"], j["lease_id"]) for j in leased] == [(a1, lease.lease_id)]
    assert [j["job_id"] for j in as_json(dsn, "jobs", "list", "--limit", "1")] == [b1]

    people = ok(dsn, "jobs", "list").stdout
    for job_id in (a1, a2, b1):
        assert str(job_id) in people
    assert "leased" in people and "pending" in people


def test_jobs_list_filters_by_kind_and_shows_when_a_scheduled_job_runs(dsn: str) -> None:
    with pgqueue.Queue(dsn) as q:
        mail = q.enqueue("m", kind="mail")
        later = q.enqueue("r", kind="report", delay=3600)
        q.enqueue("n", kind=None)
        due = q.job(later)
    assert due is not None and due.state == "scheduled" and due.not_before is not None
    assert [j["job_id"] for j in as_json(dsn, "jobs", "list", "--kind", "mail")] == [mail]
    full = as_json(dsn, "jobs", "list", "--kind", "report", "--full")
    assert [j["job_id"] for j in full] == [later]
    assert as_json(dsn, "jobs", "list", "--kind", "nothing") == []
    people = run(dsn, "jobs", "list", "--kind", "report", env={"COLUMNS": "160"}).stdout
    assert "runs at (UTC)" in people
    assert due.not_before.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S") in people
    assert "runs at" not in ok(dsn, "jobs", "list", "--kind", "mail").stdout
    bad = run(dsn, "jobs", "list", "--kind", "x" * 201)
    assert bad.exit_code == 2 and "kind" in bad.stderr


def test_jobs_list_refuses_an_unknown_state_or_an_empty_stream(dsn: str) -> None:
    result = run(dsn, "jobs", "list", "--state", "sleeping")
    assert result.exit_code == 2 and "sleeping" in result.stderr
    enqueue(dsn, "default", "x")
    assert_one_line_error(run(dsn, "jobs", "list", "--stream", ""), 2, "stream")
    assert_one_line_error(run(dsn, "dead", "list", "--stream", ""), 2, "stream")


def test_jobs_show_and_inspect_tell_an_acked_jobs_history_and_a_pruned_one_plainly(
        dsn: str) -> None:
    assert_one_line_error(run(dsn, "jobs", "show", "424242"), 1, "424242", "not found")
    job_id = enqueue(dsn, "default", "x")
    with pgqueue.Queue(dsn) as q:
        held = q.lease()[0]
        q.ack(held)
        assert q.job(job_id) is None
    shown = as_json(dsn, "jobs", "show", str(job_id))
    history = shown["history"]
    assert (history["job_id"], history["state"], history["lease_id"]) == (
        job_id, "acked", held.lease_id)
    assert [o["op"] for o in history["ops"]] == ["Enqueue", "Lease", "Ack"]
    assert history["finished_at"] == history["ops"][-1]["at"]
    assert history["ops_pruned"] is False
    text = ok(dsn, "jobs", "show", str(job_id)).stdout
    assert f"job {job_id} is gone: acked" in text and f"under lease {held.lease_id}" in text
    assert "Enqueue" in text and "Ack" in text
    inspected = as_json(dsn, "jobs", "inspect", str(job_id))
    assert inspected["history"]["state"] == "acked"
    assert "is gone: acked" in ok(dsn, "jobs", "inspect", str(job_id)).stdout

    live = enqueue(dsn, "default", "y")
    with connection.connect(dsn) as conn:  # every op so far pruned, as a week later
        conn.execute("UPDATE pgqueue.op_log SET at = at - interval '8 days'")
        replica.prune_batches(conn, keep=7 * 86400.0, stale_after=86400.0, batch=1000, wait=0)
    text = ok(dsn, "jobs", "show", str(live)).stdout
    assert f"no ops of job {live} are kept: the op log was pruned past them" in text
    assert as_json(dsn, "jobs", "show", str(live))["history"]["ops_pruned"] is True
    assert "pruned" in ok(dsn, "jobs", "inspect", str(live)).stdout
    # the acked job, with every op pruned: nothing is left of it
    assert_one_line_error(run(dsn, "jobs", "show", str(job_id)), 1, str(job_id), "not found")
    assert_one_line_error(run(dsn, "jobs", "inspect", str(job_id)), 1, str(job_id), "not found")


def test_jobs_show_for_people_names_the_fields(dsn: str) -> None:
    job_id = enqueue(dsn, "s", "some payload", "--kind", "k")
    out = ok(dsn, "jobs", "show", str(job_id)).stdout
    assert "some payload" in out and "pending" in out and str(job_id) in out


# -- dead letters -----------------------------------------------------------------------------


def test_dead_list_shows_dead_letters_of_every_stream_or_one(dsn: str) -> None:
    d1 = dead_job(dsn, "s1")
    d2 = dead_job(dsn, "s2")
    enqueue(dsn, "s1", "alive")
    every = as_json(dsn, "dead", "list")
    assert [(j["job_id"], j["state"], j["last_error"]) for j in every] == [
        (d2, "dead", "boom"), (d1, "dead", "boom")]
    assert [j["job_id"] for j in as_json(dsn, "dead", "list", "--stream", "s1")] == [d1]
    assert as_json(dsn, "dead", "list", "--stream", "nobody") == []
    assert str(d1) in ok(dsn, "dead", "list").stdout


def test_dead_requeue_returns_the_job_to_pending_once(dsn: str) -> None:
    job_id = dead_job(dsn)
    out = ok(dsn, "dead", "requeue", str(job_id)).stdout
    assert str(job_id) in out
    shown = as_json(dsn, "jobs", "show", str(job_id))
    assert (shown["state"], shown["attempts"]) == ("pending", 0)
    assert as_json(dsn, "dead", "list") == []
    # no longer a dead letter: refused, exit 1, and nothing changes
    assert_one_line_error(run(dsn, "dead", "requeue", str(job_id)), 1, str(job_id))
    assert as_json(dsn, "jobs", "show", str(job_id))["state"] == "pending"


def test_dead_requeue_of_a_pending_or_unknown_job_exits_1(dsn: str) -> None:
    live = enqueue(dsn, "default", "x")
    assert_one_line_error(run(dsn, "dead", "requeue", str(live)), 1, str(live))
    assert_one_line_error(run(dsn, "dead", "requeue", "999999"), 1, "999999")


def test_dead_requeue_refuses_when_a_live_job_holds_the_dedup_key(dsn: str) -> None:
    dead = dead_job(dsn, "default", "--dedup-key", "nightly")
    holder = enqueue(dsn, "default", "again", "--dedup-key", "nightly")
    assert holder != dead
    assert_one_line_error(run(dsn, "dead", "requeue", str(dead)), 1, str(holder))
    assert as_json(dsn, "jobs", "show", str(dead))["state"] == "dead"


# -- stats ------------------------------------------------------------------------------------


def test_stats_counts_jobs_by_stream_and_state(dsn: str) -> None:
    assert as_json(dsn, "stats") == []
    assert "no jobs" in ok(dsn, "stats").stdout
    enqueue(dsn, "a", "1")
    enqueue(dsn, "a", "2")
    enqueue(dsn, "b", "3")
    dead_job(dsn, "b")
    rows = {(r["stream"], r["state"]): r for r in as_json(dsn, "stats")}
    assert {k: r["count"] for k, r in rows.items()} == {
        ("a", "pending"): 2, ("b", "pending"): 1, ("b", "dead"): 1}
    age = rows[("a", "pending")]["oldest_pending_age_seconds"]
    assert isinstance(age, float) and 0 <= age < 60
    assert rows[("b", "dead")]["oldest_pending_age_seconds"] is None
    people = ok(dsn, "stats").stdout
    assert "pending" in people and "dead" in people


# -- op log -----------------------------------------------------------------------------------


def test_oplog_tail_shows_a_jobs_history_oldest_first(dsn: str) -> None:
    job_id = enqueue(dsn, "s", "x")
    other = enqueue(dsn, "t", "y")
    with pgqueue.Queue(dsn, stream="s") as q:
        lease = q.lease()[0]
        q.ack(lease)
    history = as_json(dsn, "oplog", "tail", "--job", str(job_id))
    assert [(o["op"], o["job_id"]) for o in history] == [
        ("Enqueue", job_id), ("Lease", job_id), ("Ack", job_id)]
    assert [o["seq"] for o in history] == sorted(o["seq"] for o in history)
    assert history[-1]["lease_id"] == lease.lease_id
    assert {o["job_id"] for o in as_json(dsn, "oplog", "tail", "--stream", "t")} == {other}
    (last,) = as_json(dsn, "oplog", "tail", "--limit", "1")
    assert (last["op"], last["job_id"]) == ("Ack", job_id)
    assert "Enqueue" in ok(dsn, "oplog", "tail").stdout


def test_oplog_counts(dsn: str) -> None:
    enqueue(dsn, "s", "x")
    enqueue(dsn, "s", "y")
    assert as_json(dsn, "oplog", "counts") == {"Enqueue": 2}


def _source_with_history(dsn: str) -> None:
    for i in range(5):
        enqueue(dsn, "s", f"job {i}", "--priority", str(i))
    dead_job(dsn, "s")
    with pgqueue.Queue(dsn, stream="s") as q:
        q.ack(q.lease()[0])


def test_oplog_replay_reproduces_the_source_and_is_idempotent(dsn: str, bed: Bed) -> None:
    _source_with_history(dsn)
    target = bed.new_database()
    try:
        total = sum(as_json(dsn, "oplog", "counts").values())
        result = as_json(dsn, "oplog", "replay", "--source", dsn, "--target", target)
        assert (result["read"], result["applied"]) == (total, total)
        assert as_json(target, "jobs", "list") == as_json(dsn, "jobs", "list")
        assert as_json(target, "oplog", "counts") == as_json(dsn, "oplog", "counts")
        again = ok(dsn, "oplog", "replay", "--source", dsn, "--target", target).stdout
        assert f"read {total} ops" in again and "applied 0" in again
    finally:
        bed.drop(target)


def test_a_replayed_target_continues_ids_for_new_jobs(dsn: str, bed: Bed) -> None:
    _source_with_history(dsn)
    target = bed.new_database()
    try:
        ok(dsn, "oplog", "replay", "--source", dsn, "--target", target)
        replayed = max(o["job_id"] for o in as_json(dsn, "oplog", "tail", "--limit", "1000"))
        new = enqueue(target, "s", "new")
        assert new > replayed
        assert as_json(target, "oplog", "tail", "--job", str(new))[0]["op"] == "Enqueue"
    finally:
        bed.drop(target)


def test_oplog_replay_to_an_unmigrated_target_exits_3(dsn: str, empty_dsn: str) -> None:
    enqueue(dsn, "s", "x")
    result = run(None, "oplog", "replay", "--source", dsn, "--target", empty_dsn)
    assert_one_line_error(result, 3, "pgqueue db upgrade")


# -- sql --------------------------------------------------------------------------------------


def test_sql_list_and_show_print_the_librarys_queries_without_connecting() -> None:
    listed = json.loads(ok(UNREACHABLE, "sql", "list", "--json").stdout)
    assert {q["name"] for q in listed} == set(queries.catalog())
    shown = ok(UNREACHABLE, "sql", "show", "job_by_id").stdout
    assert queries.get("job_by_id").sql in shown
    assert json.loads(ok(UNREACHABLE, "sql", "show", "job_by_id", "--json").stdout)["sql"] == \
        queries.get("job_by_id").sql
    assert_one_line_error(run(UNREACHABLE, "sql", "show", "no_such_query"), 1, "no_such_query")
    assert_one_line_error(run(UNREACHABLE, "sql", "list", "--stage", "nope"), 1, "nope")


# -- db ---------------------------------------------------------------------------------------


def test_db_upgrade_current_downgrade_on_an_empty_database(empty_dsn: str) -> None:
    before = as_json(empty_dsn, "db", "current")
    assert (before["current"], before["head"], before["up_to_date"]) == (
        None, schema.head(), False)
    assert_one_line_error(run(empty_dsn, "jobs", "list"), 3, "pgqueue db upgrade")

    ok(empty_dsn, "db", "upgrade")
    assert schema.current(empty_dsn) == schema.head()
    assert as_json(empty_dsn, "db", "current")["up_to_date"] is True
    ok(empty_dsn, "db", "upgrade")  # idempotent
    job_id = enqueue(empty_dsn, "s", "x")
    assert as_json(empty_dsn, "jobs", "show", str(job_id))["payload"] == "x"

    # no --yes and no terminal: the prompt reads end-of-file, nothing is dropped
    refused = run(empty_dsn, "db", "downgrade", "base")
    assert refused.exit_code == 1
    assert schema.current(empty_dsn) == schema.head()
    assert_one_line_error(run(empty_dsn, "db", "downgrade", "nowhere", "--yes"), 2, "nowhere")
    assert run(empty_dsn, "db", "downgrade").exit_code == 2  # REVISION is required

    ok(empty_dsn, "db", "downgrade", "base", "--yes")
    assert schema.current(empty_dsn) is None
    assert as_json(empty_dsn, "db", "current")["current"] is None


def test_db_downgrade_answers_yes_at_the_prompt(empty_dsn: str) -> None:
    ok(empty_dsn, "db", "upgrade")
    ok(empty_dsn, "db", "downgrade", "-1", input="y\n")
    below_head = f"{int(schema.head()) - 1:04d}"
    assert schema.current(empty_dsn) == below_head  # one revision down from head
    ok(empty_dsn, "db", "downgrade", "base", input="y\n")
    assert schema.current(empty_dsn) is None


def test_db_sql_prints_the_install_sql_without_connecting() -> None:
    out = ok(UNREACHABLE, "db", "sql").stdout
    assert out.strip() == queries.install_sql().strip()
    assert "CREATE SCHEMA" in out and "CREATE OR REPLACE FUNCTION pgqueue.lease(" in out
    # every stage's tables come before any function, in the stages' install order
    assert out.index("CREATE TABLE pgqueue.worker") < out.index("CREATE OR REPLACE FUNCTION")
    stage = ok(UNREACHABLE, "db", "sql", "--stage", "lease").stdout
    assert "FUNCTION pgqueue.lease(" in stage and "FUNCTION pgqueue.enqueue(" not in stage
    assert_one_line_error(run(UNREACHABLE, "db", "sql", "--stage", "nope"), 2, "nope")
    down = ok(UNREACHABLE, "db", "sql", "--down").stdout
    assert "DROP TABLE pgqueue.schema_history" in down
    assert down.index("0004_schema_history.down.sql") < down.index("0001_core.down.sql")


def test_db_sql_output_installs_the_schema_through_psql_alone(empty_dsn: str, dsn: str) -> None:
    """What `db sql` prints is a complete install: run as one script it yields the catalog of
    `db upgrade` (alembic's version table aside)."""
    script = ok(UNREACHABLE, "db", "sql").stdout
    with connection.connect(empty_dsn) as conn:
        queries.run_script(conn, script)
    by_script = schema.catalog(empty_dsn)
    assert any(name.startswith("function pgqueue.lease(") for name in by_script)
    assert schema.catalog_diff(schema.catalog(dsn), by_script) == []


# -- connection problems and the DSN ----------------------------------------------------------


def test_commands_that_print_sql_never_start_the_embedded_server(tmp_path: Path) -> None:
    data_dir = tmp_path / "embedded"
    for args in (["db", "sql"], ["db", "sql", "--down"], ["sql", "list"],
                 ["sql", "show", "job_by_id"], ["db", "--help"]):
        result = run(None, *args, env={"PGQUEUE_DATA_DIR": str(data_dir)})
        assert result.exit_code == 0, (args, result.output)
        assert "no DSN given" not in result.stderr
    assert not data_dir.exists()


@pytest.mark.parametrize("args", [
    ["stats"], ["jobs", "list"], ["jobs", "show", "1"], ["enqueue", "s", "x"],
    ["dead", "list"], ["dead", "requeue", "1"], ["oplog", "tail"], ["db", "current"],
    ["db", "upgrade"], ["demo"],
])
def test_unreachable_dsn_names_host_and_port_never_the_password(args: Sequence[str]) -> None:
    result = run(UNREACHABLE, *args)
    assert_one_line_error(result, 3, "127.0.0.1:1")
    assert "secret" not in result.output


def test_unparseable_dsn_is_a_usage_error(dsn: str) -> None:
    result = run("host=127.0.0.1 port=1 password=secret nonsense", "stats")
    assert result.exit_code == 2 and "dsn" in result.stderr
    assert "secret" not in result.output


def test_dsn_from_the_environment(dsn: str) -> None:
    result = run(None, "enqueue", "env", "from env", env={"PGQUEUE_DSN": dsn})
    assert result.exit_code == 0, result.output
    assert "no DSN given" not in result.stderr
    assert as_json(dsn, "jobs", "show", result.stdout.strip())["stream"] == "env"


# -- demo -------------------------------------------------------------------------------------


def test_demo_works_everything_off_and_never_prints_the_password(dsn: str) -> None:
    with_password = f"{dsn} password=secret"  # the test server trusts loopback: ignored
    result = ok(with_password, "demo", "--threads", "3")
    assert "secret" not in result.output
    assert "demo" in result.stdout and "Ack" in result.stdout
    rows = as_json(dsn, "stats")
    assert [(r["stream"], r["state"], r["count"]) for r in rows] == [("demo", "dead", 2)]
    counts = as_json(dsn, "oplog", "counts")
    assert counts["Enqueue"] == counts["Ack"] + 2
    assert counts["Nack"] > 2  # retried once, then acked, plus the two that died


def _embedded_env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PGQUEUE_DSN", "PGQUEUE_DEBUG")}
    env["PGQUEUE_DATA_DIR"] = str(data_dir)
    return env


def test_help_in_a_subprocess_documents_commands_and_exit_codes() -> None:
    proc = subprocess.run([sys.executable, "-m", "pgqueue", "--help"], capture_output=True,
                          text=True, timeout=60, cwd=REPO, env=_embedded_env(REPO / "unused"))
    assert proc.returncode == 0, proc.stderr
    for command in ("db", "enqueue", "jobs", "dead", "stats", "oplog", "sql", "demo"):
        assert f"  {command} " in proc.stdout
    assert "Exit codes" in proc.stdout and "PGQUEUE_DSN" in proc.stdout
    assert not (REPO / "unused").exists()  # --help starts no server


def test_demo_runs_on_the_embedded_default_without_a_dsn(tmp_path: Path) -> None:
    data_dir = tmp_path / "embedded"
    try:
        proc = subprocess.run([sys.executable, "-m", "pgqueue", "demo", "--json"],
                              capture_output=True, text=True, timeout=180, cwd=REPO,
                              env=_embedded_env(data_dir))
        assert proc.returncode == 0, proc.stderr
        assert "no DSN given" in proc.stderr and str(data_dir) in proc.stderr
        if os.geteuid() == 0:  # said before the server starts: the OS user, the data's place
            note = proc.stderr.index("pgqueue: running as root: the embedded Postgres ")
            assert note < proc.stderr.index("no DSN given")
            assert "OS user 'pgqueue'" in proc.stderr and f"data lives in {data_dir}" in proc.stderr
        outcome = json.loads(proc.stdout)
        assert outcome["dead"] == 2
        assert outcome["acked"] + outcome["dead"] == outcome["distinct_jobs"]
        assert outcome["deduplicated"] == outcome["enqueued"] - outcome["distinct_jobs"] > 0
        assert outcome["op_counts"]["Ack"] == outcome["acked"]
        assert outcome["seconds"] < 10
        assert [(r["stream"], r["state"], r["count"]) for r in outcome["stats"]] == [
            ("demo", "dead", 2)]
        assert (data_dir / "data" / "PG_VERSION").exists()
    finally:
        EmbeddedServer(data_dir).stop()


def test_worker_prefetch_takes_auto_or_a_number_and_names_a_bad_value(dsn: str) -> None:
    for bad, why in (("lots", "'lots' is neither auto nor a number of jobs"),
                     ("-1", "-1 is not between 0 and 100000")):
        result = run(dsn, "worker", "--app", "examples.demo_app:app", "--prefetch", bad)
        assert result.exit_code == 2, result.output
        assert "--prefetch" in result.stderr and why in result.stderr
    shown = ok(None, "worker", "--help").stdout
    assert "--prefetch" in shown and "auto" in shown


def test_a_bad_app_says_what_is_wrong_and_exits_2(dsn: str, tmp_path: Path) -> None:
    """A missing attribute is named as such; a module that fails to import shows its own
    error in a short block (where, and what), like every other bad --app value."""
    (tmp_path / "broken_app_mod.py").write_text("import os\n\nraise RuntimeError('no config')\n")
    (tmp_path / "typo_app_mod.py").write_text("x = (\n")
    cases = [("examples.demo_app:nosuch", "module examples.demo_app has no attribute nosuch"),
             ("broken_app_mod:app", "RuntimeError: no config"),
             ("typo_app_mod:app", "SyntaxError"),
             ("no_such_module_xyz:app", "No module named 'no_such_module_xyz'")]
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        for spec, why in cases:
            result = run(dsn, "worker", "--app", spec)
            assert result.exit_code == 2, (spec, result.output)
            assert "--app" in result.stderr and why in result.stderr, (spec, result.stderr)
            assert "Traceback" not in result.stderr
            if spec.startswith("broken"):  # where: the module's own line
                assert 'broken_app_mod.py", line 3' in result.stderr, result.stderr
    finally:
        os.chdir(old)


def test_dsn_masks_the_password_unless_asked_and_psql_gets_it_from_the_environment(
        dsn: str) -> None:
    secret = "hunter2-secret"  # noqa: S105  (trust auth accepts any password)
    with_password = f"{dsn} password={secret}"
    shown = ok(with_password, "dsn").stdout.strip()
    assert "password=***" in shown and "hunter2" not in shown
    assert secret in ok(with_password, "dsn", "--show-password").stdout
    assert as_json(with_password, "dsn") == {"dsn": shown, "source": "--dsn or $PGQUEUE_DSN"}
    conninfo, password = dsn_module.without_password(with_password)
    assert password == secret and "hunter2" not in conninfo
    job_id = enqueue(dsn, "default", "x")
    done = subprocess.run([sys.executable, "-m", "pgqueue", "--dsn", dsn, "psql", "-At", "-c",
                           "SELECT count(*) FROM pgqueue.job"], cwd=REPO, capture_output=True,
                          text=True, timeout=60, check=False,
                          env={k: v for k, v in os.environ.items() if k != "PGQUEUE_DSN"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1" and job_id > 0


def test_a_table_printed_into_a_pipe_is_never_cut(dsn: str) -> None:
    """Into a pipe (not a terminal) a listing is laid out at its natural width: a kind of 120
    characters is printed whole, on its row, whatever $COLUMNS says."""
    kind = "k" * 110 + "-the-end"
    with pgqueue.Queue(dsn) as q:
        q.enqueue(b"x", kind=kind)
    out = run(dsn, "jobs", "list", env={"COLUMNS": "80"}).stdout
    assert kind in out and "…" not in out, out


def test_a_dsn_that_cannot_be_parsed_is_refused_without_its_password() -> None:
    result = run("postgresql://u:sekret@[bad/q", "stats")
    assert result.exit_code == 2 and "cannot parse the connection string" in result.stderr
    assert "sekret" not in result.stderr + result.stdout and "u:***@" in result.stderr


def test_a_limit_or_an_id_out_of_range_is_refused_as_such(dsn: str) -> None:
    """A time limit past what a job may have names that limit (24.8 days, not the 100 years
    of other durations); a job id past bigint is out of range for the CLI, not "not found"
    (Queue.job of any int says None for one that is not there, as it always did)."""
    too_long = run(dsn, "enqueue", "default", "x", "--timeout", "99999999999")
    assert too_long.exit_code == 2 and "24.8 days" in too_long.stderr, too_long.stderr
    assert "100 years" not in too_long.stderr
    huge = run(dsn, "jobs", "show", "99999999999999999999")
    assert huge.exit_code == 2 and "not in the range" in huge.stderr, huge.stderr


def test_requeue_of_a_dead_job_says_what_it_did_and_a_list_says_why_a_job_is_parked(
        dsn: str) -> None:
    from tests.integration.dashboard.dashboard_help import dead_job, undecodable_job

    with pgqueue.Queue(dsn) as q:
        dead = dead_job(q)
        parked = undecodable_job(q, dsn, step_job=False)
        reason = q.job(parked).state_reason  # type: ignore[union-attr]
    said = ok(dsn, "jobs", "requeue", str(dead)).stdout
    assert said.startswith(f"requeued job {dead}: pending in stream 'default', its attempts "
                           f"reset to 0 of 1 (it was dead after 1 attempt(s): it failed)"), said
    again = run(dsn, "jobs", "requeue", str(dead))
    assert again.exit_code == 1 and "dead" in again.stderr
    listed = ok(dsn, "jobs", "list").stdout
    assert reason and f"undecodable ({reason})" in listed, listed
