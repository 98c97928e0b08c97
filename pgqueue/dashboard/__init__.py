"""The web dashboard and the HTTP API under it (the `dashboard` extra), on AsyncQueue.
May import: core, db, client.

    from pgqueue.dashboard import create_app
    app = create_app(dsn, admin_token=None)   # an ASGI app: mount it, or `pgqueue dashboard`

Pages at /, /jobs, /jobs/{id}, /schedules, /workers, /replicas, JSON under /api/. It calls the
library (AsyncQueue), never SQL; every action is the transition the CLI runs, with its op.
"""
from __future__ import annotations

from pgqueue.dashboard.app import create_app

__all__ = ["create_app"]
