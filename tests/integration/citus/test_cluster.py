"""The Citus test bed itself: Citus built from tests/citus/, a coordinator and two workers."""
from __future__ import annotations

import psycopg

from tests.citusbed import CITUS_VERSION, CitusDatabase


def test_cluster_runs_citus_with_two_workers(citus_db: CitusDatabase) -> None:
    with psycopg.connect(citus_db.dsn) as conn:
        version = conn.execute("SELECT citus_version()").fetchone()
        nodes = conn.execute("SELECT count(*) FROM pg_dist_node WHERE shouldhaveshards").fetchone()
    assert version is not None and f"Citus {CITUS_VERSION}" in version[0]
    assert nodes == (2,)
