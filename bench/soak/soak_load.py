"""The chaos soak's producers: threads that enqueue through the DSN list and keep their own
record of what they enqueued, one JSON-lines file each (never the queue database).

Modes, one producer each:
- single: `Queue.enqueue`, one job per call;
- batch: `Queue.enqueue_many`, 2-8 jobs per call;
- txn: `Queue.enqueue(conn=...)` inside the producer's own transaction, 1-3 jobs, rolled back
  on purpose about a third of the time;
- dedup: `Queue.enqueue(dedup_key=...)` over a small pool of keys.

Records (`ev`): "ok" (the call returned ids: committed), "rolled_back" (COMMIT was never sent:
the ids and tags must not exist), "uncertain" (the call or the COMMIT failed: it may or may
not have committed; resolved from the op log by tag). Every payload carries a unique `tag`.
"""
from __future__ import annotations

import json
import os
import random
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

import pgqueue
from pgqueue.db import connection
from pgqueue.errors import PgQueueError

MODES = ("single", "batch", "txn", "dedup")
ROLLBACK_SHARE = 0.35


def job_spec(rng: random.Random, tag: str) -> pgqueue.NewJob:
    """A random job: plain (some fail and are retried, a few die, some are slow) or steps."""
    if rng.random() < 0.3:
        payload = {"tag": tag, "items": rng.randint(4, 8), "sleep": rng.choice([0.05, 0.1, 0.2])}
        return pgqueue.NewJob(json.dumps(payload), kind="steps")
    fail = rng.choice([0, 0, 0, 0, 0, 0, 1, 1, 2])
    max_attempts = 25
    if rng.random() < 0.05:
        fail, max_attempts = 5, 2  # dead-lettered after two failures
    sleep = rng.choice([0.01, 0.02, 0.05]) if rng.random() > 0.1 else rng.uniform(2.0, 3.5)
    payload = {"tag": tag, "fail": fail, "sleep": round(sleep, 3)}
    return pgqueue.NewJob(json.dumps(payload), kind="plain", max_attempts=max_attempts)


class Producer(threading.Thread):
    """One producer thread; `stop` ends it after its current call."""

    def __init__(self, index: int, mode: str, dsns: list[str], stream: str, seed: int,
                 out: Path, stop: threading.Event, pace: float) -> None:
        super().__init__(name=f"producer-{mode}", daemon=True)
        self.index, self.mode, self.dsns, self.stream = index, mode, dsns, stream
        self.rng = random.Random(seed * 1000 + index)
        self.path = out / f"producer-{index}-{mode}.jsonl"
        self.stop_event = stop
        self.pace = pace
        self.counter = 0
        self.counts: dict[str, int] = {}
        self.error: BaseException | None = None
        self._leader: str | None = None

    def _tag(self) -> str:
        self.counter += 1
        return f"p{self.index}-{self.counter}"

    def _write(self, fh: Any, ev: str, **fields: Any) -> None:
        self.counts[ev] = self.counts.get(ev, 0) + 1
        fh.write(json.dumps({"ev": ev, "mode": self.mode, **fields}) + "\n")
        fh.flush()
        os.fsync(fh.fileno())

    def run(self) -> None:
        try:
            with open(self.path, "a") as fh, pgqueue.Queue(self.dsns, stream=self.stream,
                                                           pool_size=2) as q:
                while not self.stop_event.is_set():
                    self._once(q, fh)
                    self.stop_event.wait(self.rng.uniform(0.5, 1.5) * self.pace)
        except BaseException as exc:
            self.error = exc

    def _once(self, q: pgqueue.Queue, fh: Any) -> None:
        rng = self.rng
        if self.mode == "txn":
            self._transaction(q, fh)
            return
        if self.mode == "batch":
            jobs = [job_spec(rng, self._tag()) for _ in range(rng.randint(2, 8))]
        else:
            jobs = [job_spec(rng, self._tag())]
        tags = [json.loads(j.payload)["tag"] for j in jobs]
        key = f"dedup-{self.index}-{rng.randrange(6)}" if self.mode == "dedup" else None
        try:
            if self.mode == "batch":
                ids = q.enqueue_many(jobs)
            else:
                j = jobs[0]
                ids = [q.enqueue(j.payload, kind=j.kind, max_attempts=j.max_attempts,
                                 dedup_key=key)]
        except PgQueueError as exc:
            self._write(fh, "uncertain", tags=tags, dedup=key, error=repr(exc)[:300])
            time.sleep(0.2)
            return
        self._write(fh, "ok", ids=ids, tags=tags, dedup=key)

    def _transaction(self, q: pgqueue.Queue, fh: Any) -> None:
        rng = self.rng
        jobs = [job_spec(rng, self._tag()) for _ in range(rng.randint(1, 3))]
        tags = [json.loads(j.payload)["tag"] for j in jobs]
        ids: list[int] = []
        commit_sent = False
        try:
            if self._leader is None:
                self._leader = connection.find_leader(self.dsns)
            with connection.connect(self._leader, autocommit=False, connect_timeout=3) as conn:
                try:
                    conn.execute("SELECT 1")  # a business write would go here
                    for j in jobs:
                        ids.append(q.enqueue(j.payload, kind=j.kind,
                                             max_attempts=j.max_attempts, conn=conn))
                    if rng.random() < ROLLBACK_SHARE:
                        conn.rollback()
                        self._write(fh, "rolled_back", ids=ids, tags=tags, why="on purpose")
                        return
                    commit_sent = True
                    conn.commit()
                finally:
                    if not commit_sent:
                        conn.rollback()
        except (PgQueueError, psycopg.Error) as exc:
            self._leader = None
            if commit_sent:
                self._write(fh, "uncertain", ids=ids, tags=tags, error=repr(exc)[:300])
            else:
                self._write(fh, "rolled_back", ids=ids, tags=tags, why=repr(exc)[:300])
            time.sleep(0.2)
            return
        self._write(fh, "ok", ids=ids, tags=tags, dedup=None)


def start_producers(dsns: list[str], stream: str, seed: int, out: Path, stop: threading.Event,
                    pace: float) -> list[Producer]:
    producers = [Producer(i, mode, dsns, stream, seed, out, stop, pace)
                 for i, mode in enumerate(MODES)]
    for p in producers:
        p.start()
    return producers
