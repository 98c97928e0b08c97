"""WorkerSettings: one frozen value, each field checked once, by name, wherever it is given
(Worker, AsyncWorker and `pgqueue worker` build the same object)."""
from __future__ import annotations

import dataclasses
from typing import Any

import pytest

import pgqueue
from pgqueue.runtime.settings import DEFAULT_ASYNC_CONCURRENCY, WorkerOptions, WorkerSettings


def test_defaults_are_whole_and_frozen() -> None:
    settings = pgqueue.WorkerSettings()
    assert settings.streams == ("default",) and settings.concurrency == 4
    assert settings.renew_interval is None and settings.prefetch is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.concurrency = 8  # type: ignore[misc]


def test_values_are_normalised() -> None:
    settings = pgqueue.WorkerSettings(streams="emails", visibility_timeout=10, node=3)
    assert settings.streams == ("emails",) and isinstance(settings.visibility_timeout, float)
    assert pgqueue.WorkerSettings(streams=["a", "b"]).streams == ("a", "b")


@pytest.mark.parametrize(("field", "value", "error", "says"), [
    ("streams", [], ValueError, "streams must name at least one stream"),
    ("streams", 7, TypeError, "streams"),
    ("concurrency", 0, ValueError, "concurrency"),
    ("concurrency", "4", TypeError, "concurrency"),
    ("async_concurrency", -1, ValueError, "async_concurrency"),
    ("prefetch", 100_001, ValueError, "prefetch"),
    ("visibility_timeout", 0, ValueError, "visibility_timeout"),
    ("renew_interval", -1.0, ValueError, "renew_interval"),
    ("poll_interval", float("nan"), ValueError, "poll_interval"),
    ("maintenance_interval", 0, ValueError, "maintenance_interval"),
    ("grace_period", -1, ValueError, "grace_period"),
    ("maintenance", "yes", TypeError, "maintenance must be True or False"),
    ("node", -1, ValueError, "node"),
    ("metrics_port", 70_000, ValueError, "metrics_port"),
    ("metrics_host", "", TypeError, "metrics_host"),
    ("connect_timeout", 0, ValueError, "connect_timeout"),
    ("listen_dsn", "", TypeError, "listen_dsn"),
    ("pooled", "no", TypeError, "pooled must be True, False or None"),
])
def test_each_bad_field_is_refused_by_name(field: str, value: Any, error: type[Exception],
                                          says: str) -> None:
    with pytest.raises(error, match=says):
        pgqueue.WorkerSettings(**{field: value})
    with pytest.raises(error, match=says):  # replace checks again
        pgqueue.WorkerSettings().replace(**{field: value})


def test_replace_refuses_an_unknown_name() -> None:
    with pytest.raises(TypeError, match="no setting 'concurency'"):
        pgqueue.WorkerSettings().replace(concurency=8)


def test_for_app_fills_what_was_left_to_the_app() -> None:
    app = pgqueue.App()

    @app.job("plain", visibility_timeout=6.0)
    def plain(job: pgqueue.JobContext) -> None:
        pass

    settled = pgqueue.WorkerSettings(visibility_timeout=30.0).for_app(app)
    assert settled.renew_interval == 2.0 and settled.async_concurrency == 0

    @app.job("fetch")
    async def fetch(job: pgqueue.JobContext) -> None:
        pass

    assert pgqueue.WorkerSettings().for_app(app).async_concurrency == DEFAULT_ASYNC_CONCURRENCY
    with pytest.raises(ValueError, match=r"renew_interval \(6.0s\) must be shorter than the "
                                         r"visibility timeout \(6.0s\)"):
        pgqueue.WorkerSettings(renew_interval=6.0).for_app(app)
    with pytest.raises(ValueError, match="async_concurrency must be at least 1: the app's "
                                         "handlers of 'fetch' are async def"):
        pgqueue.WorkerSettings(async_concurrency=0).for_app(app)


def test_a_worker_takes_settings_or_their_fields_by_name() -> None:
    app = pgqueue.App()
    base = pgqueue.WorkerSettings(concurrency=3, streams=("a",))
    worker = pgqueue.Worker(app, "dbname=never_connected", base, node=7)
    assert worker.settings.concurrency == 3 and worker.settings.node == 7
    assert worker.node == 7 and worker.concurrency == 3 and worker.streams == ["a"]
    assert worker.settings.renew_interval == 10.0  # filled in for the app: a third of 30 s
    with pytest.raises(TypeError, match="no setting 'threads'"):
        pgqueue.Worker(app, "dbname=x", threads=2)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"settings must be a pgqueue\.WorkerSettings, got dict"):
        pgqueue.Worker(app, "dbname=x", {"concurrency": 2})  # type: ignore[arg-type]


def test_the_glossary_names_every_worker_setting_and_a_checkpoint_has_its_moment() -> None:
    """docs/glossary.md lists each WorkerSettings field (a new setting gets its row), and
    Checkpoint.updated_at is the glossary's name for updated_at_ms's moment."""
    import datetime as dt
    from pathlib import Path

    glossary = (Path(__file__).resolve().parents[2] / "docs" / "glossary.md").read_text()
    missing = [f.name for f in dataclasses.fields(pgqueue.WorkerSettings)
               if f"`{f.name}`" not in glossary]
    assert missing == []
    at = dt.datetime(2026, 12, 7, 12, 0, 0, 250_000, tzinfo=dt.timezone.utc)
    checkpoint = pgqueue.Checkpoint(updated_at_ms=round(at.timestamp() * 1000))
    assert checkpoint.updated_at == at and pgqueue.Checkpoint().updated_at is None


def test_the_keyword_options_are_the_settings_field_for_field() -> None:
    """WorkerOptions (what a type checker checks `Worker(app, dsn, concurrency=8)` against)
    names every WorkerSettings field with the field's type (streams also as one str), and
    nothing else."""
    import typing

    fields = [f.name for f in dataclasses.fields(WorkerSettings)]
    options = typing.get_type_hints(WorkerOptions)
    assert list(options) == fields
    assert not WorkerOptions.__required_keys__  # each one optional
    settings_types = typing.get_type_hints(WorkerSettings)
    for name, hint in options.items():
        expected = settings_types[name]
        if name == "streams":
            expected = expected | str
        assert hint == expected, name
