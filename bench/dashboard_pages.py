"""The dashboard's job pages on a million jobs: keyset paging through Queue.jobs_page.

    python bench/dashboard_pages.py [--dsn SERVER_DSN] [--jobs N] [--repeat N] [--limit N]

With no DSN it starts its own embedded Postgres (fsync on, default settings, as the other
benches) in a temporary directory and stops it at the end; with --dsn it uses that server (the
role needs CREATE DATABASE) and drops and creates the scratch database
`pgqueue_bench_dashboard`.

It loads --jobs jobs (1,000,000) through the library: Queue.enqueue_many in batches of 5,000
per stream, the three streams interleaved batch by batch and skewed in size (orders 80 %,
emails 17 %, audit 3 %), four kinds (charge 60 %, sync 25 %, email 14.8 %, refund 0.2 %: the
rare one) and a mix of states: mostly pending, 9 % scheduled (delayed by an hour to a week),
5 % dead (max_attempts=1; some nacked one by one, the rest leased for 1 ms and reclaimed in
batches), 0.5 % quarantined (leased for 1 ms and reclaimed while the stream's
quarantine_after is 1), 0.1 % undecodable (the worker's mark_undecodable), 1 % leased (held for
six hours). The jobs bound for each state are enqueued at their own priority, so a lease takes
exactly them, scattered over the id range as real ones are. One job in 10,000 carries a 100 KB
payload. Then VACUUM ANALYZE.

Then it times, each --repeat (5) times on one pooled connection, the calls a dashboard makes:
jobs_page for a first page, a page deep in the list, a stream, a stream and a state (each
state, in the big and the small stream), a state alone, a stream, state and kind (a common
kind, the rare one, and a kind no job has), 20 consecutive pages followed by `next`; a few
of those filters in turn on one fresh connection, timed from the fifth round on (by then a
statement psycopg prepares after 5 runs would run on the plan Postgres cached, one plan for
every filter); and count_jobs (a bulk action's confirmation, without and with a kind) and
throughput() (the overview's last hour: read whole the first time, then from the current
minute on, as the dashboard refreshes it). It prints the first call, the median and the max
(ms) of each, and a verdict per case against the 100 ms bar of the issue ("each page in well
under 100 ms"): ok under 50 ms, near under 100, OVER (counts and throughput in parentheses:
not pages).
Pages are --limit (50) jobs with previews of 2,000 bytes, as the dashboard asks for them.
Figures only; nothing here is asserted.
"""
from __future__ import annotations

import argparse
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import psycopg
from psycopg.types.json import Jsonb
from rich.console import Console
from rich.table import Table

import pgqueue
from pgqueue.client.benchmark import fresh_database, server
from pgqueue.db import queries
from pgqueue.models import JobCount, JobsPage, ThroughputMinutes

#: Streams and their share of the jobs: one big, one middling, one small.
STREAMS: tuple[tuple[str, float], ...] = (("orders", 0.80), ("emails", 0.17), ("audit", 0.03))
#: Kinds and their share; the last one is rare.
KINDS: tuple[tuple[str, float], ...] = (
    ("charge", 0.60), ("sync", 0.25), ("email", 0.148), ("refund", 0.002))
COMMON_KIND, RARE_KIND = KINDS[0][0], KINDS[-1][0]
#: A kind no job has: the filter then reads every job of its stream and state.
ABSENT_KIND = "no-such-kind"
#: The state each job is bound for, and its share. Every job is enqueued pending or scheduled;
#: the others are reached through the library afterwards.
ROLES: tuple[tuple[str, float], ...] = (
    ("pending", 0.844), ("scheduled", 0.09), ("dead", 0.05), ("quarantined", 0.005),
    ("undecodable", 0.001), ("leased", 0.01))
#: The priority a job bound for a state is enqueued at: a lease takes the highest first, so
#: leasing as many jobs as are bound for that state takes exactly them. Pending and scheduled
#: jobs get 0 to 3.
ROLE_PRIORITY = {"dead": 9, "quarantined": 8, "undecodable": 7, "leased": 6}
#: Jobs per enqueue_many call of the big stream (the others' batches are smaller, one batch of
#: each stream per round, so their ids interleave).
BATCH = 5_000
#: Jobs per lease call while moving jobs to another state.
LEASE_BATCH = 5_000
#: Dead jobs per stream settled by nack, one call each (the rest: expired leases, reclaimed).
NACKED_PER_STREAM = 1_000
#: One job in this many carries a large payload (a page shows only its preview).
LARGE_EVERY = 10_000
LARGE_PAYLOAD = 100_000
#: As the dashboard asks (pgqueue/dashboard/params.py PAGE, pgqueue/dashboard/data.py
#: PREVIEW_BYTES; not imported: the dashboard package needs its extra installed).
PAGE = 50
PREVIEW_BYTES = 2_000
#: The issue's bar for one page, and what counts as well under it.
BAR_MS = 100.0
WELL_UNDER_MS = 50.0
#: Pages followed in a walk.
WALK_PAGES = 20
#: Held leases last this long: the benchmark is over long before they expire.
HELD_SECONDS = 6 * 3600.0

_PAD = "lorem ipsum dolor sit amet consectetur adipiscing elit " * 8


# -- loading ------------------------------------------------------------------------------------


@dataclass
class Loaded:
    """What the load made: jobs per stream and state bound for, the id range, timings."""

    planned: Counter[tuple[str, str]] = field(default_factory=Counter)
    oldest: dict[str, int] = field(default_factory=dict)
    newest: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)


def payload(rng: random.Random, n: int, stream: str, kind: str) -> bytes:
    """A JSON payload of 100-500 bytes, or (one in LARGE_EVERY) of LARGE_PAYLOAD bytes."""
    note = _PAD[:rng.randrange(0, 300)] if n % LARGE_EVERY else "x" * LARGE_PAYLOAD
    return (f'{{"n":{n},"stream":"{stream}","kind":"{kind}","customer":"c{rng.randrange(10**6)}",'
            f'"amount_cents":{rng.randrange(100, 10**6)},"currency":"EUR","note":"{note}"}}'
            ).encode()


def new_jobs(rng: random.Random, stream: str, count: int, first_n: int,
             planned: Counter[tuple[str, str]]) -> list[pgqueue.NewJob]:
    """One batch of a stream: each job's kind and bound-for state drawn by their shares."""
    roles = rng.choices([r for r, _ in ROLES], [w for _, w in ROLES], k=count)
    kinds = rng.choices([k for k, _ in KINDS], [w for _, w in KINDS], k=count)
    jobs = []
    for i, (role, kind) in enumerate(zip(roles, kinds, strict=True)):
        planned[stream, role] += 1
        body = payload(rng, first_n + i, stream, kind)
        if role == "scheduled":
            jobs.append(pgqueue.NewJob(body, kind=kind, priority=rng.randrange(4),
                                       delay=rng.uniform(3600, 7 * 86400)))
        elif role == "pending":
            jobs.append(pgqueue.NewJob(body, kind=kind, priority=rng.randrange(4)))
        else:
            jobs.append(pgqueue.NewJob(body, kind=kind, priority=ROLE_PRIORITY[role],
                                       max_attempts=1 if role == "dead" else None))
    return jobs


def enqueue_all(queues: dict[str, pgqueue.Queue], total: int, rng: random.Random,
                loaded: Loaded, console: Console) -> None:
    """`total` jobs over STREAMS, one batch of each stream per round."""
    sizes = {s: int(total * share) for s, share in STREAMS}
    sizes[STREAMS[0][0]] += total - sum(sizes.values())
    rounds = max(1, -(-sizes[STREAMS[0][0]] // BATCH))
    done = 0
    for r in range(rounds):
        for stream, size in sizes.items():
            count = size * (r + 1) // rounds - size * r // rounds
            if not count:
                continue
            ids = queues[stream].enqueue_many(new_jobs(rng, stream, count, done, loaded.planned))
            loaded.oldest.setdefault(stream, ids[0])
            loaded.newest[stream] = ids[-1]
            done += count
        if r % 20 == 19:
            console.log(f"enqueued {done:,} of {total:,}")


def lease_n(q: pgqueue.Queue, n: int, seconds: float) -> list[pgqueue.Lease]:
    """Lease n jobs of q's stream (the highest priority first), LEASE_BATCH at a time."""
    held: list[pgqueue.Lease] = []
    while len(held) < n:
        got = q.lease(min(LEASE_BATCH, n - len(held)), visibility_timeout=seconds)
        if not got:
            break
        held += got
    if len(held) != n:
        raise RuntimeError(f"stream {q.stream}: leased {len(held)} jobs, wanted {n}")
    return held


def reclaim(any_queue: pgqueue.Queue) -> int:
    """Reclaim every expired lease (in batches of 1,000) once the 1 ms leases expired."""
    time.sleep(0.05)
    return any_queue.reclaim_expired()


def move_jobs(queues: dict[str, pgqueue.Queue], loaded: Loaded, console: Console) -> None:
    """Take the jobs bound for dead, quarantined, undecodable and leased there."""
    some = next(iter(queues.values()))
    # dead: max_attempts=1, so one failure buries a job. Some by nack (one call each), the
    # rest as expired leases, reclaimed in batches (a worker that died holding them).
    t0 = time.perf_counter()
    for stream, q in queues.items():
        n = loaded.planned[stream, "dead"]
        nacked = min(n, NACKED_PER_STREAM)
        for one in lease_n(q, nacked, 600.0):
            q.nack(one, error="ValueError: card declined")
        lease_n(q, n - nacked, 0.001)
    reclaimed = reclaim(some)
    loaded.seconds["dead"] = time.perf_counter() - t0
    console.log(f"dead: reclaimed {reclaimed:,} in {loaded.seconds['dead']:.1f} s")
    # quarantined: one crash (an expired lease) quarantines while quarantine_after is 1.
    t0 = time.perf_counter()
    for stream, q in queues.items():
        q.configure_stream(quarantine_after=1)
        lease_n(q, loaded.planned[stream, "quarantined"], 0.001)
    reclaimed = reclaim(some)
    for q in queues.values():
        q.configure_stream(quarantine_after=3)  # the default again
    loaded.seconds["quarantined"] = time.perf_counter() - t0
    console.log(f"quarantined: reclaimed {reclaimed:,}")
    # undecodable: what a worker does with a job its code cannot run.
    t0 = time.perf_counter()
    for stream, q in queues.items():
        held = lease_n(q, loaded.planned[stream, "undecodable"], 600.0)
        with q.connection() as conn:
            for one in held:
                queries.scalar(conn, "mark_undecodable", {
                    "stream": one.stream, "job_id": one.job_id, "lease_id": one.lease_id,
                    "reason": "unknown_kind",
                    "detail": Jsonb({"kind": one.kind, "message": "no handler for this kind"})})
    loaded.seconds["undecodable"] = time.perf_counter() - t0
    # leased: held by a worker for the whole benchmark.
    t0 = time.perf_counter()
    for stream, q in queues.items():
        lease_n(q, loaded.planned[stream, "leased"], HELD_SECONDS)
    loaded.seconds["leased"] = time.perf_counter() - t0


def load(dsn: str, total: int, seed: int, console: Console) -> Loaded:
    loaded = Loaded()
    rng = random.Random(seed)
    with pgqueue.Queue(dsn, stream=STREAMS[0][0], pool_size=1) as base:
        queues = {s: base.for_stream(s) for s, _ in STREAMS}
        t0 = time.perf_counter()
        enqueue_all(queues, total, rng, loaded, console)
        loaded.seconds["enqueue"] = time.perf_counter() - t0
        console.log(f"enqueued {total:,} jobs in {loaded.seconds['enqueue']:.1f} s")
        move_jobs(queues, loaded, console)
    t0 = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    loaded.seconds["vacuum"] = time.perf_counter() - t0
    console.log(f"VACUUM ANALYZE in {loaded.seconds['vacuum']:.1f} s")
    return loaded


# -- timing -------------------------------------------------------------------------------------


@dataclass
class Case:
    """One measured call: its times (ms), and what the last call returned (e.g. jobs on a page)."""

    name: str
    times: list[float]
    result: str
    #: held to the page bar; counts and throughput are shown against it in parentheses, for
    #: reference, and a whole walk (many pages) not at all
    page: bool = True
    walk: bool = False

    @property
    def worst(self) -> float:
        return max(self.times)

    def verdict(self) -> str:
        if self.worst < WELL_UNDER_MS:
            return "ok"
        return "near" if self.worst < BAR_MS else "OVER"


def timed(call: Callable[[], object], repeat: int) -> tuple[list[float], object]:
    """Run call `repeat` times; the times in ms and the last result."""
    times = []
    result: object = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = call()
        times.append((time.perf_counter() - t0) * 1000.0)
    return times, result


def page_case(q: pgqueue.Queue, name: str, repeat: int, limit: int, *,
              stream: str | None = None, state: str | None = None, kind: str | None = None,
              after: int | None = None) -> Case:
    def call() -> JobsPage:
        return q.jobs_page(stream=stream, state=state, kind=kind, after=after, limit=limit,
                           preview_bytes=PREVIEW_BYTES)
    times, page = timed(call, repeat)
    assert isinstance(page, JobsPage)
    more = "" if page.next is None else ", more"
    return Case(name, times, f"{len(page.jobs)} jobs{more}")


def walk_case(q: pgqueue.Queue, name: str, repeat: int, limit: int, *,
              stream: str | None = None, state: str | None = None,
              kind: str | None = None) -> list[Case]:
    """WALK_PAGES pages, each from the previous one's `next`: per page, and per walk."""
    pages: list[float] = []
    walks: list[float] = []
    seen = 0
    for _ in range(repeat):
        after: int | None = None
        seen = 0
        w0 = time.perf_counter()
        for _ in range(WALK_PAGES):
            t0 = time.perf_counter()
            page = q.jobs_page(stream=stream, state=state, kind=kind, after=after, limit=limit,
                               preview_bytes=PREVIEW_BYTES)
            pages.append((time.perf_counter() - t0) * 1000.0)
            seen += len(page.jobs)
            after = page.next
            if after is None:
                break
        walks.append((time.perf_counter() - w0) * 1000.0)
    return [Case(f"{name}: each page", pages, f"{seen:,} jobs in all"),
            Case(f"{name}: the whole walk", walks, f"{WALK_PAGES} pages", page=False, walk=True)]


#: The filters a dashboard's connection serves in turn, the cheap and the selective beside one
#: that reads a whole stream and state: a plan cached for some of them (psycopg prepares a
#: statement from its fifth run, and Postgres then may keep one generic plan) would be wrong
#: for the others. (label, stream, state, kind)
MIXED: tuple[tuple[str, str | None, str | None, str | None], ...] = (
    ("no filter", None, None, None),
    (f"stream {STREAMS[-1][0]}, state quarantined", STREAMS[-1][0], "quarantined", None),
    (f"stream {STREAMS[0][0]}, state pending, kind {ABSENT_KIND}", STREAMS[0][0], "pending",
     ABSENT_KIND),
    (f"stream {STREAMS[-1][0]}, state pending, kind {RARE_KIND}", STREAMS[-1][0], "pending",
     RARE_KIND),
    ("state undecodable", None, "undecodable", None),
)
#: Rounds of MIXED run before the timed ones: past psycopg's prepare threshold (5 runs) and
#: Postgres's five custom plans of a prepared statement.
MIXED_WARM_ROUNDS = 4


def mixed_cases(dsn: str, repeat: int, limit: int) -> list[Case]:
    """MIXED in turn on one fresh connection, MIXED_WARM_ROUNDS rounds, then `repeat` timed."""
    times: dict[str, list[float]] = {label: [] for label, *_ in MIXED}
    returned: dict[str, str] = {}
    with pgqueue.Queue(dsn, stream=STREAMS[0][0], pool_size=1) as q:
        for r in range(MIXED_WARM_ROUNDS + repeat):
            for label, stream, state, kind in MIXED:
                t0 = time.perf_counter()
                page = q.jobs_page(stream=stream, state=state, kind=kind, limit=limit,
                                   preview_bytes=PREVIEW_BYTES)
                if r >= MIXED_WARM_ROUNDS:
                    times[label].append((time.perf_counter() - t0) * 1000.0)
                returned[label] = f"{len(page.jobs)} jobs" + ("" if page.next is None else ", more")
    return [Case(f"one connection, mixed filters, round {MIXED_WARM_ROUNDS + 1}+: {label}",
                 times[label], returned[label]) for label, *_ in MIXED]


def measure(dsn: str, loaded: Loaded, repeat: int, limit: int) -> list[Case]:
    big, mid, small = (s for s, _ in STREAMS)
    cases: list[Case] = []
    # One pooled connection, as a dashboard's pool hands one out, for every call in turn.
    with pgqueue.Queue(dsn, stream=big, pool_size=1) as q:
        def page(name: str, *, stream: str | None = None, state: str | None = None,
                 kind: str | None = None, after: int | None = None) -> None:
            cases.append(page_case(q, name, repeat, limit, stream=stream, state=state, kind=kind,
                                   after=after))

        def count(state: str, stream: str | None = None) -> None:
            times, found = timed(lambda: q.count_jobs(stream=stream, state=state), repeat)
            assert isinstance(found, JobCount)
            where = f"state={state}" + ("" if stream is None else f" stream={stream}")
            cases.append(Case(f"count_jobs {where}", times, f"{found.count:,} jobs", page=False))

        oldest = min(loaded.oldest.values())
        page("first page, no filter")
        page("deep page, no filter (after oldest id + 100)", after=oldest + 100)
        page(f"deep page, stream {big} (after its oldest id + 100)",
             stream=big, after=loaded.oldest[big] + 100)
        page(f"deep page, stream {small} pending (after its oldest id + 100)",
             stream=small, state="pending", after=loaded.oldest[small] + 100)
        for stream in (big, mid, small):
            page(f"stream {stream}", stream=stream)
        for stream in (big, small):
            for state in pgqueue.JOB_STATES:
                page(f"stream {stream}, state {state}", stream=stream, state=state)
        for state in pgqueue.JOB_STATES:
            page(f"state {state} (every stream)", state=state)
        page(f"kind {RARE_KIND} (every stream and state)", kind=RARE_KIND)
        page(f"kind {ABSENT_KIND} (every stream and state; none)", kind=ABSENT_KIND)
        for stream, state in ((big, "pending"), (big, "dead"), (small, "pending"),
                              (small, "scheduled")):
            for kind in (COMMON_KIND, RARE_KIND):
                page(f"stream {stream}, state {state}, kind {kind}", stream=stream, state=state,
                     kind=kind)
        page(f"stream {big}, state pending, kind {ABSENT_KIND} (none)", stream=big,
             state="pending", kind=ABSENT_KIND)
        page(f"stream {small}, state pending, kind {ABSENT_KIND} (none)", stream=small,
             state="pending", kind=ABSENT_KIND)
        cases += walk_case(q, f"{WALK_PAGES} pages, no filter", repeat, limit)
        cases += walk_case(q, f"{WALK_PAGES} pages, stream {big}, state dead", repeat, limit,
                           stream=big, state="dead")
        cases += walk_case(q, f"{WALK_PAGES} pages, stream {big}, state pending, kind {RARE_KIND}",
                           repeat, limit, stream=big, state="pending", kind=RARE_KIND)
        cases += mixed_cases(dsn, repeat, limit)
        count("dead")
        count("pending")
        count("pending", big)
        count("quarantined", small)
        times, found = timed(lambda: q.count_jobs(state="pending", kind=RARE_KIND), repeat)
        assert isinstance(found, JobCount)
        cases.append(Case(f"count_jobs state=pending kind={RARE_KIND}", times,
                          f"{found.count:,} jobs", page=False))
        times, found = timed(lambda: q.count_jobs(state="pending", kind=COMMON_KIND), repeat)
        assert isinstance(found, JobCount)
        cases.append(Case(f"count_jobs state=pending kind={COMMON_KIND}", times,
                          f"{found.count:,} jobs", page=False))
        times, window = timed(q.throughput, repeat)
        assert isinstance(window, ThroughputMinutes)
        enqueued = sum(t.enqueued for t in window.minutes)
        cases.append(Case("throughput() (the whole last hour: a dashboard's first)", times,
                          f"{len(window.minutes)} stream-minutes, {enqueued:,} enqueued",
                          page=False))
        now_minute = window.now_minute
        times, window = timed(lambda: q.throughput(since=now_minute), repeat)
        assert isinstance(window, ThroughputMinutes)
        cases.append(Case("throughput(since=current minute) (each later refresh)", times,
                          f"{len(window.minutes)} stream-minutes", page=False))
    cases += overview_cases(dsn, repeat)
    return cases


def overview_cases(dsn: str, repeat: int) -> list[Case]:
    """The overview as a browser gets it, through the dashboard's own app: /api/stats (the
    document its numbers and charts are drawn from: counts, the hour per minute per stream)
    and the page itself, the first request (the hour read whole) and the later ones (the
    cache brought up to date from the current minute)."""
    from starlette.testclient import TestClient

    from pgqueue.dashboard import create_app

    cases = []
    with TestClient(create_app(dsn)) as client:
        cache = client.app.state.pgqueue.cache
        for path, what in (("/api/stats", "the overview's document (numbers and charts)"),
                           ("/", "the overview page, charts drawn from the same document")):
            cache.minutes, cache.now_minute, cache.at = {}, None, -1e9  # a first request
            first, _ = timed(lambda path=path: client.get(path), 1)  # type: ignore[misc]
            cases.append(Case(f"GET {path} first: {what}", first, "the hour read whole",
                              page=False))

            def refreshed(path: str = path) -> object:
                cache.at = -1e9  # due: brought up to date from the current minute
                return client.get(path)

            times, reply = timed(refreshed, repeat)
            assert getattr(reply, "status_code", 0) == 200
            cases.append(Case(f"GET {path} refreshed: {what}", times,
                              f"{len(getattr(reply, 'content', b'')):,} bytes"))
    return cases


# -- report -------------------------------------------------------------------------------------


def print_mix(console: Console, dsn: str, loaded: Loaded) -> None:
    """Jobs by stream and state as the database holds them, beside what the load planned."""
    with pgqueue.Queue(dsn, pool_size=1) as q:
        held = {(s.stream, s.state): s.count for s in q.stats()}
    table = Table(title="jobs loaded, by stream and state (planned)")
    table.add_column("stream")
    for state in pgqueue.JOB_STATES:
        table.add_column(state, justify="right")
    table.add_column("all", justify="right")
    for stream, _ in STREAMS:
        row = [f"{held.get((stream, st), 0):,} ({loaded.planned[stream, st]:,})"
               for st in pgqueue.JOB_STATES]
        table.add_row(stream, *row, f"{sum(c for (s, _), c in held.items() if s == stream):,}")
    console.print(table)
    timings = ", ".join(f"{phase} {sec:.1f} s" for phase, sec in loaded.seconds.items())
    console.print(f"load: {timings}")


def print_cases(console: Console, title: str, cases: Sequence[Case]) -> None:
    table = Table(title=title)
    for name, justify in (("case", "left"), ("returned", "right"), ("first ms", "right"),
                          ("median ms", "right"), ("max ms", "right"), ("vs 100 ms", "left")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for c in cases:
        table.add_row(c.name, c.result, f"{c.times[0]:.1f}", f"{statistics.median(c.times):.1f}",
                      f"{c.worst:.1f}",
                      "-" if c.walk else c.verdict() if c.page else f"({c.verdict()})")
    console.print(table)
    for c in cases:
        if not c.page:
            continue
        console.print(f"verdict: {c.name}: {c.verdict()} (max {c.worst:.1f} ms, median "
                      f"{statistics.median(c.times):.1f} ms; bar {BAR_MS:.0f} ms)")
    over = [c for c in cases if c.page and c.verdict() != "ok"]
    console.print(f"verdict: {sum(c.page for c in cases) - len(over)} page cases well under "
                  f"{BAR_MS:.0f} ms (max < {WELL_UNDER_MS:.0f} ms), "
                  f"{sum(c.verdict() == 'near' for c in over)} near, "
                  f"{sum(c.verdict() == 'OVER' for c in over)} over")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="a server DSN (a scratch database is created on it)")
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5, help="calls per case")
    parser.add_argument("--limit", type=int, default=PAGE, help="jobs per page")
    parser.add_argument("--seed", type=int, default=1, help="of the job mix")
    args = parser.parse_args()
    if args.jobs < 10_000:
        parser.error("--jobs must be at least 10,000 (the mix needs a few jobs in each state)")
    console = Console()
    if not console.is_terminal:  # piped to a file: wide enough that the tables stay one line a row
        console = Console(width=150)
    with server(args.dsn, "dashboard") as (server_dsn, embedded):
        dsn = fresh_database(server_dsn, "pgqueue_bench_dashboard", migrate=False)
        pgqueue.migrate(dsn)
        loaded = load(dsn, args.jobs, args.seed, console)
        print_mix(console, dsn, loaded)
        with console.status("timing pages"):
            cases = measure(dsn, loaded, args.repeat, args.limit)
        print_cases(console, f"dashboard calls on {args.jobs:,} jobs, {args.repeat} calls each, "
                    f"pages of {args.limit}" + (" (embedded Postgres, fsync on)" if embedded
                                                else ""), cases)


if __name__ == "__main__":
    main()
