"""The exit codes scripts can trust, and how `pgqueue --help` documents them: a module of its
own so the help needs nothing else (common.py re-exports them to every command)."""
from __future__ import annotations

#: Exit codes scripts can trust (also documented in `pgqueue --help`).
EXIT_OK = 0
EXIT_FAILED = 1  # not found, refused (dedup conflict, lease lost, replica), any other queue error
EXIT_USAGE = 2  # bad option or argument: click's own checks and pgqueue's argument checks
EXIT_UNAVAILABLE = 3  # cannot connect, or the schema is missing / older / newer than the library

EXIT_CODES_HELP = (
    "\b\nExit codes:\n"
    "  0  success\n"
    "  1  not found, or the operation was refused (e.g. dedup conflict)\n"
    "  2  usage error: a bad option or argument\n"
    "  3  cannot connect to Postgres, or its pgqueue schema is missing or too new\n"
    "Errors are one line on stderr (pgqueue: error: ...); PGQUEUE_DEBUG=1 also prints\n"
    "the traceback (the exit code stays the same).\n"
)
