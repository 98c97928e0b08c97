"""pgqueue for Django: add "pgqueue.contrib.django" to INSTALLED_APPS.

- The database: $PGQUEUE_DSN when set, else the Django database named by the setting
  PGQUEUE_DATABASE (default "default"), which must be PostgreSQL.
- `python manage.py pgqueue ...` runs any pgqueue command (`worker` included) with Django set
  up, so handlers can use the ORM.
- `queue(stream)` is a process-wide Queue on that database; enqueue in your transaction with
  `conn=django.db.connection` inside `transaction.atomic()` (pgqueue/db/callers.py).
"""
from __future__ import annotations

import os
import threading

from pgqueue.client.queue import Queue

__all__ = ["dsn", "queue"]

_queues: dict[str, Queue] = {}
_lock = threading.Lock()


def dsn() -> str:
    """The DSN of pgqueue's database: $PGQUEUE_DSN, else the Django database PGQUEUE_DATABASE."""
    env = os.environ.get("PGQUEUE_DSN")
    if env:
        return env
    from django.conf import settings
    from psycopg.conninfo import make_conninfo

    alias = getattr(settings, "PGQUEUE_DATABASE", "default")
    databases = settings.DATABASES
    if alias not in databases:
        raise ValueError(f"PGQUEUE_DATABASE names {alias!r}, which DATABASES does not have "
                         f"(it has {', '.join(sorted(databases)) or 'none'})")
    db = databases[alias]
    engine = str(db.get("ENGINE", ""))
    if "postgresql" not in engine:
        raise ValueError(f"pgqueue needs PostgreSQL; the Django database {alias!r} uses {engine}")
    parts = {"dbname": db.get("NAME"), "user": db.get("USER"), "password": db.get("PASSWORD"),
             "host": db.get("HOST"), "port": db.get("PORT")}
    options = {k: v for k, v in dict(db.get("OPTIONS") or {}).items()
               if k not in ("pool", "server_side_binding", "isolation_level", "assume_role")}
    return make_conninfo("", **{k: str(v) for k, v in {**parts, **options}.items()
                                if v not in (None, "")})


def queue(stream: str = "default") -> Queue:
    """The process's Queue of `stream` on pgqueue's database (opened on first use)."""
    with _lock:
        q = _queues.get(stream)
        if q is None:
            q = _queues[stream] = Queue(dsn(), stream)
        return q
