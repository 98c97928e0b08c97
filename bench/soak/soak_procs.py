"""The chaos soak's long-running child processes (bench/soak/soak.py starts and kills them).

    python bench/soak/soak_procs.py worker --dsn LEADER --dsn REPLICA [--concurrency N ...]
    python bench/soak/soak_procs.py scheduler --dsn LEADER --dsn REPLICA [--interval S]

`worker` runs pgqueue.Worker on the soak App (tests/acceptance/soak_app.py) given the DSN list
(the `pgqueue worker` command takes one DSN; the soak's workers must move from the leader to
the promoted replica). `scheduler` runs pgqueue's maintenance passes (maintain.run_pass:
reclaim expired leases, fire due cron ticks, prune) on the database in leader role, every
--interval seconds, without the election, so several schedulers really race for
the same ticks; it finds the leader again when its database turns out to be a replica and
reconnects when the connection is lost. Both log to stderr; SIGTERM stops them.
"""
from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pgqueue
from pgqueue.db import connection, queries
from pgqueue.errors import PgQueueError
from pgqueue.maintenance import maintain
from tests.acceptance import soak_app

log = logging.getLogger("soak.scheduler")


def run_worker(args: argparse.Namespace) -> int:
    pgqueue.Worker(
        soak_app.app, args.dsn, streams=[args.stream], concurrency=args.concurrency,
        visibility_timeout=args.visibility_timeout, renew_interval=args.renew_interval,
        poll_interval=args.poll_interval, maintenance_interval=args.maintenance_interval,
        grace_period=args.grace_period, node=args.node).run()
    return 0


def run_scheduler(args: argparse.Namespace) -> int:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    conn: queries.Conn | None = None
    passes = fired = 0
    while not stop.is_set():
        try:
            if conn is None or conn.closed:
                dsn = connection.find_leader(args.dsn)
                conn = connection.connect(dsn, connect_timeout=3)
                connection.check_schema(conn)
                log.info("scheduler: passes on %s", connection.describe(dsn))
            result = maintain.run_pass(conn)
            passes += 1
            fired += result.schedules_fired
            if not result.leader and len(args.dsn) > 1:
                # demoted by a failover: find the new leader (as a worker's maintainer does)
                log.info("scheduler: %s is a replica now", connection.describe(dsn))
                conn.close()
                conn = None
        except PgQueueError as exc:
            log.warning("scheduler: pass failed: %s", exc)
            if conn is not None:
                try:
                    conn.close()
                except Exception:
                    log.debug("close failed", exc_info=True)
            conn = None
        stop.wait(args.interval)
    log.info("scheduler: %d pass(es), %d tick(s) fired", passes, fired)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(prog="soak_procs", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what", required=True)
    w = sub.add_parser("worker")
    w.add_argument("--dsn", action="append", required=True)
    w.add_argument("--stream", default="soak")
    w.add_argument("--concurrency", type=int, default=4)
    w.add_argument("--visibility-timeout", type=float, default=2.0)
    w.add_argument("--renew-interval", type=float, default=0.5)
    w.add_argument("--poll-interval", type=float, default=0.5)
    w.add_argument("--maintenance-interval", type=float, default=0.5)
    w.add_argument("--grace-period", type=float, default=5.0)
    w.add_argument("--node", type=int, default=0,
                   help="recorded on every lease: the soak gives each process its own")
    s = sub.add_parser("scheduler")
    s.add_argument("--dsn", action="append", required=True)
    s.add_argument("--interval", type=float, default=0.4)
    args = p.parse_args()
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(process)d %(threadName)s %(name)s %(levelname)s "
                               "%(message)s")
    logging.getLogger("psycopg").setLevel(logging.WARNING)
    return run_worker(args) if args.what == "worker" else run_scheduler(args)


if __name__ == "__main__":
    sys.exit(main())
