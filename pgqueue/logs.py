"""Log records as JSON lines (`pgqueue worker --log-format json`), for log pipelines.

Each record is one JSON object: `ts` (UTC, ISO 8601), `level`, `logger`, `message` (the same
text as the plain format), and the record's structured fields when the worker gave some
(`extra={"pgqueue": {...}}`), named the same everywhere: event, stream, kind, job_id, attempt,
outcome, error, retry_at, lease_id, reason, count. An exception is reported as its type and
message, passwords masked; a payload is never part of a record.
"""
from __future__ import annotations

import datetime as dt
import json
import logging
from typing import Any


class JsonFormatter(logging.Formatter):
    """One JSON object per record."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.timezone.utc).isoformat(
                timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "pgqueue", None)
        if isinstance(fields, dict):
            data.update({k: v for k, v in fields.items() if k not in data})
        if record.exc_info and record.exc_info[1] is not None:
            from pgqueue.handlers import error_summary

            data["exception"] = error_summary(record.exc_info[1])
        return json.dumps(data, ensure_ascii=False, default=str)
