"""`pgqueue sql`: the library's named queries, printed for psql users.

All runtime SQL lives in pgqueue/sql/<stage>.sql as named blocks; these commands print them
without connecting, so an operator runs exactly what the library runs (parameters appear as
%(name)s placeholders: substitute them, or use psql's \\bind).
"""
from __future__ import annotations

import click

from pgqueue.db import queries

from .common import EXIT_FAILED, console, fail, print_json, say, say_lines, table


def summary(sql: str) -> str:
    """The first comment line of a named query (its one-line description)."""
    for line in sql.splitlines():
        stripped = line.strip()
        if stripped.startswith("--"):
            return stripped.lstrip("-").strip()
        if stripped:
            break
    return ""


@click.group()
def sql() -> None:
    """Print the library's named SQL queries."""


@sql.command("list")
@click.option("--stage", default=None, help="Only the queries of this stage (file).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def list_(stage: str | None, as_json: bool) -> None:
    """List the named queries by stage."""
    found = sorted(queries.catalog().values(), key=lambda q: (q.stage, q.name))
    if stage is not None:
        found = [q for q in found if q.stage == stage]
        if not found:
            stages = sorted({q.stage for q in queries.catalog().values()})
            fail(f"no stage named {stage!r}; stages: {', '.join(stages)}", EXIT_FAILED)
    if as_json:
        print_json([{"name": q.name, "stage": q.stage, "summary": summary(q.sql)}
                    for q in found])
        return
    console().print(table("named queries", ["stage", "name", "what"],
                          [(q.stage, q.name, summary(q.sql)) for q in found]))


@sql.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def show(name: str, as_json: bool) -> None:
    """Print the SQL of the query NAME (exits 1 when there is none)."""
    catalog = queries.catalog()
    if name not in catalog:
        close = sorted(n for n in catalog if name in n or n in name)
        hint = f"; did you mean {', '.join(close)}?" if close else "; see `pgqueue sql list`"
        fail(f"no query named {name!r}{hint}", EXIT_FAILED)
    query = catalog[name]
    if as_json:
        print_json({"name": query.name, "stage": query.stage, "sql": query.sql})
        return
    say(f"-- {query.stage}.sql: {query.name}")
    say_lines(query.sql + ";")
