"""OpenTelemetry traces with the SDK's in-memory exporter: a producer span per enqueue call, a
consumer span per job run whose parent is the producer's context carried by the job (through
the worker, AsyncQueue's shared commits and a replay), and a failed run marked as an error.

The tracer provider is process-wide and can be set once: the module fixture sets it, and shuts
the exporter down afterwards (later tests run with spans made and dropped)."""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import pgqueue
from pgqueue.telemetry import tracing
from tests.dbhelp import wait_for
from tests.integration.runtime.test_worker import gone, running
from tests.pgbed import Bed

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def exporter() -> Iterator[InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    trace.set_tracer_provider(provider)
    assert tracing.active()
    yield memory
    memory.shutdown()


@pytest.fixture
def spans(exporter: InMemorySpanExporter) -> InMemorySpanExporter:
    exporter.clear()
    return exporter


def named(spans: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in spans.get_finished_spans() if s.name == name]


def test_a_jobs_run_joins_the_trace_of_the_request_that_enqueued_it(
        spans: InMemorySpanExporter, dsn: str, q: pgqueue.Queue) -> None:
    q.configure_stream(retry_base=0.01)
    app = pgqueue.App()

    @app.job("ok")
    def ok(job: pgqueue.JobContext) -> None:
        pass

    @app.job("bad", max_attempts=1)
    def bad(job: pgqueue.JobContext) -> None:
        raise ValueError("no good")

    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("POST /orders") as request:
        good = q.enqueue(b"{}", kind="ok")
    with tracer.start_as_current_span("POST /other"):
        failing = q.enqueue(b"{}", kind="bad")
    info = q.job(good)
    assert info is not None
    with running(app, dsn):
        wait_for(lambda: gone(q, good) and q.job(failing) is not None
                 and q.job(failing).state == "dead", 10,  # type: ignore[union-attr]
                 "both jobs to finish")
    (producer, other_producer) = named(spans, "default publish")
    assert producer.kind == SpanKind.PRODUCER
    assert producer.parent is not None and producer.parent.span_id == request.get_span_context().span_id
    assert producer.attributes is not None
    assert producer.attributes["messaging.destination.name"] == "default"
    runs = {s.attributes["messaging.message.id"]: s for s in named(spans, "default process")
            if s.attributes is not None}
    consumer = runs[str(good)]
    assert consumer.kind == SpanKind.CONSUMER
    assert consumer.context.trace_id == request.get_span_context().trace_id  # one trace
    assert consumer.parent is not None and consumer.parent.span_id == producer.context.span_id
    assert consumer.status.status_code == StatusCode.UNSET
    failed = runs[str(failing)]
    assert failed.context.trace_id == other_producer.context.trace_id
    assert failed.status.status_code == StatusCode.ERROR
    assert any(e.name == "exception" for e in failed.events)


def test_a_batch_is_one_producer_span_and_every_job_carries_it(
        spans: InMemorySpanExporter, q: pgqueue.Queue) -> None:
    ids = q.enqueue_many([pgqueue.NewJob(b"x") for _ in range(3)])
    (producer,) = named(spans, "default publish")
    assert producer.attributes is not None
    assert producer.attributes["messaging.batch.message_count"] == 3
    leases = q.lease(limit=3)
    assert sorted(lease.job_id for lease in leases) == ids
    for lease in leases:
        assert lease.trace_context is not None
        assert f"{producer.context.trace_id:032x}" in lease.trace_context["traceparent"]


def test_a_context_too_large_to_store_keeps_only_the_trace() -> None:
    """A job stores at most 16 KiB of context (pgqueue.job_fields_fit). The W3C propagators
    stay under it (baggage is capped at 8 KiB), a custom one may not: then only the trace
    headers are kept."""
    trace_headers = {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01",
                     "tracestate": "vendor=x"}
    assert tracing.fitted({**trace_headers, "baggage": "a=b"}) == {**trace_headers,
                                                                   "baggage": "a=b"}
    assert tracing.fitted({**trace_headers, "x-custom": "c" * 20000}) == trace_headers
    assert tracing.fitted({"x-custom": "c" * 20000}) is None
    assert tracing.fitted({}) is None


def test_shared_commits_keep_each_callers_trace(spans: InMemorySpanExporter, dsn: str) -> None:
    """AsyncQueue's concurrent calls share a transaction; each job still carries the trace
    of the task that enqueued it."""
    tracer = trace.get_tracer("test")

    async def main() -> dict[int, int]:
        async with pgqueue.AsyncQueue(dsn, pool_size=1) as q:
            async def call(i: int) -> tuple[int, int]:
                with tracer.start_as_current_span(f"task {i}") as span:
                    return await q.enqueue({"i": i}), span.get_span_context().trace_id
            return dict(await asyncio.gather(*(call(i) for i in range(20))))

    traces = asyncio.run(main())
    with pgqueue.Queue(dsn) as q:
        leases = q.lease(limit=20)
    assert len(leases) == 20
    for lease in leases:
        assert lease.trace_context is not None
        assert f"{traces[lease.job_id]:032x}" in lease.trace_context["traceparent"]


def test_the_trace_context_survives_a_replay(spans: InMemorySpanExporter, dsn: str,
                                             bed: Bed) -> None:
    target = bed.new_database()
    try:
        with pgqueue.Queue(dsn) as q:
            job_id = q.enqueue(b"x")
            (lease,) = q.lease()
        pgqueue.replay(dsn, target)
        with pgqueue.Queue(target) as replica:
            assert replica.job(job_id) is not None
        with pgqueue.Queue(dsn) as q:
            q.return_lease(lease)
        pgqueue.replay(dsn, target)
        with pgqueue.Queue(target) as replica:
            (again,) = replica.lease()
        assert again.trace_context == lease.trace_context is not None
    finally:
        bed.drop(target)


def test_nothing_is_traced_without_a_tracer_provider() -> None:
    done = subprocess.run([sys.executable, "-c", "from pgqueue.telemetry import tracing; "
                           "print(tracing.active())"], cwd=REPO, capture_output=True, text=True,
                          env=os.environ, timeout=60, check=True)
    assert done.stdout.strip() == "False"
