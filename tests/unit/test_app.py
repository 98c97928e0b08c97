"""The App refuses what a handler thread cannot run, naming it, at registration."""
from __future__ import annotations

import pytest

import pgqueue


def test_an_async_handler_step_or_upcaster_is_refused_at_registration() -> None:
    """Before: an async def handler was accepted, called on a thread, never awaited, and its
    job acked as done: the work silently skipped."""
    app = pgqueue.App()

    async def send(job: pgqueue.JobContext) -> None:
        raise AssertionError("never runs")

    with pytest.raises(TypeError, match=r"handler of 'mail' .*send is an async def"):
        app.job("mail")(send)
    assert "mail" not in app.handlers

    pipeline = app.step_job("pipeline", schema_version=2)

    async def fetch(ctx: pgqueue.StepContext) -> None:
        raise AssertionError("never runs")

    with pytest.raises(TypeError, match=r"step 'fetch' of 'pipeline' .*fetch is an async def"):
        pipeline.step("fetch")(fetch)
    assert pipeline.steps == []

    async def up(payload: object) -> object:
        return payload

    with pytest.raises(TypeError, match=r"upcaster from version 1 of 'pipeline'"):
        pipeline.upcaster(from_version=1)(up)


def test_a_non_callable_handler_is_refused() -> None:
    app = pgqueue.App()
    with pytest.raises(TypeError, match="the handler of 'x' must be a function, got str"):
        app.job("x")("not a function")  # type: ignore[type-var]


def test_plain_functions_register() -> None:
    app = pgqueue.App()
    app.job("ok")(lambda job: None)
    assert "ok" in app.handlers
