"""Transactional enqueue on what callers hold (`conn=`): a psycopg Connection, a SQLAlchemy 2
Connection or Session on the psycopg dialect, Django's connection inside
transaction.atomic(). The business row and the job commit together or not at all; anything
else is refused with a TypeError naming `conn`. Real SQLAlchemy, real Django (in a
subprocess: its settings are per process), real Postgres."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa
from psycopg.conninfo import conninfo_to_dict
from sqlalchemy.orm import Session

import pgqueue

REPO = Path(__file__).resolve().parents[3]


def engine_for(dsn: str) -> sa.Engine:
    parts = {k: str(v) for k, v in conninfo_to_dict(dsn).items() if v is not None}
    url = sa.URL.create("postgresql+psycopg", username=parts.get("user"),
                        password=parts.get("password"), host=parts.get("host"),
                        port=int(parts["port"]) if "port" in parts else None,
                        database=parts.get("dbname"))
    return sa.create_engine(url)


@pytest.fixture
def engine(dsn: str) -> Iterator[sa.Engine]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY)")
    e = engine_for(dsn)
    yield e
    e.dispose()


def orders(dsn: str) -> list[int]:
    with psycopg.connect(dsn) as conn:
        return [r[0] for r in conn.execute("SELECT id FROM orders ORDER BY id")]


def job_payloads(q: pgqueue.Queue) -> list[bytes]:
    return sorted(j.payload for j in q.jobs())


INSERT = sa.text("INSERT INTO orders (id) VALUES (:id)")


def test_a_sqlalchemy_connection_commits_the_row_and_the_job_together(
        dsn: str, q: pgqueue.Queue, engine: sa.Engine) -> None:
    with engine.begin() as c:
        c.execute(INSERT, {"id": 1})
        q.enqueue(b"order 1", conn=c)
        q.enqueue_many([pgqueue.NewJob(b"order 1 mail")], conn=c)
        assert job_payloads(q) == [], "visible before the caller committed"
    assert orders(dsn) == [1]
    assert job_payloads(q) == [b"order 1", b"order 1 mail"]


def test_a_sqlalchemy_connection_rolled_back_leaves_neither(
        dsn: str, q: pgqueue.Queue, engine: sa.Engine) -> None:
    with engine.connect() as c:
        c.execute(INSERT, {"id": 2})
        q.enqueue(b"order 2", conn=c)
        c.rollback()
    assert orders(dsn) == [] and job_payloads(q) == []


def test_an_enqueue_first_on_a_fresh_sqlalchemy_connection_commits_with_it(
        dsn: str, q: pgqueue.Queue, engine: sa.Engine) -> None:
    """Commit as you go: the enqueue is the connection's first statement. SQLAlchemy begins
    its transaction at its own first statement, so pgqueue begins it: else commit() would be
    a no-op and closing the connection would roll the job back."""
    with engine.connect() as c:
        q.enqueue(b"first", conn=c)
        c.execute(INSERT, {"id": 3})
        c.commit()
    assert orders(dsn) == [3] and job_payloads(q) == [b"first"]


def test_a_sqlalchemy_session_commits_or_rolls_back_the_row_and_the_job(
        dsn: str, q: pgqueue.Queue, engine: sa.Engine) -> None:
    app = pgqueue.App()
    app.job("mail", max_attempts=3)(lambda job: None)
    with Session(engine) as session:
        session.execute(INSERT, {"id": 4})
        q.enqueue(b"order 4", conn=session)
        mail = app.enqueue(q, "mail", b"order 4 mail", conn=session)  # the handler's defaults
        session.commit()
    with Session(engine) as session:
        q.enqueue(b"never", conn=session)
        session.execute(INSERT, {"id": 5})
        session.rollback()
    assert orders(dsn) == [4]
    assert job_payloads(q) == [b"order 4", b"order 4 mail"]
    info = q.job(mail)
    assert info is not None and info.max_attempts == 3


def test_other_connections_are_refused_naming_conn_and_what_is_accepted(
        dsn: str, q: pgqueue.Queue) -> None:
    sqlite = sa.create_engine("sqlite://")
    try:
        with sqlite.connect() as c:
            with pytest.raises(TypeError, match=r"conn must be .*driver is pysqlite"):
                q.enqueue(b"x", conn=c)
        with pytest.raises(TypeError, match=r"conn must be a psycopg.Connection.*got builtins.str"):
            q.enqueue(b"x", conn="dbname=x")
        with pytest.raises(TypeError, match=r"conn must be .*got builtins.object"):
            q.enqueue_many([pgqueue.NewJob(b"x")], conn=object())
        async def connect() -> psycopg.AsyncConnection[object]:
            return await psycopg.AsyncConnection.connect(dsn)

        loop = asyncio.new_event_loop()
        async_conn = loop.run_until_complete(connect())
        with pytest.raises(TypeError, match=r"conn must be .*async connection needs an async API"):
            q.enqueue(b"x", conn=async_conn)
        loop.run_until_complete(async_conn.close())
        loop.close()
    finally:
        sqlite.dispose()
    assert job_payloads(q) == []


DJANGO_SCRIPT = textwrap.dedent("""
    import json, sys
    import django
    from django.conf import settings
    from psycopg.conninfo import conninfo_to_dict

    dsn = sys.argv[1]
    p = conninfo_to_dict(dsn)
    settings.configure(DATABASES={"default": {
        "ENGINE": "django.db.backends.postgresql", "NAME": p["dbname"], "USER": p.get("user", ""),
        "PASSWORD": p.get("password", ""), "HOST": p.get("host", ""), "PORT": p.get("port", "")}})
    django.setup()
    from django.db import connection, transaction
    import pgqueue

    out = {}
    with pgqueue.Queue(dsn) as q:
        with transaction.atomic():
            with connection.cursor() as cur:
                cur.execute("INSERT INTO orders (id) VALUES (10)")
            out["committed_id"] = q.enqueue(b"django order 10", conn=connection)

        class Boom(Exception):
            pass

        try:
            with transaction.atomic():
                with connection.cursor() as cur:
                    cur.execute("INSERT INTO orders (id) VALUES (11)")
                q.enqueue(b"django order 11", conn=connection)
                raise Boom()
        except Boom:
            pass
        try:
            q.enqueue(b"outside atomic", conn=connection)
        except TypeError as exc:
            out["outside_atomic"] = str(exc)
        out["driver"] = type(connection.connection).__module__
    print(json.dumps(out))
""")


def test_django_connection_inside_atomic_commits_or_rolls_back_with_the_row(
        dsn: str, q: pgqueue.Queue, tmp_path: Path) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY)")
    script = tmp_path / "django_enqueue.py"
    script.write_text(DJANGO_SCRIPT)
    run = subprocess.run([sys.executable, str(script), dsn], cwd=REPO, capture_output=True,
                         text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert orders(dsn) == [10]
    assert job_payloads(q) == [b"django order 10"]
    assert q.job(out["committed_id"]) is not None
    assert "conn must be" in out["outside_atomic"] and "transaction.atomic()" in out["outside_atomic"]
    assert out["driver"].startswith("psycopg")
