"""pgqueue's roles on a Citus cluster: login roles made and granted on the coordinator reach
the workers, where the calls about their streams run as them, with the same privileges."""
from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql as pg_sql
from psycopg.conninfo import make_conninfo

import pgqueue
from pgqueue.db import access, connection, queries
from pgqueue.maintenance import maintain
from tests.citusbed import CitusBed, CitusDatabase, stream_group

LEVELS = ("none", "reader", "producer", "worker")


@pytest.fixture
def cdb(citus_bed: CitusBed) -> Iterator[CitusDatabase]:
    db = citus_bed.new_database()
    yield db
    citus_bed.drop(db)


def test_each_role_may_do_on_a_cluster_what_it_may_on_one_server(cdb: CitusDatabase) -> None:
    password = secrets.token_urlsafe(16)
    names = {who: f"pgqueue_c{os.getpid()}_{who}" for who in LEVELS}
    with psycopg.connect(cdb.dsn, autocommit=True) as conn:
        for who, name in names.items():
            conn.execute(pg_sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                pg_sql.Identifier(name), pg_sql.Literal(password)))
            if who != "none":
                queries.grant_role(conn, access.role_name(who), name)

    def as_(who: str) -> str:
        return make_conninfo(cdb.dsn, user=names[who], password=password)

    try:
        assert stream_group(cdb, "acl") in (1, 2)
        with pgqueue.Queue(as_("producer"), stream="acl") as q:
            job_id = q.enqueue(b"x")  # run on the stream's worker, as the producer
            with pytest.raises(pgqueue.PermissionDenied):
                q.lease(limit=1)
        with pgqueue.Queue(as_("worker"), stream="acl") as q:
            held = q.lease(limit=1)
            assert [h.job_id for h in held] == [job_id]
            q.ack(held[0])
        with connection.connect(as_("worker")) as conn:  # what `pgqueue maintain` runs
            result = maintain.run_pass(conn, vacuum=False)
        assert result.reclaimed_jobs == ()
        with pgqueue.Queue(as_("reader"), stream="acl") as q:
            assert q.stats() == []
            assert [op.op for op in q.op_log(job_id=job_id)] == ["Ack", "Lease", "Enqueue"]  # newest first
            with pytest.raises(pgqueue.PermissionDenied):
                q.enqueue(b"y")
        with pytest.raises(pgqueue.PgQueueError):
            with pgqueue.Queue(as_("none"), stream="acl") as q:
                q.enqueue(b"z")
    finally:
        with psycopg.connect(cdb.dsn, autocommit=True) as conn:
            for name in names.values():
                conn.execute(pg_sql.SQL("DROP OWNED BY {} CASCADE").format(
                    pg_sql.Identifier(name)))
                conn.execute(pg_sql.SQL("DROP ROLE IF EXISTS {}").format(pg_sql.Identifier(name)))
