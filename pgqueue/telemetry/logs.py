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
import re
from typing import Any

from pgqueue import failures

#: How much of an error's message a log line shows (the job's last_error keeps the traceback).
MAX_LOGGED_ERROR_CHARS = 300

# A password in a message: `password=...` (libpq keywords, PGPASSWORD) and URL user info.
_PASSWORD = re.compile(r"(?i)(passw(?:or)?d|pwd)(\s*[=:]\s*)('[^']*'|\"[^\"]*\"|[^\s,;&)]+)")
_URL_PASSWORD = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s:/@]*):[^\s@/]*@")


def error_summary(exc: BaseException) -> str:
    """`Type: message` of an exception for a log line: one line, passwords masked, at most
    MAX_LOGGED_ERROR_CHARS."""
    kind = failures.exception_name(exc)
    message = str(exc)[:4 * MAX_LOGGED_ERROR_CHARS]
    message = _PASSWORD.sub(r"\1\2***", _URL_PASSWORD.sub(r"\1:***@", message))
    return failures.one_line(f"{kind}: {message}" if message.strip() else kind,
                             MAX_LOGGED_ERROR_CHARS)


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
            data["exception"] = error_summary(record.exc_info[1])
        return json.dumps(data, ensure_ascii=False, default=str)
