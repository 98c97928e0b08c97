"""Every row shape of pgqueue/shapes.py holds on both sides: each named query that returns
a shape returns exactly its columns on the current schema (described by the server, nothing
run), and each model reads exactly its shape's columns, by name. A column added to the SQL
but not to its model, or to the model but not the SQL, fails here."""
from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue import shapes
from pgqueue.cron import Schedule
from pgqueue.db import statements
from pgqueue.models import Checkpoint, JobInfo, KindConfig, Lease, Op, StreamStats, WorkerInfo

pytestmark = pytest.mark.layouts("single", "citus")

_PARAM = re.compile(r"%\((\w+)\)[sb]")


def described(conn: psycopg.Connection[Any], name: str) -> list[str]:
    """The column names of a named query's result, as the server describes the statement
    (prepared, never executed: a query that writes writes nothing here)."""
    numbers: dict[str, int] = {}

    def number(found: re.Match[str]) -> str:
        return f"${numbers.setdefault(found.group(1), len(numbers) + 1)}"

    text = _PARAM.sub(number, statements.get(name).sql).replace("%%", "%")
    pgconn = conn.pgconn
    pgconn.prepare(b"pgqueue_shape", text.encode())
    try:
        result = pgconn.describe_prepared(b"pgqueue_shape")
        assert result.status == psycopg.pq.ExecStatus.COMMAND_OK, result.error_message
        return [(result.fname(i) or b"").decode() for i in range(result.nfields)]
    finally:
        conn.execute("DEALLOCATE pgqueue_shape")


def test_each_query_returns_exactly_its_shape(dsn: str, q: pgqueue.Queue) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = {name: described(conn, name) for name in shapes.RETURNS}
    wrong = {name: {"missing": sorted(set(shape) - set(found[name])),
                    "extra": sorted(set(found[name]) - set(shape))}
             for name, shape in shapes.RETURNS.items()
             if sorted(found[name]) != sorted(shape)}
    assert wrong == {}


def test_a_column_the_shape_lacks_is_seen(dsn: str, q: pgqueue.Queue) -> None:
    """The description sees what a query returns (the check above is not vacuous)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        columns = described(conn, "job_by_id")
    assert "id" in columns and set(columns) == set(shapes.JOB)
    assert len(shapes.RETURNS["jobs_page_of_kind"]) == len(shapes.JOB_PREVIEW) + 2


class Reads(Mapping[str, Any]):
    """A row that records which of its columns were read."""

    def __init__(self, values: dict[str, Any]) -> None:
        self._values = values
        self.read: set[str] = set()

    def __getitem__(self, key: str) -> Any:
        self.read.add(key)
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


#: Values a model can convert (bytes for payloads, numbers for durations); None elsewhere.
_SAMPLE: dict[str, Any] = {"payload": b"{}", "rate_count": 2, "rate_ms": 1000,
                           "misfire_grace_ms": 60_000, "crashes_by_step": {"a": 1},
                           "checkpoint_updated_at": dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)}


def _row(shape: tuple[str, ...]) -> Reads:
    return Reads({column: _SAMPLE.get(column) for column in shape})


@pytest.mark.parametrize(("shape", "read"), [
    (shapes.JOB, JobInfo.from_row),
    (shapes.CHECKPOINT, Checkpoint.from_row),
    (shapes.KIND_CONFIG, KindConfig.from_row),
    (shapes.SCHEDULE, Schedule.from_row),
    (shapes.WORKER, WorkerInfo.from_row),
], ids=["job", "checkpoint", "kind_config", "schedule", "worker"])
def test_each_model_reads_exactly_its_shape(shape: tuple[str, ...],
                                            read: Callable[[Any], object]) -> None:
    row = _row(shape)
    read(row)
    assert row.read == set(shape)


def test_the_models_built_by_field_name_have_their_shapes_fields() -> None:
    """Op(**row) and StreamStats(**row) take their shape's columns as their fields."""
    assert tuple(f.name for f in dataclasses.fields(Op)) == shapes.OP
    assert tuple(f.name for f in dataclasses.fields(StreamStats)) == shapes.STREAM_STATS


def test_a_lease_takes_each_value_by_its_columns_name() -> None:
    """Lease.from_lease_row takes the values in shapes.LEASE's order (run.fetch_shaped picks
    them by name): each value lands in the field its column names."""
    at = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    values = {"id": 11, "lease_id": 22, "stream": "s", "kind": "k", "payload": b"p",
              "priority": 3, "attempts": 4, "max_attempts": 5, "enqueued_at": at,
              "lease_expires_at": at + dt.timedelta(seconds=1), "lease_started": False,
              "last_completed_step": "a", "cursor_step": "b", "cursor": b"c",
              "checkpoint_updated_at": at, "schema_version": 6, "step_set_hash": "h",
              "crashes_by_step": {"b": 1}, "not_before": at - dt.timedelta(seconds=1),
              "trace_context": {"traceparent": "x"}, "rate_at_start": True, "timeout_ms": 7000}
    assert set(values) == set(shapes.LEASE)
    lease = Lease.from_lease_row(tuple(values[c] for c in shapes.LEASE), 30.0)
    assert (lease.job_id, lease.lease_id, lease.stream, lease.kind, lease.payload) == \
        (11, 22, "s", "k", b"p")
    assert (lease.priority, lease.attempts, lease.max_attempts, lease.started) == (3, 4, 5, False)
    assert (lease.enqueued_at, lease.expires_at, lease.due_at) == \
        (at, values["lease_expires_at"], values["not_before"])
    assert lease.checkpoint == Checkpoint("a", "b", b"c", round(at.timestamp() * 1000), 6, "h",
                                          {"b": 1})
    assert (lease.trace_context, lease.rate_at_start, lease.timeout) == \
        ({"traceparent": "x"}, True, 7.0)
