"""`pgqueue db check`: what of the server a DSN reaches matters to the queue, each with a verdict.

The settings are read as the connecting role's session sees them (the role's and the
database's own settings included), which is what pgqueue's connections get: run it with the
DSN the workers use. The rules are here, apart from reading (`check(dsn)`), so each verdict is
tested on its own: `ok` (nothing to do), `warn` (works, at a cost said), `fail` (something
breaks; the command exits 1).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pgqueue.db import connection, pool, run
from pgqueue.errors import PermissionDenied, SchemaMissing

#: The oldest server pgqueue runs on (pg_current_xact_id, DROP DATABASE ... FORCE: 13), and
#: the oldest the suite tests (Debian 12's PostgreSQL 15; the embedded wheel's is 18).
OLDEST_VERSION = 130000
OLDEST_TESTED = 150000
#: A statement_timeout or lock_timeout below this cancels calls under ordinary load (a lease
#: waiting on a kind's lock, the first call of a new connection, a maintenance pass).
SHORT_TIMEOUT_MS = 1000
#: Connections a worker opens beside its handler slots: the lease loop, the acker, the
#: listener, the maintenance runner and its vacuum connection.
WORKER_EXTRA_CONNECTIONS = 5
#: Share of the usable connections past which the check warns.
BUSY_SHARE = 0.8
#: The revision from which no hot statement is JIT-compiled (0021).
JIT_SAFE_REVISION = 21

VERDICTS = ("ok", "warn", "fail")


@dataclass(frozen=True)
class Finding:
    """One line of the check: what, its value here, the verdict, and why."""

    name: str
    value: str
    verdict: str
    why: str


def _ms(text: str, ms: int | None) -> str:
    return "off" if not ms else text


def judge(server: dict[str, Any], schema: dict[str, Any] | None, *, pooled: bool,
          expected_connections: int = 0, unreadable: str | None = None) -> list[Finding]:
    """The findings for what `server_check` (and `server_check_schema`, None without the
    schema) read; `pooled`: a pooler stands between; `expected_connections`: connections the
    caller's pools will add to those open now; `unreadable`: why the schema could not be
    read (the role has no pgqueue role)."""
    found: list[Finding] = []
    add = found.append
    version = int(server["version_num"])
    add(Finding("server version", str(server["version"]),
                "fail" if version < OLDEST_VERSION else "warn" if version < OLDEST_TESTED
                else "ok",
                f"pgqueue needs PostgreSQL {OLDEST_VERSION // 10000} or later"
                if version < OLDEST_VERSION else
                f"runs, but the suite tests {OLDEST_TESTED // 10000} and later"
                if version < OLDEST_TESTED else "supported"))
    revision = None if schema is None else schema["revision"]
    ours = int(connection.SCHEMA_REVISION)
    add(Finding("pgqueue schema",
                "unreadable" if unreadable else "none" if revision is None
                else f"revision {revision}",
                "fail" if revision is None or int(revision) < ours else "ok",
                unreadable if unreadable else
                "run `pgqueue db upgrade`" if revision is None else
                f"older than this library's {connection.SCHEMA_REVISION}: run `pgqueue db "
                f"upgrade`" if int(revision) < ours else "current"))
    jit_on = server["jit"] == "on" and bool(server["jit_available"])
    add(Finding("jit", (f"on, above cost {server['jit_above_cost']:g} (inline "
                        f"{server['jit_inline_above_cost']:g}, optimize "
                        f"{server['jit_optimize_above_cost']:g})") if jit_on else
                ("on, not available (no llvmjit)" if server["jit"] == "on" else "off"),
                "fail" if jit_on and revision is not None
                and int(revision) < JIT_SAFE_REVISION else "ok",
                f"before revision {JIT_SAFE_REVISION:04d} every lease was JIT-compiled (about "
                f"140 ms a lease): upgrade" if jit_on and revision is not None
                and int(revision) < JIT_SAFE_REVISION else
                "pgqueue's hot statements are planned below the thresholds or turn JIT off"
                if jit_on else "nothing is compiled"))
    timeouts = server["timeouts_ms"] or {}
    for name, what in (("statement_timeout", "a lease under load, a big batch or a "
                                             "maintenance pass is cancelled"),
                       ("lock_timeout", "a call waiting for a kind's lock or a job's row "
                                        "is cancelled")):
        ms = int(timeouts.get(name) or 0)
        short = 0 < ms < SHORT_TIMEOUT_MS
        add(Finding(name, _ms(str(server[name]), ms), "warn" if short else "ok",
                    f"shorter than {SHORT_TIMEOUT_MS} ms: {what} (pgqueue's error names it, a "
                    f"worker retries; migrations set none of their own)" if short else
                    "pgqueue's calls are single short statements" if ms else "no limit"))
    idle_tx = int(timeouts.get("idle_in_transaction_session_timeout") or 0)
    add(Finding("idle_in_transaction_session_timeout",
                _ms(str(server["idle_in_transaction_session_timeout"]), idle_tx), "ok",
                "pgqueue holds no transaction open while idle; a caller's transaction "
                "(conn=) that idles past it loses its connection" if idle_tx else "no limit"))
    idle = int(timeouts.get("idle_session_timeout") or 0)
    add(Finding("idle_session_timeout",
                _ms(str(server["idle_session_timeout"] or "0"), idle), "warn" if idle else "ok",
                "the server closes pooled connections idle that long; each fails once on its "
                "next use and the call is retried" if idle else "no limit"))
    isolation = str(server["default_transaction_isolation"])
    rc = isolation == "read committed"
    add(Finding("default_transaction_isolation", isolation,
                "ok" if rc else "fail" if pooled else "warn",
                "what pgqueue's calls need" if rc else
                "behind a pooler pgqueue sets no session setting: leases of kinds with limits "
                "fail, other calls may conflict; ALTER ROLE ... SET "
                "default_transaction_isolation = 'read committed'" if pooled else
                "pgqueue's own connections set READ COMMITTED; callers' transactions (conn=) "
                "run at their own level"))
    add(Finding("search_path", str(server["search_path"]), "ok",
                "pgqueue names its schema in every statement and pins its functions' path"))
    logical = 0 if schema is None else int(schema["logical_replicas"])
    wal_ok = server["wal_level"] == "logical"
    add(Finding("wal_level", str(server["wal_level"]),
                "fail" if logical and not wal_ok else "ok",
                f"{logical} logical replica(s) attached need wal_level = logical" if logical
                and not wal_ok else "logical replicas can attach" if wal_ok else
                "no logical replica attached (one needs wal_level = logical; a follower "
                "needs nothing)"))
    add(Finding("pooler", "between" if pooled else "none",
                "warn" if pooled else "ok",
                "transaction pooling assumed: no statement prepared, no session setting; "
                "workers wake on NOTIFY only with --listen-dsn (a direct DSN), else they poll"
                if pooled else "a direct connection to the server"))
    usable = int(server["max_connections"]) - int(server["reserved_connections"])
    now = int(server["connections"])
    workers = 0 if schema is None else int(schema["live_workers"])
    slots = 0 if schema is None else int(schema["live_slots"])
    want = now + expected_connections
    add(Finding("max_connections",
                f"{server['max_connections']} ({usable} usable); {now} open, "
                f"{workers} live worker(s) with {slots} handler slots"
                + (f", {expected_connections} more expected" if expected_connections else ""),
                "fail" if want > usable else "warn" if want > BUSY_SHARE * usable else "ok",
                f"{want} connections would not fit" if want > usable else
                f"over {BUSY_SHARE:.0%} of the usable connections: a worker opens up to "
                f"its handler slots + {WORKER_EXTRA_CONNECTIONS}" if want > BUSY_SHARE * usable
                else f"room for {usable - want} more (a worker opens up to its handler slots "
                     f"+ {WORKER_EXTRA_CONNECTIONS})"))
    return found


def check(dsn: str, *, expected_connections: int = 0, pooled: bool | None = None,
          connect_timeout: float | None = None) -> list[Finding]:
    """Read the server at `dsn` and judge it (see `judge`)."""
    with connection.connect(dsn, connect_timeout=connect_timeout) as conn:
        server = run.fetch_one(conn, "server_check")
        assert server is not None
        schema, unreadable = None, None
        try:
            schema = run.fetch_one(conn, "server_check_schema")
        except SchemaMissing:
            pass
        except PermissionDenied as exc:
            unreadable = str(exc)
        behind = pool.behind_pooler(conn) if pooled is None else pooled
    return judge(server, schema, pooled=behind, expected_connections=expected_connections,
                 unreadable=unreadable)
