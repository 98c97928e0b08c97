"""Run one pgqueue worker process: the acceptance tests' stand-in for `pgqueue worker`.

    python tests/acceptance/run_worker.py [--dsn DSN] --app tests.acceptance.worker_app:app \
        [--stream S]... [--concurrency N] [--visibility-timeout SEC] [--renew-interval SEC] \
        [--poll-interval SEC] [--maintenance-interval SEC] [--grace-period SEC] [--node N] \
        [--no-maintenance] [--prefetch N]

Same flags as `pgqueue worker` (--dsn defaults to $PGQUEUE_DSN, as with the CLI). It builds
a pgqueue.Worker, logs to stderr and calls run(); on SIGTERM/SIGINT the worker drains and
this exits 0. Run it from the repository root: like `python -m`, it puts the current
directory on sys.path so `--app` modules import.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence

import pgqueue


def load_app(spec: str) -> pgqueue.App:
    """`module:attr` -> the App it names."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise SystemExit(f"--app must be MODULE:ATTR, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    app = getattr(importlib.import_module(module_name), attr)
    if not isinstance(app, pgqueue.App):
        raise SystemExit(f"--app {spec}: not a pgqueue.App but {type(app).__name__}")
    return app


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="run_worker", description=__doc__.splitlines()[0])
    p.add_argument("--dsn", default=os.environ.get("PGQUEUE_DSN") or None,
                   required=not os.environ.get("PGQUEUE_DSN"),
                   help="libpq connection string [default: $PGQUEUE_DSN]")
    p.add_argument("--app", required=True, help="MODULE:ATTR of a pgqueue.App")
    p.add_argument("--stream", action="append", dest="streams", default=None)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--visibility-timeout", type=float, default=30.0)
    p.add_argument("--renew-interval", type=float, default=None)
    p.add_argument("--poll-interval", type=float, default=1.0)
    p.add_argument("--maintenance-interval", type=float, default=1.0)
    p.add_argument("--grace-period", type=float, default=30.0)
    p.add_argument("--node", type=int, default=0)
    p.add_argument("--no-maintenance", action="store_true")
    p.add_argument("--prefetch", type=int, default=None)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO,
        format="%(asctime)s %(process)d %(threadName)s %(name)s %(levelname)s %(message)s")
    worker = pgqueue.Worker(
        load_app(args.app), args.dsn, streams=args.streams or ["default"],
        concurrency=args.concurrency, visibility_timeout=args.visibility_timeout,
        renew_interval=args.renew_interval, poll_interval=args.poll_interval,
        maintenance_interval=args.maintenance_interval, maintenance=not args.no_maintenance,
        grace_period=args.grace_period, node=args.node,
        **({} if args.prefetch is None else {"prefetch": args.prefetch}))
    worker.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
