"""`pgqueue.logs.JsonFormatter`, where the docs have always documented it (the formatter lives
in pgqueue/telemetry/logs.py)."""
from __future__ import annotations

from pgqueue.telemetry.logs import JsonFormatter

__all__ = ["JsonFormatter"]
