"""The App sorts handlers into plain and async, and refuses what the worker cannot run,
naming it, at registration."""
from __future__ import annotations

import datetime as dt

import pytest

import pgqueue


def test_async_handlers_and_steps_register_as_async_and_plain_ones_as_plain() -> None:
    app = pgqueue.App()

    async def send(job: pgqueue.JobContext) -> None:
        raise AssertionError("never runs")

    app.job("mail")(send)
    app.job("plain")(lambda job: None)
    assert app.handlers["mail"].is_async and not app.handlers["plain"].is_async
    assert app.has_async and app.has_sync

    pipeline = app.step_job("pipeline")

    async def fetch(ctx: pgqueue.AsyncStepContext) -> None:
        raise AssertionError("never runs")

    pipeline.step("fetch")(fetch)
    assert pipeline.is_async
    only_async = pgqueue.App()
    only_async.job("mail")(send)
    assert only_async.has_async and not only_async.has_sync


def test_a_step_job_mixing_async_and_plain_steps_is_refused_naming_the_step() -> None:
    app = pgqueue.App()
    pipeline = app.step_job("pipeline")

    async def fetch(ctx: pgqueue.AsyncStepContext) -> None:
        raise AssertionError("never runs")

    def store(ctx: pgqueue.StepContext) -> None:
        raise AssertionError("never runs")

    pipeline.step("fetch")(fetch)
    with pytest.raises(TypeError, match=r"step 'store' of 'pipeline' is a plain def, but the "
                                        r"job's other steps are async defs"):
        pipeline.step("store")(store)
    assert [s.name for s in pipeline.steps] == ["fetch"]
    plain = app.step_job("plain")
    plain.step("store")(store)
    with pytest.raises(TypeError, match=r"step 'fetch' of 'plain' is an async def, but the "
                                        r"job's other steps are plain defs"):
        plain.step("fetch")(fetch)


def test_an_async_upcaster_and_generator_handlers_are_refused_at_registration() -> None:
    """An upcaster converts a payload in place (no I/O to await); a generator function called
    as a handler would return without running its body, the job acked undone."""
    app = pgqueue.App()
    pipeline = app.step_job("pipeline", schema_version=2)

    async def up(payload: object) -> object:
        return payload

    with pytest.raises(TypeError, match=r"upcaster from version 1 of 'pipeline' .*up is an "
                                        r"async def: it must be a plain def"):
        pipeline.upcaster(from_version=1)(up)
    assert pipeline.upcasters == {}

    def gen(job: pgqueue.JobContext):  # type: ignore[no-untyped-def]
        yield 1

    async def agen(job: pgqueue.JobContext):  # type: ignore[no-untyped-def]
        yield 1

    for fn in (gen, agen):
        with pytest.raises(TypeError, match=r"handler of 'g' .*is a generator function"):
            app.job("g")(fn)
        assert "g" not in app.handlers


def test_a_non_callable_handler_is_refused() -> None:
    app = pgqueue.App()
    with pytest.raises(TypeError, match="the handler of 'x' must be a function, got str"):
        app.job("x")("not a function")  # type: ignore[type-var]


def test_plain_functions_register() -> None:
    app = pgqueue.App()
    app.job("ok")(lambda job: None)
    assert "ok" in app.handlers


@pytest.mark.parametrize(("value", "error", "message"), [
    (0, ValueError, "timeout must be > 0 seconds, got 0"),
    (-1.5, ValueError, "timeout must be > 0 seconds, got -1.5"),
    (float("nan"), ValueError, "timeout must be a finite number of seconds"),
    ("5", TypeError, "timeout must be a number of seconds or a timedelta, got str"),
    (30 * 86400, ValueError, r"timeout must be at most 2147483.647 seconds \(24.8 days\)"),
])
def test_a_bad_time_limit_is_refused_at_declaration(value: object, error: type[Exception],
                                                     message: str) -> None:
    app = pgqueue.App()
    with pytest.raises(error, match=message):
        app.job("a", timeout=value)  # type: ignore[arg-type]
    with pytest.raises(error, match=message):
        app.step_job("b", timeout=value)  # type: ignore[arg-type]
    job = app.step_job("c")
    with pytest.raises(error, match=message):
        job.step("one", timeout=value)  # type: ignore[arg-type]
    assert "a" not in app.handlers and job.steps == []


def test_time_limits_are_kept_in_seconds_to_the_millisecond() -> None:
    app = pgqueue.App()
    app.job("a", timeout=dt.timedelta(minutes=2))(lambda ctx: None)
    job = app.step_job("b", timeout=1.0001)
    job.step("one", timeout=0.25)(lambda ctx: None)
    assert app.handlers["a"].timeout == 120.0
    assert (app.handlers["b"].timeout, job.steps[0].timeout) == (1.001, 0.25)
