"""`pgqueue --help` lists the root commands from a table (cli/__init__.py COMMANDS) without
importing them: the table must say what the commands themselves say, and list every one."""
from __future__ import annotations

import inspect

import click
import pytest
from click.testing import CliRunner

from tests.acceptance.clihelp import cli_package

COMMANDS, load, main = cli_package.COMMANDS, cli_package.load, cli_package.main


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_summary_is_the_first_paragraph_of_the_commands_help(name: str) -> None:
    command = load(name)
    assert command.short_help is None, f"{name}: a short_help the table does not know"
    first = inspect.cleandoc(command.help or "").split("\n\n")[0].replace("\n", " ")
    assert COMMANDS[name][2] == first


@pytest.mark.parametrize("width", [60, 80, 120])
def test_the_listing_is_what_click_prints_with_every_command_loaded(width: int) -> None:
    ctx = click.Context(main, info_name="pgqueue")
    lazy, loaded = click.HelpFormatter(width=width), click.HelpFormatter(width=width)
    main.format_commands(ctx, lazy)
    for name in COMMANDS:
        main.get_command(ctx, name)
    click.Group.format_commands(main, ctx, loaded)
    assert lazy.getvalue() == loaded.getvalue() and "deploy-check" in lazy.getvalue()


def test_an_unknown_command_is_refused_as_before() -> None:
    result = CliRunner().invoke(main, ["nosuch"])
    assert result.exit_code == 2 and "No such command 'nosuch'" in result.output
