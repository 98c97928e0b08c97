"""SIGTERM and SIGINT for a worker, handled on a thread of their own.

A Python signal handler runs on the main thread between two bytecodes, wherever that thread
is: also inside a section that holds a lock (a worker's wake-up condition, an Event's). A
handler that takes the same lock (stop() sets an Event and wakes the lease loops) then waits
for itself forever; the acceptance tests caught a worker hanging on SIGTERM that way once the
main thread's lease loop took its wake-up lock more often. So the handler here only writes a
byte to a pipe (os.write takes no Python lock), and a watcher thread reads it and calls the
worker's callback, taking locks like any other thread.
"""
from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType

log = logging.getLogger("pgqueue.worker")

_STOP_WATCHER = 0  # a byte no signal number uses: the watcher returns


def install(on_signal: Callable[[signal.Signals], None]) -> Callable[[], None]:
    """Route SIGTERM and SIGINT to `on_signal`, called on a watcher thread. Returns the
    function that puts the previous handlers back and ends the watcher. Only the main thread
    can set signal handlers: elsewhere nothing is installed."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    read_fd, write_fd = os.pipe()
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

    def handler(signum: int, frame: FrameType | None) -> None:
        try:
            os.write(write_fd, bytes([signum]))
        except OSError:
            pass  # restore() closed the pipe meanwhile: the worker is already done

    def watch() -> None:
        while True:
            try:
                data = os.read(read_fd, 1)
            except OSError:
                return
            if not data or data[0] == _STOP_WATCHER:
                return
            try:
                on_signal(signal.Signals(data[0]))
            except Exception:
                log.exception("handling signal %s failed", data[0])

    watcher = threading.Thread(target=watch, name="pgqueue-signals", daemon=True)
    watcher.start()
    for sig in previous:
        signal.signal(sig, handler)

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)
        os.write(write_fd, bytes([_STOP_WATCHER]))
        watcher.join(timeout=5.0)
        os.close(write_fd)
        os.close(read_fd)

    return restore
