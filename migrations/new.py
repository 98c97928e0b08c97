"""Start a schema change: freeze the current code under the head revision, add the next one.

    python -m pgqueue_migrations.new SLUG [--compatible] ["one-line description"]

1. Writes versions/code/<head>.sql: what the functions and views of pgqueue/sql/<stage>.sql
   as they are now change against the frozen code below (frozen.py's entries, one per
   object changed, nothing else):
   the head revision's code from then on (its upgrade and the next revision's downgrade
   rebuild and load it). It refuses when that file already exists.
2. Writes versions/<next>_<slug>.py and empty <next>_<slug>.sql / .down.sql for the tables'
   delta (state only: functions and views are never written into a revision).

Then: change pgqueue/sql/<stage>.sql (tables and functions, in their current form), write the
same table change as a delta into the new .sql and its undo into .down.sql, set
pgqueue.db.connection.SCHEMA_REVISION to the new id, and run tests/integration/db/test_schema.py,
which fails naming every object where the two paths disagree.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from pgqueue_migrations import frozen

from pgqueue.db import queries

VERSIONS = Path(__file__).resolve().parent / "versions"

FROZEN_HEADER = """\
-- GENERATED FILE: do not edit. What pgqueue schema revision {rev} changed in the functions and
-- views, object by object, against the code of {below} (frozen by
-- `python -m pgqueue_migrations.new` when revision {next} was started). Each entry is headed
-- by the object it defines and the one it follows, then its whole text (or `removed`); the
-- code of {rev} is every frozen file up to it applied in order (migrations/frozen.py). Loaded
-- when a database is upgraded to {rev} or downgraded to it; the current definitions live in
-- pgqueue/sql/.

"""

MODULE = '''"""{doc}

Revision ID: {id}
Revises: {down}
"""
from __future__ import annotations

from pathlib import Path

from pgqueue_migrations.revision import Revision

revision = "{id}"
down_revision = "{down}"
branch_labels = None
depends_on = None

REVISION = Revision(revision, down_revision, "{slug}", Path(__file__).parent, compatible={compatible})


def upgrade() -> None:
    REVISION.upgrade()


def downgrade() -> None:
    REVISION.downgrade()
'''


def head(versions: Path = VERSIONS) -> str:
    """The highest revision id among the revision modules."""
    ids = [m.group(1) for p in versions.glob("*.py") if (m := re.match(r"(\d{4})_", p.name))]
    return max(ids)


def freeze(revision: str, next_revision: str, versions: Path = VERSIONS) -> Path | None:
    """Write versions/code/<revision>.sql: the current source's changes against the frozen
    code below; refuse to overwrite. When the code is the same as the revision below's, write
    nothing (it shares that file)."""
    target = versions / "code" / f"{revision}.sql"
    if target.exists():
        raise SystemExit(f"{target} exists: revision {revision} is already frozen")
    below = frozen.frozen_files(versions, f"{int(revision) - 1:04d}")
    entries = frozen.delta(frozen.rebuild(versions, below[-1].stem) if below else "",
                         queries.code_sql())
    if below and not entries:
        return None
    target.parent.mkdir(exist_ok=True)
    what = f"revision {below[-1].stem}" if below else "nothing (the first revision)"
    target.write_text(FROZEN_HEADER.format(rev=revision, below=what, next=next_revision) + entries,
                      encoding="utf-8")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pgqueue_migrations.new",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("slug", help="what the revision changes, in snake_case")
    parser.add_argument("description", nargs="?", default=None)
    parser.add_argument("--compatible", action="store_true",
                        help="code of the previous revision keeps working on this one")
    parser.add_argument("--versions", type=Path, default=VERSIONS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    versions: Path = args.versions
    if not re.fullmatch(r"[a-z][a-z0-9_]{0,40}", args.slug):
        parser.error(f"slug must be snake_case (a-z, 0-9, _), got {args.slug!r}")
    down = head(versions)
    new = f"{int(down) + 1:04d}"
    written = freeze(down, new, versions)
    module = versions / f"{new}_{args.slug}.py"
    module.write_text(MODULE.format(doc=args.description or args.slug.replace("_", " "), id=new,
                                    down=down, slug=args.slug, compatible=args.compatible),
                      encoding="utf-8")
    for suffix, text in ((".sql", f"-- pgqueue {new}: the tables' delta (state only).\n"),
                         (".down.sql", f"-- Undo {new}'s tables.\n")):
        (versions / f"{new}_{args.slug}{suffix}").write_text(text, encoding="utf-8")
    what = f"froze {written.name}" if written else f"code of {down} unchanged since the revision below"
    print(f"{what}; wrote {module.name} and its .sql/.down.sql; now edit "
          f"pgqueue/sql/, the delta, and SCHEMA_REVISION = {new!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
