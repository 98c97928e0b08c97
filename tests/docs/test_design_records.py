"""The design records (docs/design/NNNN-title.md) keep their form: numbered without gaps,
headed by their number, with a status, a context, a decision and consequences, each listed
in the index and in the site's navigation."""
from __future__ import annotations

import re
from pathlib import Path

DESIGN = Path(__file__).resolve().parents[2] / "docs" / "design"


def _records() -> list[Path]:
    return sorted(p for p in DESIGN.glob("*.md") if re.match(r"\d{4}-", p.name))


def test_records_are_numbered_from_one_without_gaps() -> None:
    numbers = [int(p.name[:4]) for p in _records()]
    assert numbers and numbers == list(range(1, len(numbers) + 1))


def test_each_record_has_its_heading_status_and_sections() -> None:
    for path in _records():
        text = path.read_text(encoding="utf-8")
        assert text.startswith(f"# {path.name[:4]}. "), path.name
        assert re.search(r"^Status: (accepted|replaced by \d{4})", text, re.MULTILINE), path.name
        for section in ("## Context", "## Decision", "## Consequences"):
            assert f"\n{section}\n" in text, f"{path.name}: no {section}"


def test_each_record_is_in_the_index_and_the_navigation() -> None:
    index = (DESIGN / "index.md").read_text(encoding="utf-8")
    nav = (DESIGN.parents[1] / "mkdocs.yml").read_text(encoding="utf-8")
    for path in _records():
        assert f"]({path.name})" in index, path.name
        assert f"design/{path.name}" in nav, path.name
