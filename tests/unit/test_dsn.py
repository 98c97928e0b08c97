"""Showing and storing DSNs (pgqueue/db/dsn.py): no secret survives redact, masked shows that
one is set. A replica's row keeps redact's form, and every reader may read that row."""
from __future__ import annotations

from psycopg.conninfo import conninfo_to_dict

from pgqueue.db import dsn

FULL = ("host=db port=5433 dbname=app user=jobs password=s3cret-pw sslmode=require "
        "sslkey=/keys/client.key sslpassword=key-passphrase")


def test_redact_drops_the_password_and_the_ssl_key_passphrase() -> None:
    shown = dsn.redact(FULL)
    assert "s3cret-pw" not in shown and "key-passphrase" not in shown
    assert conninfo_to_dict(shown) == {"host": "db", "port": "5433", "dbname": "app",
                                       "user": "jobs", "sslmode": "require",
                                       "sslkey": "/keys/client.key"}
    url = dsn.redact("postgresql://jobs:s3cret-pw@db/app?sslpassword=key-passphrase")
    assert "s3cret-pw" not in url and "key-passphrase" not in url and "user=jobs" in url


def test_masked_shows_each_secret_as_set_without_its_value() -> None:
    parts = conninfo_to_dict(dsn.masked(FULL))
    assert parts["password"] == dsn.MASK and parts["sslpassword"] == dsn.MASK
    assert parts["sslkey"] == "/keys/client.key"
    assert "password" not in conninfo_to_dict(dsn.masked("host=db dbname=app"))
