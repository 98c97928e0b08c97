"""Job data is shown literally by every command (issue 11, break 5).

Kinds, payloads, dedup keys, errors, state details, stream and schedule names, worker hosts
and op bodies are whatever producers wrote. Each test stores rich markup and terminal escape
sequences (an OSC that sets the window title, an SGR colour, other C0 and C1 controls, a
bidi override) and checks that people's output shows them as text (`\\x1b`, `\\n`) with no
raw control character reaching stdout or stderr, while --json returns the exact values.
"""
from __future__ import annotations

import base64
import json
import re
from typing import TYPE_CHECKING, Any

import click
from click.testing import CliRunner, Result
from psycopg.types.json import Jsonb

import pgqueue
from pgqueue.db import connection, queries
from tests.acceptance.clihelp import run

if TYPE_CHECKING:  # the installed name of the `cli` folder is pgqueue_cli (see clihelp)
    from cli.common import Group
else:
    from pgqueue_cli.common import Group

#: Markup rich would interpret, and escape sequences a terminal would act on.
MARKUP = "[red]x[/red]"
LINK = "[link=https://evil.example]click[/link]"
TITLE = "\x1b]0;owned\x07"  # OSC 0: sets the terminal's title
RED = "\x1b[31m"  # SGR: paints everything after it red
OTHER = "\x01\x08\r\x7f\x85\x9b\u202e"  # SOH, backspace, CR, DEL, NEL, CSI (C1), RLO
NASTY = f"k{MARKUP}{LINK}{TITLE}{RED}{OTHER}\t:smile:\nend"

#: How each of those reads in people's output.
SHOWN = [MARKUP, LINK, "\\x1b]0;owned\\x07", "\\x1b[31m",
         "\\x01\\x08\\r\\x7f\\x85\\x9b\\u202e", "\\t:smile:\\nend"]

#: Any character a terminal could act on; newlines are the tables' own.
RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e"
                         "\u2066-\u2069\u2028\u2029]")
WIDE: dict[str, str | None] = {"COLUMNS": "1000"}  # wide enough that no cell folds an escape in two


def people(dsn: str, *args: str, code: int = 0) -> Result:
    """Run a command for people (wide terminal); nothing raw may reach stdout or stderr."""
    result = run(dsn, *args, env=WIDE)
    assert result.exit_code == code, (args, result.exit_code, result.stdout, result.stderr)
    for name, text in (("stdout", result.stdout), ("stderr", result.stderr)):
        found = RAW_CONTROL.search(text)
        assert found is None, f"{args}: raw {found.group()!r} on {name}: {text!r}"
    return result


def shows_literally(out: str, *, shown: list[str] = SHOWN) -> None:
    for piece in shown:
        assert piece in out, (piece, out)


def machine(dsn: str, *args: str) -> Any:
    result = run(dsn, *args, "--json")
    assert result.exit_code == 0, (args, result.stdout, result.stderr)
    assert RAW_CONTROL.search(result.stdout) is None, "raw control characters in JSON text"
    return json.loads(result.stdout)


def nasty_dead_job(dsn: str, stream: str = "s") -> int:
    """A dead letter whose kind, payload, dedup key and last error are all NASTY."""
    with pgqueue.Queue(dsn, stream=stream) as q:
        job_id = q.enqueue(NASTY.encode() + b"\x00tail", kind=NASTY, dedup_key=NASTY,
                           max_attempts=1)
        (lease,) = q.lease()
        assert q.nack(lease, error=NASTY) is True
    return job_id


def test_job_views_show_kind_payload_dedup_key_and_error_literally(dsn: str) -> None:
    job_id = nasty_dead_job(dsn)
    for args in (["jobs", "show", str(job_id)], ["jobs", "show", str(job_id), "--full"],
                 ["jobs", "inspect", str(job_id)], ["dead", "show", str(job_id)]):
        out = people(dsn, *args).stdout
        assert out.count("\\x1b]0;owned\\x07") >= 4, out  # kind, payload, dedup key, error
        shows_literally(out, shown=[*SHOWN, "\\x00tail"])
    # the tables cut long cells, so the list views show the start of each value
    for args in (["jobs", "list"], ["dead", "list"], ["jobs", "list", "--state", "dead"]):
        out = people(dsn, *args).stdout
        assert f"k{MARKUP}" in out and "[link=" in out, out


def test_json_returns_the_exact_values(dsn: str) -> None:
    job_id = nasty_dead_job(dsn)
    for shown in (machine(dsn, "jobs", "show", str(job_id)),
                  machine(dsn, "jobs", "show", str(job_id), "--full"),
                  machine(dsn, "jobs", "inspect", str(job_id)),
                  machine(dsn, "dead", "list")[0], machine(dsn, "jobs", "list")[0]):
        assert shown["kind"] == NASTY and shown["last_error"] == NASTY
        assert (shown["payload"], shown["payload_encoding"]) == (NASTY + "\x00tail", "utf-8")
        assert (shown["dedup_key"], shown["dedup_key_encoding"]) == (NASTY, "utf-8")
    (enqueued, *_rest) = machine(dsn, "oplog", "tail", "--job", str(job_id))
    assert base64.b64decode(enqueued["body"]["payload"]) == NASTY.encode() + b"\x00tail"
    assert enqueued["body"]["kind"] == NASTY


def test_state_detail_stream_and_op_bodies_are_shown_literally(dsn: str) -> None:
    stream = f"s{MARKUP}{TITLE}"
    with pgqueue.Queue(dsn, stream=stream) as q:
        job_id = q.enqueue(b"x", kind="k")
        (lease,) = q.lease()
        with q.connection() as conn:
            assert queries.scalar(conn, "mark_undecodable", {
                "stream": lease.stream, "job_id": job_id, "lease_id": lease.lease_id,
                "reason": "unknown_kind",
                "detail": Jsonb({"why": NASTY})})
    out = people(dsn, "jobs", "inspect", str(job_id)).stdout
    assert "state detail" in out
    shows_literally(out, shown=[f"s{MARKUP}\\x1b]0;owned\\x07", "\\x1b]0;owned\\x07"])
    assert machine(dsn, "jobs", "inspect", str(job_id))["state_detail"] == {"why": NASTY}
    for args in (["stats"], ["jobs", "list"], ["oplog", "tail"]):
        assert f"s{MARKUP}\\x1b]0;owned\\x07" in people(dsn, *args).stdout, args
    people(dsn, "oplog", "tail", "--job", str(job_id))  # its body holds the detail: no raw ESC
    bodies = [op["body"] for op in machine(dsn, "oplog", "tail", "--job", str(job_id))]
    assert {"why": NASTY} in [b.get("state_detail") for b in bodies]
    assert machine(dsn, "stats")[0]["stream"] == stream


def test_schedules_show_name_kind_and_payload_literally(dsn: str) -> None:
    name = f"n{MARKUP}{TITLE}"
    with pgqueue.Queue(dsn, stream=f"s{RED}") as q:
        q.upsert_schedule(name, "* * * * *", NASTY, kind=NASTY)
    for args in (["schedules", "show", name, "--stream", f"s{RED}"],
                 ["schedules", "list", "--stream", f"s{RED}"]):
        out = people(dsn, *args).stdout
        shows_literally(out, shown=[f"n{MARKUP}\\x1b]0;owned\\x07", "s\\x1b[31m"])
    shows_literally(people(dsn, "schedules", "show", name, "--stream", f"s{RED}").stdout)
    out = people(dsn, "schedules", "pause", name, "--stream", f"s{RED}").stdout
    assert f"paused s\\x1b[31m/n{MARKUP}\\x1b]0;owned\\x07" in out
    shown = machine(dsn, "schedules", "show", name, "--stream", f"s{RED}")
    assert (shown["name"], shown["kind"], shown["payload"]) == (name, NASTY, NASTY)
    # an error naming it is one literal line on stderr
    err = people(dsn, "schedules", "show", name, code=1).stderr
    assert "\\x1b]0;owned\\x07" in err and "stream(s) s\\x1b[31m" in err


def test_worker_hosts_and_messages_are_shown_literally(dsn: str) -> None:
    with connection.connect(dsn) as conn:
        queries.fetch(conn, "register_worker", {
            "node": 0, "host": f"h{MARKUP}{TITLE}", "pid": 1, "streams": [f"s{RED}"],
            "concurrency": 1})
    out = people(dsn, "workers").stdout
    shows_literally(out, shown=[f"h{MARKUP}\\x1b]0;owned\\x07", "s\\x1b[31m"])
    assert machine(dsn, "workers")[0]["host"] == f"h{MARKUP}{TITLE}"
    out = people(dsn, "jobs", "set-threshold", NASTY, "--quarantine-after", "2").stdout
    shows_literally(out)


def test_a_line_written_without_the_helpers_is_escaped_too() -> None:
    """The root group puts stdout and stderr behind the escaping stream, so a new command
    that prints with click.echo or print cannot put raw controls on the terminal."""
    @click.group(cls=Group)
    def root() -> None:
        pass

    @root.command()
    def careless() -> None:
        click.echo(f"echo {NASTY}")
        print(f"print {TITLE}")
        click.echo(f"err {RED}", err=True)
        click.echo(f"bytes {TITLE}".encode())

    # color=True: click keeps escape sequences as it does on a terminal (it strips some
    # otherwise), so only the backstop stands between them and the terminal
    result = CliRunner().invoke(root, ["careless"], catch_exceptions=False, color=True)
    assert result.exit_code == 0
    # the backstop lets layout through (newline, tab); everything else is spelled out
    for text in (result.stdout.replace("\t", ""), result.stderr):
        assert RAW_CONTROL.search(text) is None, text
    assert "echo k[red]x[/red]" in result.stdout
    assert "\\x1b]0;owned\\x07\\x1b[31m\\x01" in result.stdout
    assert "print \\x1b]0;owned\\x07" in result.stdout
    assert "bytes \\x1b]0;owned\\x07" in result.stdout
    assert "err \\x1b[31m" in result.stderr
