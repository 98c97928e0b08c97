"""The worker's wake-up signal: several lease loops wait on it and none may miss a wake-up."""
from __future__ import annotations

import threading
import time

from pgqueue.worker import Wakeup


def test_a_wakeup_between_looking_and_waiting_is_not_lost() -> None:
    wake = Wakeup()
    seen = wake.generation
    wake.set()  # arrives after the waiter looked for work, before it waits
    started = time.monotonic()
    wake.wait(seen, 5.0)
    assert time.monotonic() - started < 1.0


def test_every_waiter_is_woken_and_a_current_generation_waits_for_the_timeout() -> None:
    wake = Wakeup()
    seen = wake.generation
    woken: list[float] = []

    def waiter() -> None:
        wake.wait(seen, 5.0)
        woken.append(time.monotonic())

    threads = [threading.Thread(target=waiter) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.1)
    assert woken == []
    set_at = time.monotonic()
    wake.set()
    for t in threads:
        t.join(2.0)
    assert len(woken) == 3 and all(w - set_at < 1.0 for w in woken)

    started = time.monotonic()
    wake.wait(wake.generation, 0.2)  # nothing new: waits out its timeout
    assert time.monotonic() - started >= 0.19
