"""The sync I/O modules are generated from their async sources (`X_async.py` beside `X.py` in
each subsystem's folder): one source each. A sync module edited by hand, an async source
changed without regenerating, or a new async source never generated, fails here."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tools import generate


def test_every_generated_sync_module_is_current(capsys: pytest.CaptureFixture[str]) -> None:
    assert generate.main(["--check"]) == 0, capsys.readouterr().err


def test_each_async_source_sits_beside_its_generated_twin() -> None:
    sources = generate.sources()
    assert "pgqueue/client/queue_async.py" in sources and "pgqueue/db/run_async.py" in sources
    for source in sources:
        twin = generate.PACKAGE / generate.target(source)
        assert twin.parent == (generate.PACKAGE / source).parent
        first = twin.read_text(encoding="utf-8").splitlines()[0]
        assert first == f"# DO NOT EDIT: generated from {source} by tools/generate.py; edit that file."


def _copy(tmp_path: Path) -> None:
    for source in generate.sources():
        for name in (source, generate.target(source)):
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(generate.PACKAGE / name, tmp_path / name)
    for init in (generate.PACKAGE / "pgqueue").glob("*/__init__.py"):
        (tmp_path / init.relative_to(generate.PACKAGE)).parent.mkdir(exist_ok=True)
        shutil.copy(init, tmp_path / init.relative_to(generate.PACKAGE))
    shutil.copy(generate.PACKAGE / "pgqueue/__init__.py", tmp_path / "pgqueue/__init__.py")
    shutil.copy(generate.PACKAGE / "pyproject.toml", tmp_path / "pyproject.toml")


def test_a_hand_edit_of_a_generated_module_is_caught(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _copy(tmp_path)
    edited = generate.target(generate.sources()[0])
    path = tmp_path / edited
    path.write_text(path.read_text(encoding="utf-8") + "# a hand edit\n", encoding="utf-8")
    monkeypatch.setattr(generate, "PACKAGE", tmp_path)
    assert generate.main(["--check"]) == 1
    assert f"stale: {edited}" in capsys.readouterr().err


def test_a_new_async_source_is_found_without_a_list(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _copy(tmp_path)
    (tmp_path / "pgqueue/db/extra_async.py").write_text(
        '"""A new async source."""\n\n\nasync def f() -> None:\n    pass\n', encoding="utf-8")
    monkeypatch.setattr(generate, "PACKAGE", tmp_path)
    assert "pgqueue/db/extra_async.py" in generate.sources(tmp_path)
    assert generate.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert "stale: " in err and "pgqueue/db/extra.py" in err.splitlines()[-1]
