"""Invoking the CLI in-process, shared by the CLI tests."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from click.testing import CliRunner, Result

if TYPE_CHECKING:
    # mypy reads the source tree, where the package is the `cli` folder; the installed name
    # (mapped by setup.py's package_dir) is pgqueue_cli.
    import cli as cli_package
else:
    import pgqueue_cli as cli_package

main = cli_package.main
__all__ = ["as_json", "cli_package", "main", "ok", "run"]


def run(dsn: str | None, *args: str, input: bytes | str | None = None,
        env: dict[str, str | None] | None = None) -> Result:
    """Invoke the CLI in-process (with --dsn unless dsn is None; PGQUEUE_DSN unset); an
    exception that escapes the CLI fails the test."""
    argv = ["--dsn", dsn, *args] if dsn is not None else list(args)
    return CliRunner().invoke(main, argv, input=input, env={"PGQUEUE_DSN": None, **(env or {})},
                              catch_exceptions=False)


def ok(dsn: str | None, *args: str, input: bytes | str | None = None) -> Result:
    """Invoke and require exit 0."""
    result = run(dsn, *args, input=input)
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    return result


def as_json(dsn: str | None, *args: str) -> Any:
    """Invoke with --json and parse stdout."""
    return json.loads(ok(dsn, *args, "--json").stdout)
