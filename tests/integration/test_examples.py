"""The examples that run against a database: examples/fastapi_app.py through FastAPI's test
client (its lifespan, its endpoint, a real Postgres)."""
from __future__ import annotations

import psycopg
import pytest
from fastapi.testclient import TestClient

import pgqueue


def test_the_fastapi_example_enqueues_in_the_orders_transaction(
        dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    import examples.fastapi_app

    monkeypatch.setenv("PGQUEUE_DSN", dsn)
    # again with this DSN: its dashboard is mounted at import (another test may have run it)
    app = importlib.reload(examples.fastapi_app).app

    with TestClient(app) as client:
        placed = client.post("/orders/7")
        assert placed.status_code == 200, placed.text
        job_id = placed.json()["job_id"]
        again = client.post("/orders/7")
        assert again.status_code == 409 and "order 7 exists" in again.text
        stats = client.get("/queue/api/stats").json()
        assert [(s["stream"], s["states"]["pending"]) for s in stats["streams"]] == [("orders", 1)]
        page = client.get("/queue/jobs?stream=orders")
        assert page.status_code == 200
        assert f'href="/queue/jobs/{job_id}"' in page.text  # links stay under the mount
        assert 'src="/queue/static/htmx.min.js"' in page.text
        assert client.get("/queue/static/htmx.min.js").status_code == 200
        assert client.post(f"/queue/api/jobs/{job_id}/cancel").status_code == 403  # read-only
        missing = client.get("/queue/api/nope")
        assert missing.status_code == 404 and missing.json()["error"] == "no such route: /api/nope"
    with psycopg.connect(dsn) as conn:
        assert [r[0] for r in conn.execute("SELECT number FROM orders")] == [7]
    with pgqueue.Queue(dsn, stream="orders") as q:
        jobs = q.jobs()
    assert [(j.job_id, j.kind) for j in jobs] == [(job_id, "invoice")]  # none for the duplicate
