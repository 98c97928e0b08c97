"""DSNs for people and for lists: a server's name without its password, and one or several
DSNs as a list. Pure (no I/O); connection.py re-exports these.
"""
from __future__ import annotations

import re
from collections.abc import Sequence

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo


def describe(dsn: str) -> str:
    """`host:port/dbname` of a DSN, for messages: it never includes the password."""
    try:
        parts = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<unparseable DSN>"
    host = str(parts.get("host") or parts.get("hostaddr") or "localhost")
    port = str(parts.get("port") or "5432")
    db = str(parts.get("dbname") or parts.get("user") or "")
    return f"{host}:{port}/{db}" if db else f"{host}:{port}"


#: The connection parameters that hold secrets: the password, and the passphrase of the
#: client's SSL key.
SECRETS = ("password", "sslpassword")


def redact(dsn: str) -> str:
    """The DSN with its secrets (SECRETS) removed, for showing to people and for storing
    where readers see it (a replica's row)."""
    try:
        parts = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<unparseable DSN>"
    for secret in SECRETS:
        parts.pop(secret, None)
    return " ".join(f"{k}={v}" for k, v in parts.items() if v is not None)


#: What a masked password shows as.
MASK = "***"

#: A secret in text about a DSN that may not parse: a URI's password (scheme://user:PASS@)
#: and a key=value pair's (password=..., quoted or not).
_URI_PASSWORD = re.compile(r"(://[^:/@\s\"']*:)[^@\s\"']*(@)")
_KV_SECRET = re.compile(r"\b(password|sslpassword)(\s*=\s*)('(?:[^'\\]|\\.)*'?|[^\s\"']+)",
                        re.IGNORECASE)


def hide_secrets(text: str) -> str:
    """`text` (a driver's message quoting a DSN it could not parse, say) with every password
    it may hold masked: what cannot be parsed cannot be redacted field by field."""
    return _KV_SECRET.sub(lambda m: f"{m[1]}{m[2]}{MASK}", _URI_PASSWORD.sub(rf"\1{MASK}\2", text))


def masked(dsn: str) -> str:
    """The DSN as key=value pairs with its password shown as ***, for people who need to see
    that one is set (`redact` drops it)."""
    try:
        parts = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<unparseable DSN>"
    for secret in SECRETS:
        if parts.get(secret) is not None:
            parts[secret] = MASK
    return make_conninfo("", **{k: v for k, v in parts.items() if v is not None})


def without_password(dsn: str) -> tuple[str, str | None]:
    """(the DSN without its password, the password or None): for a client started with the
    password in its environment, never on its command line (where `ps` shows it)."""
    parts = conninfo_to_dict(dsn)
    password = parts.pop("password", None)
    return make_conninfo("", **{k: v for k, v in parts.items() if v is not None}), (
        None if password is None else str(password))


def dsn_list(dsn: str | Sequence[str]) -> list[str]:
    """One DSN or several (a replica set): always a non-empty list."""
    if isinstance(dsn, str):
        dsns = [dsn]
    elif isinstance(dsn, list | tuple):
        dsns = list(dsn)
    else:
        raise TypeError(f"dsn must be a connection string or a list of them, got {type(dsn).__name__}")
    if not dsns or not all(isinstance(d, str) and d for d in dsns):
        raise TypeError("dsn must be a non-empty connection string or a list of them")
    return dsns
