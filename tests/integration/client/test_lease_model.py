"""The lease of a stream with limited kinds against a model (pgqueue.pick_within_limits in
pgqueue/sql/lease.sql): one lease takes exactly the first `limit` ready jobs in lease order
(priority DESC, then id) that the limits allow, walking the order and passing over a job whose
kind has no room (max_concurrency less its leased jobs, rate_count less its leases in the
window) or whose key holds max_per_key. Backlogs reach past the lease's read cap (limit * 4 +
200 jobs), so both ways of finding candidates run: the scan in lease order and the kinds taken
apart. Each example is a stream of its own in one database (so the fixture's database is
shared by the examples on purpose)."""
from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pgqueue

KINDS = (None, "a", "b", "c")
_streams = itertools.count()


@dataclass(frozen=True)
class Job:
    id: int
    kind: str | None
    priority: int
    key: str | None


@dataclass(frozen=True)
class Limits:
    max_concurrency: int | None
    rate_count: int | None
    max_per_key: int | None


class Model:
    """What the limits allow, from the leases held and started (rate windows of an hour:
    nothing leaves them during a test)."""

    def __init__(self, limits: dict[str, Limits]) -> None:
        self.limits = limits
        self.held: Counter[str] = Counter()
        self.started: Counter[str] = Counter()
        self.held_by_key: Counter[tuple[str, str]] = Counter()

    def lease(self, ready: list[Job], limit: int) -> list[Job]:
        taken: list[Job] = []
        for job in sorted(ready, key=lambda j: (-j.priority, j.id)):
            if len(taken) == limit:
                break
            lim = self.limits.get(job.kind or "")
            if job.kind is not None and lim is not None:
                if lim.max_concurrency is not None and self.held[job.kind] >= lim.max_concurrency:
                    continue
                if lim.rate_count is not None and self.started[job.kind] >= lim.rate_count:
                    continue
                if (lim.max_per_key is not None and job.key is not None
                        and self.held_by_key[(job.kind, job.key)] >= lim.max_per_key):
                    continue
                self.held[job.kind] += 1
                self.started[job.kind] += 1
                if job.key is not None:
                    self.held_by_key[(job.kind, job.key)] += 1
            taken.append(job)
        return taken


# (kind, priority, key, how many): long runs reach past the read cap
runs = st.lists(st.tuples(st.sampled_from(KINDS), st.sampled_from((0, 1, 5)),
                          st.sampled_from((None, "x", "y")),
                          st.one_of(st.integers(1, 20), st.integers(100, 260))),
                min_size=1, max_size=6)
limits = st.fixed_dictionaries({
    "a": st.builds(Limits, st.sampled_from((None, 1, 2, 5)), st.none(), st.none()),
    "b": st.builds(Limits, st.sampled_from((None, 3)), st.sampled_from((None, 1, 4)),
                   st.none()),
    "c": st.builds(Limits, st.sampled_from((None, 4)), st.none(), st.sampled_from((None, 1, 2))),
})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                          HealthCheck.function_scoped_fixture])
@given(runs=runs, limits=limits, first=st.integers(1, 12), second=st.integers(1, 12))
def test_a_lease_takes_the_first_jobs_in_lease_order_that_the_limits_allow(
        dsn: str, runs: list[tuple[str | None, int, str | None, int]],
        limits: dict[str, Limits], first: int, second: int) -> None:
    with pgqueue.Queue(dsn, stream=f"model{next(_streams)}") as q:
        for name, lim in limits.items():
            q.configure_kind(name, max_concurrency=lim.max_concurrency,
                             rate_limit=None if lim.rate_count is None else (lim.rate_count, 3600),
                             max_per_key=lim.max_per_key)
        ready: list[Job] = []
        for kind, priority, key, n in runs:
            ids = q.enqueue_many([pgqueue.NewJob(b"m", kind=kind, priority=priority,
                                                 concurrency_key=key) for _ in range(n)])
            ready += [Job(i, kind, priority, key) for i in ids]
        model = Model({k: v for k, v in limits.items() if v != Limits(None, None, None)})
        for limit in (first, second):
            want = model.lease(ready, limit)
            got = q.lease(limit=limit)
            assert [lease.job_id for lease in got] == [job.id for job in want], (
                f"lease(limit={limit}) took {[(lease.job_id, lease.kind) for lease in got]}, "
                f"the model {[(job.id, job.kind) for job in want]}")
            taken = {job.id for job in want}
            ready = [job for job in ready if job.id not in taken]
