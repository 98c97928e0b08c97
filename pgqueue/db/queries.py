"""SQL's entry points for the sync code: named queries run through run.py, scripts, and the few
statements built with psycopg.sql (databases, subscriptions, VACUUM, GRANT).

The loader of pgqueue/sql/<stage>.sql is statements.py and the errors a statement raises are
translate.py; both are re-exported here, so a caller needs one import. Driver errors become
pgqueue's errors, so no other module imports psycopg's cursor API (and `pgqueue sql show NAME`
can print any statement for psql).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql as pg_sql

from pgqueue.db import run
from pgqueue.db.statements import (
    SCHEMA_STAGES,
    Params,
    Query,
    SchemaPart,
    catalog,
    code_sql,
    get,
    install_sql,
    schema_parts,
    trigger_statements,
    without_triggers,
)
from pgqueue.db.translate import ROLES, granted, translate

#: Re-exported: the loader (statements.py) and the errors (translate.py) through one import.
__all__ = ["ROLES", "SCHEMA_STAGES", "Conn", "Params", "Query", "SchemaPart", "catalog",
           "code_sql", "get", "granted", "install_sql", "schema_parts", "translate",
           "trigger_statements", "without_triggers"]

Conn = psycopg.Connection[Any]


def run_script(conn: Conn, script: str) -> None:
    """Execute a script of several statements (schema files: plpgsql bodies, no parameters)."""
    try:
        conn.execute(script.encode("utf-8"))
    except psycopg.Error as exc:
        raise translate(exc) from exc


def fetch(conn: Conn, name: str, params: Params = None) -> list[dict[str, Any]]:
    """Run a named query and return its rows as dicts (pgqueue/db/run.py executes it)."""
    return run.fetch(conn, name, params)


def fetch_shaped(conn: Conn, name: str, params: Params,
                 columns: Sequence[str]) -> list[tuple[Any, ...]]:
    """Run a named query and return its rows as tuples of `columns`, picked by name."""
    return run.fetch_shaped(conn, name, params, columns)


def fetch_each(conn: Conn, name: str, params: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Run a named query once per parameter set in one round trip; each one's rows as dicts."""
    return run.fetch_each(conn, name, params)


def fetch_one(conn: Conn, name: str, params: Params = None) -> dict[str, Any] | None:
    """Run a named query and return its first row, or None."""
    return run.fetch_one(conn, name, params)


def scalar(conn: Conn, name: str, params: Params = None) -> Any:
    """Run a named query and return the first column of its first row (None when no row)."""
    return run.scalar(conn, name, params)


def create_database(conn: Conn, name: str, *, template: str | None = None,
                    if_missing: bool = False) -> None:
    """CREATE DATABASE name [TEMPLATE template]; names go through psycopg.sql.Identifier."""
    if if_missing and scalar(conn, "database_exists", {"name": name}):
        return
    stmt = pg_sql.SQL("CREATE DATABASE {}").format(pg_sql.Identifier(name))
    if template is not None:
        stmt = pg_sql.SQL("{} TEMPLATE {}").format(stmt, pg_sql.Identifier(template))
    try:
        conn.execute(stmt)
    except psycopg.Error as exc:
        raise translate(exc) from exc


def drop_database(conn: Conn, name: str) -> None:
    """DROP DATABASE IF EXISTS name WITH (FORCE)."""
    stmt = pg_sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(pg_sql.Identifier(name))
    try:
        conn.execute(stmt)
    except psycopg.Error as exc:
        raise translate(exc) from exc


def create_subscription(conn: Conn, name: str, conninfo: str, publication: str) -> None:
    """CREATE SUBSCRIPTION name (slot of the same name, created now, not yet enabled, no
    initial copy: the caller seeds the replica in op-log order)."""
    stmt = pg_sql.SQL(
        "CREATE SUBSCRIPTION {} CONNECTION {} PUBLICATION {} WITH "
        "(copy_data = false, enabled = false, create_slot = true, slot_name = {})"
    ).format(pg_sql.Identifier(name), pg_sql.Literal(conninfo), pg_sql.Identifier(publication),
             pg_sql.Literal(name))
    _ddl(conn, stmt)


def alter_subscription(conn: Conn, name: str, action: str) -> None:
    """ALTER SUBSCRIPTION name ENABLE | DISABLE | SET (slot_name = NONE) ("detach")."""
    clauses = {"enable": "ENABLE", "disable": "DISABLE", "detach": "SET (slot_name = NONE)"}
    stmt = pg_sql.SQL("ALTER SUBSCRIPTION {} " + clauses[action]).format(
        pg_sql.Identifier(name))
    _ddl(conn, stmt)


def drop_subscription(conn: Conn, name: str) -> None:
    """DROP SUBSCRIPTION IF EXISTS name."""
    _ddl(conn, pg_sql.SQL("DROP SUBSCRIPTION IF EXISTS {}").format(pg_sql.Identifier(name)))


def _ddl(conn: Conn, stmt: pg_sql.Composed) -> None:
    try:
        conn.execute(stmt)
    except psycopg.Error as exc:
        raise translate(exc) from exc


def vacuum(conn: Conn, table: str) -> None:
    """VACUUM (ANALYZE) pgqueue.<table> (needs an autocommit connection)."""
    _ddl(conn, pg_sql.SQL("VACUUM (ANALYZE) {}").format(pg_sql.Identifier("pgqueue", table)))


def vacuum_full(conn: Conn, table: str, *, lock_timeout_ms: int) -> bool:
    """VACUUM FULL pgqueue.<table>, waiting at most `lock_timeout_ms` for its lock (an
    autocommit connection; its lock_timeout is restored after). False when the lock could not
    be had in time: nothing changed."""
    previous = scalar(conn, "setting_get", {"name": "lock_timeout"})
    fetch(conn, "setting_set", {"name": "lock_timeout", "value": f"{int(lock_timeout_ms)}ms"})
    try:
        conn.execute(pg_sql.SQL("VACUUM FULL {}").format(pg_sql.Identifier("pgqueue", table)))
    except psycopg.errors.LockNotAvailable:
        return False
    except psycopg.Error as exc:
        raise translate(exc) from exc
    finally:
        fetch(conn, "setting_set", {"name": "lock_timeout", "value": previous})
    return True


def grant_role(conn: Conn, role: str, login: str) -> None:
    """GRANT role TO login (both through psycopg.sql.Identifier; the caller checks `role`)."""
    _ddl(conn, grant_role_sql(role, login))


def grant_role_sql(role: str, login: str) -> pg_sql.Composed:
    """The statement `grant_role` runs."""
    return pg_sql.SQL("GRANT {} TO {}").format(pg_sql.Identifier(role), pg_sql.Identifier(login))


