"""The reference pages' tables, generated from the code at build time (an MkDocs hook): a page
holding `<!-- generated: NAME -->` gets NAME's table in its place, so the docs list every SQL
function a role may call, every metric, HTTP route, setting and environment variable the
code has, with nothing kept by hand that could drift.

Sources: the SQL functions and settings tables from pgqueue/sql/*.sql (read as text, never
run), the metrics from the collectors themselves, the routes from the dashboard's route
lists, the worker's settings from Worker's signature and the `pgqueue worker` options' help,
the environment variables from the CLI's options and the code that reads them."""
from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parents[2]
SQL = ROOT / "pgqueue" / "sql"
MARKER = re.compile(r"<!-- generated: ([a-z-]+) -->")
ROLES = ("pgqueue_reader", "pgqueue_producer", "pgqueue_worker", "pgqueue_operator")
#: Environment variables the code reads itself (not through a CLI option), with what they do.
ENVIRONMENT = {
    "PGQUEUE_DATA_DIR": "Where the embedded Postgres keeps its data when no DSN is given "
                        "(default: ~/.local/share/pgqueue/embedded, /var/lib/pgqueue/embedded "
                        "for root).",
    "PGQUEUE_ADMIN_TOKEN": "The dashboard's admin token when no --admin-token-file is given "
                           "(at least 16 characters): without one the dashboard is read-only.",
    "PGQUEUE_DEBUG": "Set (to anything) to print the traceback behind a command's one-line "
                     "error.",
    "PGQUEUE_DATABASE": "A Django setting, not an environment variable: the Django database "
                        "pgqueue uses (default \"default\"; $PGQUEUE_DSN wins).",
}


def _cell(text: object) -> str:
    """A value made safe for one table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _table(header: Iterable[str], rows: Iterable[Iterable[object]]) -> str:
    head = list(header)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


# -- SQL functions ---------------------------------------------------------------------------

def grants() -> dict[str, str]:
    """Each function granted to a pgqueue role -> the least role granted it (access.sql)."""
    text = (SQL / "access.sql").read_text()
    least: dict[str, str] = {}
    for names, role in re.findall(r"GRANT EXECUTE ON FUNCTION (.*?)\s+TO (pgqueue_\w+);",
                                  text, re.S):
        for name in re.findall(r"pgqueue\.(\w+)", names):
            if name not in least or ROLES.index(role) < ROLES.index(least[name]):
                least[name] = role
    return least


def function_definitions() -> dict[str, list[tuple[str, str]]]:
    """Each pgqueue function -> its (signature, comment) per overload, from the current
    SQL files: the comment is the block of `--` lines right above its CREATE."""
    found: dict[str, list[tuple[str, str]]] = {}
    for path in sorted(SQL.glob("*.sql")):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            m = re.match(r"CREATE OR REPLACE FUNCTION pgqueue\.(\w+)\(", line)
            if not m:
                continue
            head = []
            for rest in lines[i:]:
                head.append(rest.strip())
                if re.search(r"^(LANGUAGE|AS|SECURITY|SET) ", rest):
                    break
            signature = re.split(r"\s(?=LANGUAGE )", " ".join(head[:-1] or head))[0]
            signature = signature.removeprefix("CREATE OR REPLACE FUNCTION ")
            comment: list[str] = []
            j = i - 1
            while j >= 0 and lines[j].startswith("--"):
                comment.insert(0, lines[j].lstrip("-").strip())
                j -= 1
            found.setdefault(m.group(1), []).append((signature, " ".join(comment)))
    return found


def sql_functions() -> str:
    """Every function a pgqueue role may call, by role, with its signature and comment."""
    least, defs = grants(), function_definitions()
    out = []
    for role in ROLES:
        names = sorted(n for n, r in least.items() if r == role)
        out.append(f"## {role}\n\n")
        includes = ROLES[:ROLES.index(role)]
        if includes:
            out.append(f"Also everything {includes[-1]} may call.\n\n")
        for name in names:
            for signature, comment in defs.get(name, [("pgqueue." + name + "(...)", "")]):
                out.append(f"### `pgqueue.{name}`\n\n```sql\n{signature}\n```\n\n"
                           f"{comment}\n\n")
    return "".join(out)


def table_settings(table: str) -> list[tuple[str, str, str, str]]:
    """(column, type, default, comment) of each column of a settings table, from its CREATE
    TABLE in the current SQL files."""
    for path in sorted(SQL.glob("*.sql")):
        m = re.search(rf"CREATE TABLE pgqueue\.{table} \((.*?)\n\);", path.read_text(), re.S)
        if not m:
            continue
        rows: list[tuple[str, str, str, str]] = []
        comment: list[str] = []
        for line in m.group(1).splitlines():
            line = line.strip()
            if line.startswith("--"):
                comment.append(line.lstrip("-").strip())
                continue
            col = re.match(r"(\w+)\s+(.+?)(?=\s+(?:NOT|DEFAULT|CHECK|PRIMARY|UNIQUE|REFERENCES)\b"
                           r"|,|\s*--|$)(.*)", line)
            if not col or col.group(1).upper() in {"CHECK", "PRIMARY", "UNIQUE"}:
                continue
            default = re.search(r"DEFAULT (.+?)(?: CHECK| NOT| PRIMARY|,?\s*(?:--.*)?$)", col.group(3))
            inline = re.search(r"--\s*(.*)", col.group(3))
            rows.append((col.group(1), col.group(2), default.group(1) if default else "none",
                         " ".join([*comment, inline.group(1) if inline else ""]).strip()))
            comment = []
        return rows
    raise LookupError(f"no CREATE TABLE pgqueue.{table} in {SQL}")


# -- metrics ---------------------------------------------------------------------------------

def metric_families() -> list[tuple[str, str, str, list[str], str]]:
    """(source, name, type, labels, help) of every metric: the database's gauges, collected
    from a sample reading, and a worker's own, from its registry."""
    from pgqueue.models import QueueGauges
    from pgqueue.telemetry.metrics import DatabaseCollector, WorkerMetrics

    sample = QueueGauges(streams=["s"], jobs={("s", "pending"): 1},
                         oldest_pending_age_seconds={"s": 1.0}, op_log_ops=1,
                         schedules={("s", False): 1}, workers={"live": 1, "stale": 0},
                         replicas=[{"name": "r", "lag_ops": 0, "lag_seconds": 0.0}])

    class Sample(DatabaseCollector):
        def _read(self) -> QueueGauges:
            return sample

    out = []
    for family in Sample("").collect():
        labels = sorted({k for s in family.samples for k in s.labels})
        out.append(("database (`pgqueue metrics serve`)", family.name, family.type, labels,
                    family.documentation))
    worker = WorkerMetrics(lambda: {"s": 1})
    for collector in (worker.finished, worker.duration, worker.wait, worker.reclaimed):
        labels = list(getattr(collector, "_labelnames", ()))
        for family in collector.describe():
            name = family.name + ("_total" if family.type == "counter" else "")
            out.append(("worker (`pgqueue worker --metrics-port`)", name, family.type,
                        labels, family.documentation))
    for family in worker.registry.collect():
        if family.name == "pgqueue_leases_held":
            labels = sorted({k for s in family.samples for k in s.labels})
            out.append(("worker (`pgqueue worker --metrics-port`)", family.name, family.type,
                        labels, family.documentation))
    return out


def metrics() -> str:
    return _table(["metric", "type", "labels", "served by", "what"],
                  [(f"`{name}`", kind, ", ".join(f"`{x}`" for x in labels), source, doc)
                   for source, name, kind, labels, doc in metric_families()])


# -- HTTP routes -----------------------------------------------------------------------------

def routes() -> list[tuple[str, str, str, str]]:
    """(kind, method, path, what) of every route of the dashboard's app."""
    from pgqueue.dashboard import api, pages

    out = []
    for kind, table in (("API", api.ROUTES), ("page", pages.ROUTES)):
        for route in table:
            methods = sorted((route.methods or {"GET"}) - {"HEAD"})
            doc = inspect.getdoc(route.endpoint) or ""
            out.append((kind, ", ".join(methods), route.path, doc.split("\n\n")[0]))
    return out


def http() -> str:
    return _table(["", "method", "path", "what"],
                  [(k, m, f"`{p}`", d) for k, m, p, d in routes()])


# -- settings --------------------------------------------------------------------------------

def _cli() -> Any:
    """The CLI's group (installed as pgqueue_cli: the `cli` folder, setup.py's package_dir)."""
    if TYPE_CHECKING:
        from cli import main
    else:
        from pgqueue_cli import main
    return main


def _worker_command() -> Any:
    import click

    main = _cli()
    ctx = click.Context(main)
    return main.get_command(ctx, "worker")


def worker_settings() -> list[tuple[str, str, str, str]]:
    """(Worker argument, default, `pgqueue worker` option, help) of each Worker setting."""
    from pgqueue.runtime.worker import Worker

    main = _cli()
    options = {p.name: p for p in [*main.params, *_worker_command().params]}
    options["maintenance"] = options["no_maintenance"]  # the flag turns it off
    out = []
    for name, param in inspect.signature(Worker.__init__).parameters.items():
        if param.kind is not param.KEYWORD_ONLY:
            continue
        option = options.get(name)
        flag = ", ".join(f"`{o}`" for o in option.opts) if option is not None else ""
        default = "" if param.default is param.empty else repr(param.default)
        out.append((f"`{name}`", default, flag, (option.help or "") if option is not None else ""))
    return out


def environment() -> list[tuple[str, str]]:
    """(variable, what) of every environment variable pgqueue reads: the CLI's options that
    take one (their help), then those the code reads itself."""
    import click

    main = _cli()
    found: dict[str, str] = {}

    def walk(command: click.Command, ctx: click.Context) -> None:
        for param in command.params:
            for var in ([param.envvar] if isinstance(param.envvar, str) else param.envvar or []):
                found.setdefault(var, getattr(param, "help", "") or "")
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                if sub is not None:
                    walk(sub, click.Context(sub, parent=ctx, info_name=name))

    walk(main, click.Context(main, info_name="pgqueue"))
    found.update({k: v for k, v in ENVIRONMENT.items() if k not in found})
    return sorted(found.items())


def settings() -> str:
    stream = table_settings("stream_config")
    kind = table_settings("kind_config")
    retention = table_settings("op_log_policy")
    return (
        "## A worker's settings\n\n`pgqueue.Worker(app, dsn, **settings)`, or the option of "
        "`pgqueue worker`:\n\n"
        + _table(["argument", "default", "option", "what"], worker_settings())
        + "\n## A stream's settings\n\nSet with `Queue.configure_stream`, or "
        "`SELECT pgqueue.configure_stream('s', p_<column> => ...)` (columns in ms as "
        "stored; the Python call takes seconds). A stream without a row has the defaults.\n\n"
        + _table(["column", "type", "default", "what"],
                 [(f"`{c}`", t, f"`{d}`", w) for c, t, d, w in stream if c != "stream"])
        + "\n## A kind's settings\n\nSet with `Queue.configure_kind`, `pgqueue kinds set`, or "
        "by a worker whose handlers name them; none is set unless given.\n\n"
        + _table(["column", "type", "default", "what"],
                 [(f"`{c}`", t, d, w) for c, t, d, w in kind if c not in ("stream", "kind")])
        + "\n## The op log's retention\n\n`pgqueue oplog retention [SECONDS]`.\n\n"
        + _table(["column", "type", "default", "what"],
                 [(f"`{c}`", t, f"`{d}`", w) for c, t, d, w in retention if c != "one"])
        + "\n## Environment variables\n\n"
        + _table(["variable", "what"], [(f"`{k}`", v) for k, v in environment()])
    )


GENERATORS: dict[str, Callable[[], str]] = {
    "sql-functions": sql_functions,
    "metrics": metrics,
    "http": http,
    "settings": settings,
}


def on_page_markdown(markdown: str, **_: Any) -> str:
    """MkDocs hook: each marker replaced by its generated table."""
    return MARKER.sub(lambda m: GENERATORS[m.group(1)](), markdown)
