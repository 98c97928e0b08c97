"""Which frames a failure's traceback leaves out (pgqueue/failures.py): pgqueue's own and the
standard library's, never an installed package's or a sibling whose name starts like them."""
from __future__ import annotations

import os
import sysconfig
import threading

from pgqueue import failures


def test_the_workers_frames_are_pgqueues_and_the_standard_librarys_only() -> None:
    own = os.path.dirname(failures.__file__)
    stdlib = sysconfig.get_paths()["stdlib"]
    packages = sysconfig.get_paths()["purelib"]
    assert failures._worker_frame(os.path.join(own, "runtime", "handlers.py"))
    assert failures._worker_frame(threading.__file__)
    assert failures._worker_frame(os.path.join(stdlib, "asyncio", "tasks.py"))
    assert not failures._worker_frame(own + "_cli" + os.sep + "jobs.py")  # a sibling
    assert not failures._worker_frame(os.path.join(packages, "myapp", "tasks.py"))
    assert not failures._worker_frame(os.path.join(os.sep, "srv", "app", "tasks.py"))
