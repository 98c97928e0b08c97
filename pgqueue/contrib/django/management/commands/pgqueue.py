"""`python manage.py pgqueue ...`: any pgqueue command, with Django set up.

The arguments go to the `pgqueue` command line unchanged (`manage.py pgqueue worker --app
shop.jobs:app`, `manage.py pgqueue jobs list`), on the database of pgqueue.contrib.django.dsn()
(given to the command line as $PGQUEUE_DSN, never printed).
"""
from __future__ import annotations

import os
from importlib import import_module
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from pgqueue.contrib.django import dsn


class Command(BaseCommand):
    help = "Run a pgqueue command (pgqueue --help lists them) on the project's database."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("args", nargs="*", help="the pgqueue command and its arguments")

    def run_from_argv(self, argv: list[str]) -> None:
        # Everything after `pgqueue` is the pgqueue command line's, options included: Django's
        # own parser would take --help, -v or --settings for itself.
        run(argv[2:], prog_name=f"{os.path.basename(argv[0])} {argv[1]}")

    def handle(self, *args: Any, **options: Any) -> None:
        run(list(args), prog_name="manage.py pgqueue")


def run(args: list[str], *, prog_name: str) -> None:
    os.environ["PGQUEUE_DSN"] = dsn()
    import_module("pgqueue_cli").main.main(args=args, prog_name=prog_name)
