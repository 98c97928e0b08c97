"""CLI tables stay readable at 80 columns: columns shrink and wrap between words, a word longer
than its column ends in an ellipsis, and no word (a heading's included) is cut in two."""
from __future__ import annotations

import io
import re
from typing import TYPE_CHECKING

import pytest
from rich.console import Console

if TYPE_CHECKING:  # the installed name of the `cli` folder is pgqueue_cli (see clihelp)
    from cli.common import table
else:
    from pgqueue_cli.common import table

Case = tuple[list[str], list[tuple[object, ...]]]

SCHEDULES: Case = (["name", "cron", "timezone", "next run (UTC)", "paused", "kind", "payload"],
             [("nightly-report-generation-for-all-tenants", "0 3 * * *",
               "America/Argentina/Buenos_Aires", "2026-12-03 06:00:00", "false",
               "send_monthly_invoice_reminders", '{"tenant": "acme corporation", "retry": true}')])
WORKERS: Case = (["id", "node", "host", "pid", "streams", "concurrency", "leases", "heartbeat", "age",
            "stale"],
           [(1, 0, "worker-host-eu-west-1a", 24986, "default,emails,reports", 16, 3,
             "2026-12-02 09:40:01", "1.1s", "stale")])


def rendered(columns: list[str], rows: list[tuple[object, ...]], width: int = 80) -> str:
    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None).print(
        table("t", columns, rows, right=["id", "pid"], nowrap=["id", "pid", "stale"]))
    return buf.getvalue()


@pytest.mark.parametrize("case", [SCHEDULES, WORKERS], ids=["schedules", "workers"])
def test_no_word_is_cut_in_two_at_80_columns(case: Case) -> None:
    columns, rows = case
    out = rendered(columns, rows)
    assert max(len(line) for line in out.splitlines()) <= 80
    words = {w for text in [*columns, *(str(v) for row in rows for v in row)] for w in text.split()}
    for token in re.split(r"[\s│┃┏┓┗┛┡┩┳┻╇━─└┘┌┐┴┬╋┼]+", out):
        if not token or token == "t":  # noqa: S105 (the title, not a password)
            continue
        assert token in words or (token.endswith("…") and any(
            w.startswith(token[:-1]) for w in words)), f"{token!r} is part of a word cut in two"


def test_every_column_stays_on_the_screen() -> None:
    out = rendered(*WORKERS)
    assert out.count("stale") >= 2 and "24986" in out  # the last column, a no-wrap value
