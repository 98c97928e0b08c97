"""Optional OpenTelemetry traces (`pip install pgqueue-py[otel]`): a producer span per enqueue
call and a consumer span per job run, joined through the trace context the job carries.

An enqueue call opens a PRODUCER span ("<stream> publish") and stores the W3C trace context
(traceparent, tracestate) with each of its jobs (`pgqueue.job.trace_context`, also in the
Enqueue op, so replicas and replays keep it). The worker runs each job inside a CONSUMER span
("<stream> process") whose parent is that context: the job's span joins the trace of the
request that enqueued it. A handler that raised marks its span as an error.

Nothing happens unless the application has set a tracer provider (the SDK's, or a vendor's):
without one every call here returns at once, so the hot paths pay a check, not a span. pgqueue
never imports OpenTelemetry itself: an application that set a provider has imported it, so
until `opentelemetry.trace` is loaded nothing is traced and nothing is imported. A dead letter
requeued runs without its producer's context (the dead-letter table keeps none).
"""
from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pgqueue.models import Lease

#: The instrumentation scope pgqueue's spans are created under.
SCOPE = "pgqueue"


def active() -> bool:
    """Whether spans are recorded: the application has loaded the API and set a real tracer
    provider (not the API's stand-ins, which record nothing)."""
    if "opentelemetry.trace" not in sys.modules:
        return False
    from opentelemetry import trace

    return not isinstance(trace.get_tracer_provider(),
                          trace.ProxyTracerProvider | trace.NoOpTracerProvider)


@contextmanager
def producing(stream: str, count: int) -> Iterator[dict[str, str] | None]:
    """A producer span around one enqueue call of `count` jobs; yields the trace context to
    store with each (None: not tracing)."""
    if not active():
        yield None
        return
    from opentelemetry import propagate, trace
    from opentelemetry.trace import SpanKind

    tracer = trace.get_tracer(SCOPE)
    with tracer.start_as_current_span(
            f"{stream} publish", kind=SpanKind.PRODUCER,
            attributes={"messaging.system": "pgqueue", "messaging.operation.type": "send",
                        "messaging.destination.name": stream,
                        "messaging.batch.message_count": count}):
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        yield fitted(carrier)


#: The most a job's stored trace context may weigh (as JSON; pgqueue.job_fields_fit).
MAX_TRACE_BYTES = 16384
#: What a context keeps when the whole does not fit (a large baggage): the trace itself.
TRACE_HEADERS = ("traceparent", "tracestate")


def fitted(carrier: dict[str, str]) -> dict[str, str] | None:
    """The context to store with a job: the whole carrier when it fits, else only its trace
    headers (baggage is the application's, and may be large), else nothing."""
    for kept in (carrier, {k: v for k, v in carrier.items() if k in TRACE_HEADERS}):
        if len(json.dumps(kept).encode()) <= MAX_TRACE_BYTES:
            return kept or None
    return None


@contextmanager
def consuming(lease: Lease) -> Iterator[None]:
    """A consumer span around one job's run, child of the producer's context when it has one."""
    if not active():
        yield
        return
    from opentelemetry import propagate, trace
    from opentelemetry.trace import SpanKind

    tracer = trace.get_tracer(SCOPE)
    parent = propagate.extract(lease.trace_context) if lease.trace_context else None
    with tracer.start_as_current_span(
            f"{lease.stream} process", context=parent, kind=SpanKind.CONSUMER,
            attributes={"messaging.system": "pgqueue", "messaging.operation.type": "process",
                        "messaging.destination.name": lease.stream,
                        "messaging.message.id": str(lease.job_id),
                        "pgqueue.kind": lease.kind or "", "pgqueue.attempt": lease.attempts + 1}):
        yield


def failed(exc: BaseException) -> None:
    """Mark the current span (the job's) as failed with `exc`."""
    if not active():
        return
    from opentelemetry import trace
    from opentelemetry.trace import Status, StatusCode

    span = trace.get_current_span()
    span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
