"""Frozen code as deltas keyed by object (migrations/frozen.py): a revision's file holds only
the objects it changed, each under its name, and the code of every revision is rebuilt from
them exactly."""
from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st
from pgqueue_migrations import frozen
from pgqueue_migrations.revision import code_of

from pgqueue.db import queries, schema

VERSIONS = schema.migrations_dir() / "versions"

_STATEMENTS = st.sampled_from([
    "-- a comment\nCREATE OR REPLACE FUNCTION pgqueue.a() RETURNS int\nLANGUAGE sql AS $$ SELECT 1; $$;\n",
    "CREATE OR REPLACE FUNCTION pgqueue.b() RETURNS int\nLANGUAGE plpgsql AS $body$\nBEGIN\n"
    "  RETURN 2; -- ; not the end\nEND\n$body$;\n",
    "\n-- b.sql: functions\nCREATE OR REPLACE VIEW pgqueue.v AS SELECT ';' AS x;\n",
    "GRANT EXECUTE ON FUNCTION pgqueue.a TO pgqueue_reader;\n",
    "REVOKE ALL ON SCHEMA pgqueue FROM PUBLIC;\n",
    "CREATE OR REPLACE FUNCTION pgqueue.c(p text DEFAULT 'x;y') RETURNS text\nLANGUAGE sql AS $$\n"
    "  SELECT p || $q$;$q$\n$$;\n",
])
_CODE = st.lists(_STATEMENTS, max_size=12).map("".join)


def test_a_statement_is_one_chunk_with_the_comments_above_it() -> None:
    code = ("-- one\nCREATE OR REPLACE FUNCTION pgqueue.a() RETURNS int LANGUAGE sql\n"
            "AS $$ SELECT 1; $$;\n\n-- two\nGRANT USAGE ON SCHEMA pgqueue TO r; -- why\n")
    assert frozen.chunks(code) == [
        "-- one\nCREATE OR REPLACE FUNCTION pgqueue.a() RETURNS int LANGUAGE sql\n"
        "AS $$ SELECT 1; $$;\n", "\n-- two\nGRANT USAGE ON SCHEMA pgqueue TO r; -- why\n"]


@given(_CODE, _CODE)
def test_applying_a_delta_gives_the_new_code_exactly(old: str, new: str) -> None:
    assert "".join(frozen.chunks(old)) == old
    assert frozen.apply(old, frozen.delta(old, new)) == new
    assert frozen.delta(new, new) == ""


def test_the_current_source_cuts_into_statements() -> None:
    code = queries.code_sql()
    parts = frozen.chunks(code)
    assert "".join(parts) == code
    assert len(parts) > 100 and max(p.count("\n") for p in parts) < 400


def test_each_frozen_file_holds_only_what_its_revision_changed() -> None:
    """Every file is exactly the entries `pgqueue_migrations.new` would write for its
    revision: nothing the code below already had."""
    files = frozen.frozen_files(VERSIONS, "9999")
    assert [f.stem for f in files][:1] == ["0001"]
    below = ""
    for path in files:
        code = frozen.rebuild(VERSIONS, path.stem)
        text = path.read_text(encoding="utf-8")
        assert text[text.index("-- @@ "):] == frozen.delta(below, code), path.name
        below = code


def test_the_head_before_the_frozen_files_and_the_code_of_every_revision() -> None:
    files = frozen.frozen_files(VERSIONS, "9999")
    newest = files[-1].stem
    assert code_of(schema.head(), VERSIONS) == queries.code_sql()
    assert code_of(newest, VERSIONS) == frozen.rebuild(VERSIONS, newest) != queries.code_sql()


def test_an_entry_that_does_not_fit_is_refused() -> None:
    import pytest

    with pytest.raises(ValueError, match="removes what the code below does not hold"):
        frozen.apply("SELECT 1;\n", "-- @@ function pgqueue.x\n-- @@ removed\n")
    with pytest.raises(ValueError, match=r"comes after 'view pgqueue\.v', which the code lacks"):
        frozen.apply("SELECT 1;\n", "-- @@ function pgqueue.x\n-- @@ after view pgqueue.v\nSELECT 2;\n")


def test_each_entry_is_named_by_its_object() -> None:
    """A revision's file names the objects it changed: the head's changes against 0020 are
    the functions revision 0021 touched (JIT off on the lease's functions), by name."""
    below = frozen.rebuild(VERSIONS, "0020")
    names = re.findall(r"^-- @@ (.+)$", frozen.delta(below, queries.code_sql()), re.MULTILINE)
    objects = [n for n in names if not n.startswith(("after ", "removed"))]
    assert {"function pgqueue.lease", "function pgqueue.pick_within_limits",
            "function pgqueue.reclaim_due_jobs", "function pgqueue.expiry_unfinished"} <= set(objects)
    assert all(not n[0].isdigit() for n in objects)
    assert frozen.key("-- why\nCREATE OR REPLACE VIEW pgqueue.jobs AS SELECT 1;\n") == "view pgqueue.jobs"
    assert frozen.key("ALTER TABLE pgqueue.job ENABLE ALWAYS TRIGGER job_counts;\n") == \
        "enable trigger job_counts"
