"""The App of bench/stock_server.py's latency phase: a job whose handler records, in the file
$PGQUEUE_BENCH_STARTS, its id and when it started."""
from __future__ import annotations

import os
import threading
import time

import pgqueue

app = pgqueue.App()
_lock = threading.Lock()


@app.job("timed")
def timed(job: pgqueue.JobContext) -> None:
    started = time.time()
    with _lock, open(os.environ["PGQUEUE_BENCH_STARTS"], "a") as out:
        out.write(f"{job.job_id} {started:.6f}\n")
