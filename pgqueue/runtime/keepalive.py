"""The worker's background threads, kept alive: a loop that raises is logged with its
traceback and run again after a pause, so no thread of a worker dies of an unexpected error;
a loop that returns ends its thread."""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from pgqueue.runtime.leasing import RESTART_SECONDS

log = logging.getLogger("pgqueue.worker")


def start(name: str, loop: Callable[[], None], worker_id: Callable[[], int]) -> threading.Thread:
    """Start a daemon thread `pgqueue-<name>` running `loop`, restarted when it raises
    (each loop catches what it expects)."""
    def keep_alive() -> None:
        while True:
            try:
                loop()
                return
            except Exception:
                log.exception("worker %s: the %s thread failed unexpectedly; restarting it "
                              "in %.0fs", worker_id(), name, RESTART_SECONDS)
                time.sleep(RESTART_SECONDS)

    thread = threading.Thread(target=keep_alive, name=f"pgqueue-{name}", daemon=True)
    thread.start()
    return thread
