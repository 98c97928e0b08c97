"""The sync I/O modules are generated from their async sources (pgqueue/aio): one source each.
A sync module edited by hand, or an async source changed without regenerating, fails here."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pgqueue.aio import generate


def test_every_generated_sync_module_is_current(capsys: pytest.CaptureFixture[str]) -> None:
    assert generate.main(["--check"]) == 0, capsys.readouterr().err


def test_a_hand_edit_of_a_generated_module_is_caught(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    for name in generate.MODULES:
        shutil.copy(generate.PACKAGE / name, tmp_path / name)
    edited = tmp_path / generate.MODULES[0]
    edited.write_text(edited.read_text(encoding="utf-8") + "# a hand edit\n", encoding="utf-8")
    monkeypatch.setattr(generate, "PACKAGE", tmp_path)
    assert generate.main(["--check"]) == 1
    assert f"stale: pgqueue/{generate.MODULES[0]}" in capsys.readouterr().err
