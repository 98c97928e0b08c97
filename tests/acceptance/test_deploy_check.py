"""`pgqueue deploy-check` against a real database: the jobs it lists are exactly those a worker
running the new code parks as undecodable, with the same reasons and details.

The old code's jobs are made with the Queue API (leased, renewed with a checkpoint and given
back, as a worker that stopped mid-step leaves them), their step lists recorded as the old
workers would have. The new code is a module written for the test; the CLI imports it by
name, and a worker runs it afterwards.
"""
from __future__ import annotations

import importlib
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import pgqueue
from tests.acceptance.clihelp import as_json, run
from tests.dbhelp import wait_for
from tests.integration.runtime.test_worker import register_step_set, running

NEW_CODE = '''
import pgqueue

app = pgqueue.App()

pipeline = app.step_job("pipeline", schema_version=2)   # a step inserted before transform
for name in ("download", "validate", "transform", "upload"):
    pipeline.step(name)(lambda ctx: None)
pipeline.upcaster(from_version=1)(lambda payload: payload)

report = app.step_job("report")                         # a step appended: compatible
for name in ("a", "b", "c"):
    report.step(name)(lambda ctx: None)

app.job("mail")(lambda job: None)
app.job("convert")(lambda job: None)                    # was a step job
'''


def old_code() -> pgqueue.App:
    app = pgqueue.App()
    pipeline = app.step_job("pipeline")
    for name in ("download", "transform", "upload"):
        pipeline.step(name)(lambda ctx: None)
    report = app.step_job("report")
    for name in ("a", "b"):
        report.step(name)(lambda ctx: None)
    convert = app.step_job("convert")
    convert.step("s1")(lambda ctx: None)
    return app


def stopped_mid_step(q: pgqueue.Queue, job_id: int, handler: pgqueue.StepJob, *,
                     last_completed: str | None, cursor_step: str) -> None:
    """Lease the job, write the old worker's checkpoint and give the lease back."""
    (held,) = [h for h in q.lease(limit=100) if h.job_id == job_id or q.return_lease(h)]
    q.renew(held, checkpoint=pgqueue.Checkpoint(
        last_completed_step=last_completed, cursor_step=cursor_step, cursor=b"7",
        schema_version=handler.schema_version, step_set_hash=handler.step_set_hash))
    q.return_lease(held)


@pytest.fixture
def new_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    (tmp_path / "newcode_deploy.py").write_text(textwrap.dedent(NEW_CODE))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("newcode_deploy", None)
    return importlib.import_module("newcode_deploy")


def test_deploy_check_lists_exactly_the_jobs_the_new_worker_parks(
        dsn: str, q: pgqueue.Queue, new_code: Any) -> None:
    old = old_code()
    for handler in old.handlers.values():
        assert isinstance(handler, pgqueue.StepJob)
        register_step_set(dsn, handler)
    pipeline, report, convert = (old.handlers[k] for k in ("pipeline", "report", "convert"))
    assert isinstance(pipeline, pgqueue.StepJob) and isinstance(report, pgqueue.StepJob)
    assert isinstance(convert, pgqueue.StepJob)
    jobs = {
        "changed step in progress": q.enqueue({}, kind="pipeline", schema_version=1),
        "fresh, upcast": q.enqueue({}, kind="pipeline", schema_version=1),
        "payload too new": q.enqueue({}, kind="pipeline", schema_version=3),
        "no upcaster from 0": q.enqueue({}, kind="pipeline", schema_version=0),
        "appended step": q.enqueue({}, kind="report", schema_version=1),
        "unknown kind": q.enqueue({}, kind="legacy"),
        "now a plain job": q.enqueue({}, kind="convert", schema_version=1),
        "plain": q.enqueue({}, kind="mail"),
    }
    with pgqueue.Queue(dsn, stream="other") as other:
        elsewhere = other.enqueue({}, kind="legacy")
    stopped_mid_step(q, jobs["changed step in progress"], pipeline, last_completed="download",
                     cursor_step="transform")
    stopped_mid_step(q, jobs["appended step"], report, last_completed="a", cursor_step="b")
    stopped_mid_step(q, jobs["now a plain job"], convert, last_completed=None, cursor_step="s1")
    expected = {jobs["changed step in progress"]: "step_set_changed",
                jobs["payload too new"]: "payload_version",
                jobs["no upcaster from 0"]: "payload_version",
                jobs["unknown kind"]: "unknown_kind",
                jobs["now a plain job"]: "step_set_changed"}

    checked = run(dsn, "deploy-check", "--app", "newcode_deploy:app", "--stream", "default",
                  "--json")
    assert checked.exit_code == 1, checked.stderr  # some would be parked
    listed = json.loads(checked.stdout)
    assert {j["job_id"]: j["reason"] for j in listed["jobs"]} == expected
    assert [j["job_id"] for j in listed["jobs"]] == sorted(expected)
    assert all(j["stream"] == "default" for j in listed["jobs"])
    # By default the streams holding jobs of the app's kinds: not "other", whose only job is
    # another app's (its kind is none of this app's), unless asked for by name.
    result = run(dsn, "deploy-check", "--app", "newcode_deploy:app")
    assert result.exit_code == 1 and "5 job(s) the new code would park" in result.stdout
    assert result.stdout.startswith("checked the streams default\n")
    other_stream = json.loads(run(dsn, "deploy-check", "--app", "newcode_deploy:app", "--stream",
                                  "other", "--json").stdout)
    assert other_stream["streams"] == ["other"]
    assert [(j["job_id"], j["reason"]) for j in other_stream["jobs"]] == [(elsewhere, "unknown_kind")]
    everywhere = {p.job_id for p in q.deploy_check(new_code.app)}
    assert everywhere == set(expected) | {elsewhere}

    # The new code's worker parks exactly those, with the same reasons and details.
    with running(new_code.app, dsn, streams=["default"]):
        wait_for(lambda: all(
            (info := q.job(j)) is None or info.state == "undecodable" for j in jobs.values()),
            20, "every job to be acked or parked")
    parked = {j: info for j in jobs.values()
              if (info := q.job(j)) is not None and info.state == "undecodable"}
    assert {j: info.state_reason for j, info in parked.items()} == expected
    for entry in listed["jobs"]:
        assert parked[entry["job_id"]].state_detail == entry["detail"]
    assert q.job(jobs["fresh, upcast"]) is None and q.job(jobs["appended step"]) is None

    # Nothing left for it to park: exit 0.
    for job_id in expected:
        q.cancel(job_id)
    with pgqueue.Queue(dsn, stream="other") as other:
        other.cancel(elsewhere)
    clean = run(dsn, "deploy-check", "--app", "newcode_deploy:app")
    assert clean.exit_code == 0 and "no job would be parked" in clean.stdout
    assert as_json(dsn, "deploy-check", "--app", "newcode_deploy:app") == {"streams": [], "jobs": []}


def test_deploy_check_refuses_what_is_not_an_app(dsn: str, new_code: Any) -> None:
    result = run(dsn, "deploy-check", "--app", "newcode_deploy:pipeline")
    assert result.exit_code == 2 and "not a pgqueue.App" in result.stderr
    with pytest.raises(TypeError, match=r"app must be a pgqueue\.App"):
        with pgqueue.Queue(dsn) as q:
            q.deploy_check("newcode_deploy:app")  # type: ignore[arg-type]
