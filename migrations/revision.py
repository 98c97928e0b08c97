"""How a revision runs: a small hand-written delta for the tables, then the code reloaded whole.

A schema has two kinds of objects. *State* (tables, indexes, sequences, rows) cannot be
recreated without losing data, so each revision changes it with a delta of plain SQL a DBA can
read: `versions/NNNN_slug.sql` up and `versions/NNNN_slug.down.sql` down. *Code* (functions and
views) holds no data, so a revision never re-types a body: after its delta it reloads the code
of the revision it lands on, and drops every pgqueue function or view that code does not
define. The code of the newest revision is the current source, pgqueue/sql/<stage>.sql; the
code of every older revision is rebuilt from generated files, `versions/code/NNNN.sql`, each
holding only what its revision changed against the frozen code below it (frozen.py), written
by `python -m pgqueue_migrations.new` before the source moves on (a revision that changed no
code has none: it shares the newest frozen code below it).

The code is loaded with CREATE OR REPLACE, which keeps each function's identity, so processes
that are running while a database upgrades keep calling the functions they know (a rolling
upgrade); what that code did not define is told by the catalog rows it left in place.

Each revision also records in pgqueue.schema_history the oldest revision whose code runs on it
(`compatible_from`): a backward-compatible revision keeps its predecessor's, any other starts
afresh. The library reads it to accept a database one or more compatible revisions newer.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alembic import op
from pgqueue_migrations import frozen

from pgqueue.db import queries


def _driver() -> Any:
    driver = op.get_bind().connection.driver_connection
    assert driver is not None
    return driver


def _later_revision_exists(revision: str, versions: Path) -> bool:
    return any(p.name[:4].isdigit() and int(p.name[:4]) > int(revision)
               for p in versions.glob("[0-9][0-9][0-9][0-9]_*.py"))


def code_file(revision: str, versions: Path) -> Path | None:
    """The frozen file holding `revision`'s code, or None for the head (the current source).
    A revision that changed no code has no file of its own: it has the code of the newest
    frozen revision below it (revision ids are consecutive)."""
    if not _later_revision_exists(revision, versions):
        return None
    for number in range(int(revision), 0, -1):
        frozen = versions / "code" / f"{number:04d}.sql"
        if frozen.exists():
            return frozen
    raise RuntimeError(f"no frozen code for revision {revision} in {versions / 'code'}")


def code_of(revision: str, versions: Path) -> str:
    """The functions and views of `revision`: the frozen deltas up to it applied in order, or
    the current source for the head."""
    found = code_file(revision, versions)
    return queries.code_sql() if found is None else frozen.rebuild(versions, found.stem)


#: Where a revision's code turns to privileges (pgqueue/sql/access.sql, the last stage): its
#: GRANTs and REVOKEs rewrite the catalog rows of every function, as a definition does.
GRANTS_AT = "\n-- access.sql: functions\n"


def load_code(revision: str, versions: Path) -> None:
    """Make the schema's functions and views exactly those of `revision`: its definitions, then
    every function and view they did not define dropped, then its grants (which, run before
    the drop, would have passed every function off as defined)."""
    conn = _driver()
    code = code_of(revision, versions)
    at = code.find(GRANTS_AT)
    definitions, grants = (code, "") if at < 0 else (code[:at], code[at:])
    # Frozen files list functions by name, not in call order: SQL bodies are checked when
    # first called instead of at creation (the current source is checked by a fresh install).
    queries.fetch(conn, "check_function_bodies", {"on": "off"})
    queries.fetch(conn, "code_load_begin")
    if queries.fetch(conn, "code_load_citus"):
        # on Citus each trigger statement alone (statements.trigger_statements)
        queries.run_script(conn, queries.without_triggers(definitions))
        for statement in queries.trigger_statements(definitions):
            queries.run_script(conn, statement)
    else:
        queries.run_script(conn, definitions)
    queries.fetch(conn, "check_function_bodies", {"on": "on"})
    queries.fetch(conn, "drop_schema_leftovers")
    if grants:
        queries.run_script(conn, grants)


@dataclass(frozen=True)
class Revision:
    """One revision: its id, the one before, its files' folder, and its compatibility."""

    id: str
    down: str | None
    slug: str
    versions: Path
    #: True when code written for `down` keeps working on this revision (additive changes
    #: only: new nullable or defaulted columns, new tables, functions and indexes).
    compatible: bool = False

    def _run(self, suffix: str) -> None:
        path = self.versions / f"{self.id}_{self.slug}{suffix}"
        if path.exists():
            queries.run_script(_driver(), path.read_text(encoding="utf-8"))

    def before(self, conn: Any) -> None:
        """Run the revision's before-step, `NNNN_slug.before.sql`, if it has one, on `conn` in
        autocommit mode, ahead of the upgrade's transaction: each statement (separated by a
        line `-- next transaction`) commits on its own. For work that must not hold the
        upgrade's locks, such as validating a constraint while writers go on; it changes
        nothing the running release notices, and does nothing when run twice."""
        path = self.versions / f"{self.id}_{self.slug}.before.sql"
        if not path.exists():
            return
        for statement in re.split(r"^-- next transaction$", path.read_text(encoding="utf-8"),
                                  flags=re.MULTILINE):
            if any(line.strip() and not line.lstrip().startswith("--")
                   for line in statement.splitlines()):
                queries.run_script(conn, statement)

    def upgrade(self) -> None:
        self._run(".sql")
        load_code(self.id, self.versions)
        self._record()

    def downgrade(self) -> None:
        self._run(".down.sql")
        if self.down is not None:
            load_code(self.down, self.versions)
            self._forget()

    def _has_history(self) -> bool:
        return bool(queries.scalar(_driver(), "schema_history_exists"))

    def _record(self) -> None:
        if not self._has_history():
            return  # revisions before 0004 kept no history
        since = self.id
        if self.compatible and self.down is not None:
            found = queries.scalar(_driver(), "schema_history_compatible_from",
                                   {"revision": self.down})
            since = found or self.down
        queries.fetch(_driver(), "schema_history_put", {"revision": self.id, "since": since})

    def _forget(self) -> None:
        if self._has_history():
            queries.fetch(_driver(), "schema_history_delete", {"revision": self.id})
