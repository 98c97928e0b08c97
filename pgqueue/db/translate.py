"""Driver errors as pgqueue's errors: SQLSTATEs our functions raise, a lost connection, and a
refused call named with the pgqueue role it needs (read from access.sql's grants)."""
from __future__ import annotations

import re
from functools import cache

import psycopg
from psycopg import errors as pg_errors

from pgqueue.db.statements import Query, stage_text
from pgqueue.errors import (
    ConnectionFailed,
    Contention,
    DedupConflict,
    InvalidState,
    JobNotFound,
    NotLeader,
    PermissionDenied,
    PgQueueError,
    SchemaMissing,
)

_HOLDER = re.compile(r"holder=(\d+)")
#: SQLSTATEs meaning the server went away (shutdown, crash, terminated backend).
_CONNECTION_LOST = frozenset({"57P01", "57P02", "57P03", "57P05"})
#: A limit the user set ran out: (SQLSTATE: (what its message says, which setting to look at)).
_TIMED_OUT = {
    "57014": ("statement timeout",
              "the statement ran longer than statement_timeout allows (SHOW statement_timeout; "
              "set for the role, the database or the server); nothing was written"),
    "55P03": ("lock timeout",
              "a lock was held longer than lock_timeout allows (SHOW lock_timeout; set for "
              "the role, the database or the server); nothing was written"),
}


#: The pgqueue roles, each including the ones before it (pgqueue/sql/access.sql).
ROLES = ("pgqueue_reader", "pgqueue_producer", "pgqueue_worker", "pgqueue_operator")
_GRANT = re.compile(r"^GRANT (EXECUTE ON FUNCTION|SELECT ON ALL TABLES IN SCHEMA|USAGE ON SCHEMA)"
                    r"\s+(.*?)\s+TO (pgqueue_[a-z]+);", re.MULTILINE | re.DOTALL)
_DENIED = re.compile(r"permission denied for (function|table|view|schema|sequence|database) (\S+)")


@cache
def granted() -> dict[tuple[str, str], str]:
    """The lowest pgqueue role that may use each object, read from access.sql's grants:
    {("function", name): role, ("table", "*"): role, ("schema", "pgqueue"): role}."""
    found: dict[tuple[str, str], str] = {}
    for what, objects, role in _GRANT.findall(stage_text("access")):
        if what == "EXECUTE ON FUNCTION":
            for name in objects.split(","):
                found.setdefault(("function", name.strip().removeprefix("pgqueue.")), role)
        elif what.startswith("SELECT"):
            found.setdefault(("table", "*"), role)
        else:
            found.setdefault(("schema", objects.strip()), role)
    return found


def _denied(message: str, user: str | None, query: Query | None = None,
            hint: str | None = None) -> PermissionDenied:
    """A refused call (42501), saying which pgqueue role it needs and how to grant it, with
    Postgres's own words last. `query`: the named statement refused (a login without the
    schema's use is told the role that statement needs, not only a reader's)."""
    found = _DENIED.search(message)
    if found is None:  # one of ours (a pinned clock, the roles missing): its words say why
        return PermissionDenied(f"{message} ({hint})" if hint else message)
    kind, name = found.groups()
    who = f"the role {user}" if user else "the connected role"
    if kind == "database":
        return PermissionDenied(
            f"{who} may not create objects in the database {name}: only the pgqueue schema's "
            f"owner (the role that ran `pgqueue db upgrade` first) migrates it ({message})")
    if kind == "function":
        role = granted().get(("function", name))
    elif query is not None and query.writes:
        role = None  # a statement of the owner's own (a replica task, a migration)
    elif kind in ("table", "view", "schema"):
        # a reader's right; more when the statement calls a function a higher role has
        needs = [granted().get(("function", f)) for f in (query.functions if query else ())]
        roles: list[str | None] = [r for r in needs if r is not None] or [
            granted().get(("table", "*"))]
        role = max((r for r in roles if r is not None), key=ROLES.index, default=None)
    else:
        role = None
    what = {"function": f"call pgqueue.{name}", "table": f"use the table pgqueue.{name}",
            "view": f"read the view pgqueue.{name}", "schema": f"use the schema {name}",
            "sequence": f"use the sequence pgqueue.{name}"}[kind]
    if role is None:
        why = ("no pgqueue role writes a table: state changes through the transition functions "
               "(pgqueue.enqueue, pgqueue.cancel, ...), and the replica tasks and migrations "
               "are the schema owner's" if kind in ("table", "view") else
               "only the schema owner may")
        return PermissionDenied(f"{who} may not {what}: {why} ({message})", None)
    wider = ROLES[ROLES.index(role) + 1:]
    includes = "" if not wider else (
        f" ({wider[0]} includes it)" if len(wider) == 1 else
        f" ({', '.join(wider[:-1])} and {wider[-1]} include it)")
    return PermissionDenied(
        f"{who} may not {what}: that needs the pgqueue role {role}{includes}; an "
        f"administrator grants it: pgqueue db grant {role} --to {user or 'LOGIN'} ({message})",
        role)


def translate(exc: psycopg.Error, user: str | None = None, query: Query | None = None
              ) -> Exception:
    """Map a driver error to pgqueue's error classes (SQLSTATEs raised by our functions);
    `user`: the connected role, and `query` the statement, named when a call is refused."""
    state = getattr(exc.diag, "sqlstate", None) if isinstance(exc, psycopg.Error) else None
    message = (exc.diag.message_primary if exc.diag else None) or str(exc)
    if state == "42501":
        return _denied(message, user, query, exc.diag.message_hint if exc.diag else None)
    if state == "PQ404":
        return JobNotFound(message)
    if state == "PQ409":
        detail = exc.diag.message_detail or ""
        found = _HOLDER.search(detail)
        return DedupConflict(message, int(found.group(1)) if found else None)
    if state == "PQ422":
        return InvalidState(message)
    if state == "PQ401":
        return NotLeader(message)
    if state == "PQ413":  # a payload over its stream's limit: a bad argument, nothing written
        return ValueError(message)
    if state in ("40P01", "40001", "CIINF"):
        # CIINF: Citus lost an intermediate result of the statement's distributed transaction
        # (seen while a shard it read was split or moved): rolled back, to be run again
        return Contention(message)
    if state in _TIMED_OUT and _TIMED_OUT[state][0] in message:
        # the user's limit, not ours: rolled back like a conflict, named for what to look at
        return Contention(f"{message}: {_TIMED_OUT[state][1]}")
    if isinstance(exc, pg_errors.InvalidSchemaName | pg_errors.UndefinedTable | pg_errors.UndefinedFunction):
        return SchemaMissing(
            f"the pgqueue schema is missing or out of date ({message}); run `pgqueue db upgrade`"
        )
    if "statement pooling mode" in message:  # PgBouncer's refusal of a transaction block
        return PgQueueError(
            f"{message}: the DSN goes through a pooler in statement mode, which runs single "
            "statements only; this call needs a transaction (a caller's conn=, a maintenance "
            "pass, a migration): use transaction pooling or a direct DSN for it")
    if state:
        lost = state.startswith("08") or state in _CONNECTION_LOST or state == "25P03"
    else:
        lost = isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)
    if lost:
        if state == "25P03":
            message += (": the transaction stayed idle past idle_in_transaction_session_timeout "
                        "(SHOW idle_in_transaction_session_timeout; set for the role, the "
                        "database or the server)")
        return ConnectionFailed(f"lost the database connection: {message}",
                                retryable=state in _CONNECTION_LOST)
    return PgQueueError(message)
