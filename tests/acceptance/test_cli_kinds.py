"""`pgqueue kinds list|set`: a kind's settings from the command line, checked through the
library; a bad value exits 2 naming the option and writes nothing."""
from __future__ import annotations

import json

import pytest

import pgqueue
from tests.acceptance.clihelp import ok, run
from tests.dbhelp import op_counts


def test_set_then_list_and_clear(dsn: str, q: pgqueue.Queue) -> None:
    said = ok(dsn, "kinds", "set", "mail", "--max-concurrency", "3", "--rate-limit", "10/1",
              "--max-per-key", "2").stdout
    assert "max concurrency 3, rate limit 10/1s, max per key 2" in said
    ok(dsn, "kinds", "set", "mail", "--max-concurrency", "none", "--quarantine-after", "4")
    assert q.kinds() == [pgqueue.KindConfig("default", "mail", 4, None, (10, 1.0), 2)]
    listed = json.loads(ok(dsn, "kinds", "list", "--json").stdout)
    assert listed == [{"stream": "default", "kind": "mail", "quarantine_after": 4,
                       "max_concurrency": None, "rate_limit": {"count": 10, "seconds": 1.0},
                       "max_per_key": 2}]
    assert "10/1s" in ok(dsn, "kinds", "list").stdout
    ok(dsn, "kinds", "set", "mail", "--clear")  # every limit; the threshold stays
    assert q.kinds() == [pgqueue.KindConfig("default", "mail", 4)]
    ok(dsn, "kinds", "set", "mail", "--stream", "other", "--rate-limit", "5/0.5")
    assert [(k.stream, k.rate_limit) for k in json_kinds(dsn)] == [("default", None),
                                                                   ("other", (5, 0.5))]


def json_kinds(dsn: str) -> list[pgqueue.KindConfig]:
    return [pgqueue.KindConfig(k["stream"], k["kind"], k["quarantine_after"],
                               k["max_concurrency"],
                               None if k["rate_limit"] is None
                               else (k["rate_limit"]["count"], k["rate_limit"]["seconds"]),
                               k["max_per_key"])
            for k in json.loads(ok(dsn, "kinds", "list", "--json").stdout)]


@pytest.mark.parametrize(("args", "needle"), [
    (["--max-concurrency", "0"], "--max-concurrency"),
    (["--max-concurrency", "-1"], "--max-concurrency"),
    (["--max-per-key", "x"], "--max-per-key"),
    (["--rate-limit", "10/0"], "--rate-limit"),
    (["--rate-limit", "0/1"], "--rate-limit"),
    (["--rate-limit", "10"], "--rate-limit"),
    ([], "nothing to set"),
])
def test_bad_values_exit_2_and_write_nothing(dsn: str, args: list[str], needle: str) -> None:
    before = op_counts(dsn)
    result = run(dsn, "kinds", "set", "mail", *args)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert needle in result.stderr
    assert op_counts(dsn) == before
