"""The chaos soak's checks: what the producers and handlers recorded against the op log.

Each check returns its violations (each one a line naming the job, lease or tick and the
evidence); figures are gathered on the way. The op log read is the final leader's, which holds
the old leader's ops too (the failover check proves none is missing).
"""
from __future__ import annotations

import base64
import datetime as dt
import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.soak.soak_cluster import rows

ENDING = frozenset({"Ack", "Nack", "Reclaim", "ReturnLease", "MarkUndecodable", "Cancel"})
TERMINAL = frozenset({"dead", "quarantined", "undecodable"})
#: How a lease ends without its result counting: expired and reclaimed, or given back at a
#: worker's drain while its handler still ran.
LOST = frozenset({"Reclaim", "ReturnLease"})
STEPS = ("a", "b", "c")
SHOWN = 25  # violations kept per check
ALL_CAP = 100  # ticks a pass fires per schedule at most (the README: up to 100 per pass)


@dataclass(frozen=True)
class Op:
    seq: int
    op: str
    job_id: int | None
    lease_id: int | None
    body: dict[str, Any]
    at_ms: int
    kind: str | None
    dedup_key: bytes | None
    payload: bytes | None


def load_ops(dsn: str) -> list[Op]:
    return [Op(int(r[0]), r[1], r[2], r[3], r[4], int(r[5]), r[6],
               None if r[7] is None else bytes(r[7]), None if r[8] is None else bytes(r[8]))
            for r in rows(dsn, """
                SELECT seq, op, job_id, lease_id, body,
                       floor(extract(epoch FROM at) * 1000)::bigint, kind, dedup_key, payload
                FROM pgqueue.op_log ORDER BY seq""")]


def read_jsonl(paths: Iterable[Path]) -> tuple[list[dict[str, Any]], int]:
    """Every record of the files, and how many lines could not be parsed."""
    out: list[dict[str, Any]] = []
    bad = 0
    for path in sorted(paths):
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                bad += 1
    return out, bad


@dataclass
class Check:
    name: str
    violations: list[str] = field(default_factory=list)
    count: int = 0
    notes: list[str] = field(default_factory=list)

    def fail(self, line: str) -> None:
        self.count += 1
        if len(self.violations) < SHOWN:
            self.violations.append(line)

    @property
    def passed(self) -> bool:
        return self.count == 0


@dataclass
class Evidence:
    """Everything the checks read, gathered after the run."""

    ops: list[Op]
    old_leader_ops: list[tuple[int, str, int | None, int | None]]
    final_jobs: dict[int, str]
    dead: set[int]
    ledger: list[dict[str, Any]]
    produced: list[dict[str, Any]]
    faults: list[dict[str, Any]]
    schedules_stopped_ms: int
    replica_identical: bool
    replica_differences: list[str]
    unexpected_exits: list[str]
    figures: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.by_job: dict[int, list[Op]] = defaultdict(list)
        self.enqueued: dict[int, Op] = {}
        self.duplicate_enqueues: list[int] = []
        for o in self.ops:
            if o.job_id is not None:
                self.by_job[o.job_id].append(o)
            if o.op == "Enqueue" and o.job_id is not None:
                if o.job_id in self.enqueued:
                    self.duplicate_enqueues.append(o.job_id)
                self.enqueued[o.job_id] = o
        self.runs: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for r in self.ledger:
            self.runs[int(r["job"])].append(r)


def _tag(o: Op) -> str | None:
    try:
        value = json.loads(o.payload or b"")
    except ValueError:
        return None
    tag = value.get("tag") if isinstance(value, dict) else None
    return tag if isinstance(tag, str) else None


def check_enqueues(ev: Evidence) -> Check:
    """Every enqueue a producer saw commit has its Enqueue op (with its tag, or for a dedup
    key the job holding that key); no rolled-back enqueue exists; no call applied twice."""
    c = Check("committed enqueues exist, rolled-back ones do not")
    for jid in ev.duplicate_enqueues:
        c.fail(f"job id {jid} has more than one Enqueue op")
    tags: dict[str, int] = {}
    for jid, o in ev.enqueued.items():
        tag = _tag(o)
        if tag is None:
            continue
        if tag in tags:
            c.fail(f"payload {tag} was enqueued twice (jobs {tags[tag]} and {jid}): one call "
                   "applied twice")
        tags[tag] = jid
    committed: set[int] = set()
    counts: Counter[str] = Counter()
    for rec in ev.produced:
        ids, rec_tags = rec.get("ids") or [], rec.get("tags") or []
        counts[rec["ev"]] += len(rec_tags)
        if rec["ev"] == "ok":
            key = rec.get("dedup")
            for jid, tag in zip(ids, rec_tags, strict=True):
                committed.add(jid)
                found = ev.enqueued.get(jid)
                if found is None:
                    c.fail(f"{rec['mode']} enqueue of {tag} returned job {jid}, which has no "
                           "Enqueue op: a committed job is lost")
                elif key is not None:
                    if found.dedup_key != key.encode():
                        c.fail(f"dedup enqueue of {tag} with key {key} returned job {jid}, whose "
                               f"key is {found.dedup_key!r}")
                elif tags.get(tag) != jid:
                    c.fail(f"{rec['mode']} enqueue of {tag} returned job {jid}, but the op log has "
                           f"it as job {tags.get(tag)}")
        elif rec["ev"] == "rolled_back":
            # by tag, not id: a promoted leader's sequence knows only the ids that committed,
            # so it may hand out again an id a rolled-back transaction on the old leader drew
            for tag in rec_tags:
                if tag in tags:
                    c.fail(f"{tag} was enqueued in a transaction that never committed "
                           f"({rec.get('why')}) and exists as job {tags[tag]}")
        elif rec["ev"] == "uncertain":
            landed = [t for t in rec_tags if t in tags]
            counts["uncertain_committed"] += len(landed)
            committed.update(tags[t] for t in landed)
    ev.figures.update({
        "jobs_enqueued": len(ev.enqueued), "producer_jobs_committed": len(committed),
        "producer_jobs_rolled_back": counts["rolled_back"],
        "producer_jobs_uncertain": counts["uncertain"],
        "producer_uncertain_found_committed": counts["uncertain_committed"]})
    return c


def _current_at(jops: list[Op], seq: int) -> tuple[int | None, bool]:
    """The lease of the last Lease op before `seq`, and whether it had ended by then."""
    lease, ended = None, False
    for o in jops:
        if o.seq >= seq:
            break
        if o.op == "Lease":
            lease, ended = o.lease_id, False
        elif o.lease_id == lease and o.op in ENDING:
            ended = True
    return lease, ended


def check_acks(ev: Evidence) -> Check:
    """Every job is acked exactly once, by its current lease, after its handler recorded its
    completion under that lease (steps: step c under some lease), or it sits in a terminal set."""
    c = Check("each job acked exactly once by a current lease, or terminal")
    outcome: Counter[str] = Counter()
    reruns = lost_reruns = 0
    for jid, enq in ev.enqueued.items():
        jops = ev.by_job[jid]
        acks = [o for o in jops if o.op == "Ack"]
        runs = ev.runs.get(jid, [])
        if len(acks) > 1:
            c.fail(f"job {jid} was acked {len(acks)} times (ops {[a.seq for a in acks]}, leases "
                   f"{[a.lease_id for a in acks]})")
            continue
        if acks:
            ack = acks[0]
            outcome["acked"] += 1
            lease, ended = _current_at(jops, ack.seq)
            if lease != ack.lease_id or ended:
                c.fail(f"job {jid} acked (op {ack.seq}) with lease {ack.lease_id}, but its current "
                       f"lease was {lease}{' (ended)' if ended else ''}")
            if jid in ev.final_jobs or jid in ev.dead:
                c.fail(f"job {jid} was acked and still exists ({ev.final_jobs.get(jid, 'dead')})")
            if enq.kind == "steps":
                done = {r["lease"] for r in runs if r["ev"] == "step_done" and r["step"] == "c"}
                if not any(lease_id <= (ack.lease_id or 0) for lease_id in done):
                    c.fail(f"step job {jid} acked without step c recorded complete")
            elif not any(r["ev"] == "done" and r["lease"] == ack.lease_id for r in runs):
                c.fail(f"job {jid} ({enq.kind}) acked under lease {ack.lease_id} but its handler "
                       f"recorded no completion under that lease")
        else:
            state = "dead" if jid in ev.dead else ev.final_jobs.get(jid, "gone")
            outcome[state] += 1
            if state not in TERMINAL:
                c.fail(f"job {jid} ({enq.kind}) was never acked and is {state}, not in a "
                       "terminal set")
        leases_run = {r["lease"] for r in runs if r["ev"] in ("run", "step_start")}
        if len(leases_run) > 1:
            reruns += 1
            ends = {o.lease_id: o.op for o in jops if o.op in ENDING}
            if any(ends.get(lease_id) in LOST for lease_id in leases_run):
                lost_reruns += 1
            for lease_id in {r["lease"] for r in runs if r["ev"] == "done"}:
                if lease_id < max(leases_run) and ends.get(lease_id) not in LOST:
                    c.fail(f"job {jid}: its handler completed under lease {lease_id}, which then "
                           f"ended by {ends.get(lease_id)}, not lost, and the job ran again")
    ev.figures.update({f"jobs_{k}": v for k, v in sorted(outcome.items())})
    ev.figures["jobs_run_under_several_leases"] = reruns
    ev.figures["jobs_rerun_after_a_lost_lease"] = lost_reruns
    return c


def check_fencing(ev: Evidence) -> Check:
    """Lease ids are unique; no op names a lease after the op that ended it; no lease is
    reclaimed before its expiry; and a SIGSTOPped worker's leases, once reclaimed, had their
    late writes refused (its log names each one as lost)."""
    c = Check("no write under a stale lease (fencing)")
    lease_job: dict[int, int | None] = {}
    ended: dict[int, Op] = {}
    current: dict[int, int] = {}  # job -> its lease not ended yet
    expiry: dict[int, int] = {}
    latencies: list[int] = []
    reclaim_spans: list[tuple[int, int, int]] = []  # (latency, expiry, reclaim), ms
    for o in ev.ops:
        lid = o.lease_id
        if lid is None:
            continue
        if o.op == "Lease":
            if lid in lease_job:
                c.fail(f"lease id {lid} was handed out twice (jobs {lease_job[lid]}, {o.job_id})")
            lease_job[lid] = o.job_id
            if o.job_id is not None:
                held = current.get(o.job_id)
                if held is not None and held not in ended:
                    c.fail(f"job {o.job_id} was leased again (lease {lid}, op {o.seq}) while its "
                           f"lease {held} was current")
                current[o.job_id] = lid
        elif lid in ended:
            end = ended[lid]
            c.fail(f"{o.op} (op {o.seq}) of job {o.job_id} names lease {lid}, which ended by "
                   f"{end.op} at op {end.seq}")
        if o.op in ("Lease", "Renew") and "expires_at_ms" in o.body:
            expiry[lid] = max(expiry.get(lid, 0), int(o.body["expires_at_ms"]))
        if o.op == "Reclaim":
            late = o.at_ms - expiry.get(lid, o.at_ms)
            if late <= 0:
                c.fail(f"lease {lid} of job {o.job_id} was reclaimed (op {o.seq}) {-late} ms "
                       "before its expiry")
            latencies.append(late)
            reclaim_spans.append((late, o.at_ms - late, o.at_ms))
        if o.op in ENDING:
            ended[lid] = o
    windows = [f["data"]["window_ms"] for f in ev.faults if "window_ms" in f["data"]]
    while_up = sorted(late for late, lo, hi in reclaim_spans
                      if not any(lo <= w_hi and w_lo <= hi for w_lo, w_hi in windows))
    latencies.sort()
    ev.figures.update({
        "reclaim_after_expiry_ms_max_leader_up": while_up[-1] if while_up else None,
        "reclaims": len(latencies),
        "reclaim_after_expiry_ms_max": latencies[-1] if latencies else None,
        "reclaim_after_expiry_ms_p50": latencies[len(latencies) // 2] if latencies else None,
        "reclaim_after_expiry_ms_p99": (latencies[min(len(latencies) - 1,
                                                      len(latencies) * 99 // 100)]
                                        if latencies else None)})
    refused = never_received = 0
    granted_at = {o.lease_id: o.at_ms for o in ev.ops if o.op == "Lease" and o.lease_id}
    # when a committed lease's reply may have been lost: a leader going away, or backends
    # terminated (the worker then never held the lease the database records for it)
    cuts = [(f["data"]["window_ms"][0] - 2000, f["data"]["window_ms"][1])
            for f in ev.faults if "window_ms" in f["data"]]
    cuts += [(f["data"]["at_ms"] - 2000, f["data"]["at_ms"] + 500)
             for f in ev.faults if "at_ms" in f["data"]]
    for f in ev.faults:
        if f["kind"] != "stop_worker":
            continue
        data = f["data"]
        text = Path(data["log"]).read_text(errors="replace")
        ran = {int(r["lease"]) for r in ev.ledger if r.get("pid") == data["pid"] and "lease" in r}
        reclaimed = [lid for lid in data.get("leases", [])
                     if lid in ended and ended[lid].op == "Reclaim"]
        data["reclaimed_while_stopped"] = len(reclaimed)
        ran_after = data.get("ran_after_continue", 0.0)
        for lid in reclaimed:
            at = granted_at.get(lid)
            if re.search(rf"lease {lid}\b[^\n]*(lost|no longer current)", text):
                refused += 1
            elif lid not in ran and at is not None and any(lo <= at <= hi for lo, hi in cuts):
                never_received += 1  # granted just before a cut, never run: its reply was lost
            elif ran_after >= 3.0:
                c.fail(f"worker pid {data['pid']} was stopped holding lease {lid}, which was "
                       f"reclaimed, and its log never says that lease was lost")
        data["late_writes_refused"] = refused
    ev.figures["stopped_worker_leases_refused"] = refused
    ev.figures["stopped_worker_leases_never_received"] = never_received
    return c


def check_steps(ev: Evidence) -> Check:
    """No step recorded complete (in the op log, before a lease) runs again under that lease;
    a resumed step starts at the checkpoint's cursor; every item of an acked job was done."""
    c = Check("no completed step ran again; cursors resume exactly")
    rerun_steps = repeated_items = 0
    for jid, enq in ev.enqueued.items():
        if enq.kind != "steps":
            continue
        jops = ev.by_job[jid]
        at_lease: dict[int, dict[str, Any]] = {}
        checkpoint: dict[str, Any] = {}
        for o in jops:
            if o.op == "Lease" and o.lease_id is not None:
                at_lease[o.lease_id] = dict(checkpoint)
            cp = o.body.get("checkpoint")
            if isinstance(cp, dict):
                checkpoint = cp
        runs = ev.runs.get(jid, [])
        starts: Counter[tuple[int, str]] = Counter()
        for r in runs:
            if r["ev"] != "step_start":
                continue
            lease_id, step = r["lease"], r["step"]
            starts[(lease_id, step)] += 1
            cp = at_lease.get(lease_id)
            if cp is None:
                c.fail(f"job {jid}: step {step} ran under lease {lease_id}, which has no Lease op")
                continue
            last = cp.get("last_completed_step")
            first = STEPS.index(last) + 1 if last in STEPS else 0
            if STEPS.index(step) < first:
                c.fail(f"job {jid}: step {step} ran again under lease {lease_id} although the op "
                       f"log recorded step {last} complete before that lease")
            if step == "b" and STEPS.index(step) == first:
                saved = None
                if cp.get("cursor_step") == "b" and cp.get("cursor") is not None:
                    saved = base64.b64decode(cp["cursor"]).decode()
                if r.get("cursor") != saved:
                    c.fail(f"job {jid}: step b resumed under lease {lease_id} at cursor "
                           f"{r.get('cursor')!r}, but the checkpoint at that lease was {saved!r}")
        for (lease_id, step), n in starts.items():
            if n > 1:
                c.fail(f"job {jid}: step {step} started {n} times under one lease {lease_id}")
        steps_started = Counter(step for (_l, step) in starts)
        rerun_steps += sum(n - 1 for n in steps_started.values())
        items = Counter(r["item"] for r in runs if r["ev"] == "item")
        repeated_items += sum(n - 1 for n in items.values())
        if any(o.op == "Ack" for o in jops):
            want = int(json.loads(enq.payload or b"{}").get("items", 0))
            missing = sorted(set(range(want)) - set(items))
            if missing:
                c.fail(f"job {jid} was acked but items {missing} of step b never ran")
            done = {r["step"] for r in runs if r["ev"] == "step_done"}
            if set(STEPS) - done:
                c.fail(f"job {jid} was acked but steps {sorted(set(STEPS) - done)} never completed")
    ev.figures["steps_run_again_after_a_lost_lease"] = rerun_steps
    ev.figures["step_items_repeated"] = repeated_items
    return c


def _ms(iso: str) -> int:
    return int(dt.datetime.fromisoformat(iso).timestamp() * 1000)


def check_cron(ev: Evidence) -> Check:
    """No (schedule, fire time) fired twice, in the advance ops or in enqueued tick jobs; each
    pass fired exactly the ticks its window and catch-up policy call for (a one-second cron,
    so every whole second is a tick); every schedule kept firing until the schedulers stopped."""
    c = Check("cron: each tick fired once, none missing but by catch-up policy")
    config: dict[str, dict[str, Any]] = {}
    nxt: dict[str, int] = {}
    fired: Counter[tuple[str, int]] = Counter()
    last_pass: dict[str, int] = {}
    skipped = 0
    for o in ev.ops:
        if o.op == "UpsertSchedule":
            config[o.body["name"]] = o.body
            nxt[o.body["name"]] = int(o.body["next_run_at_ms"])
        elif o.op == "UpdateScheduleNextRun":
            name = o.body["name"]
            cfg = config.get(name)
            if cfg is None:
                c.fail(f"schedule {name} advanced (op {o.seq}) before any UpsertSchedule")
                continue
            got = [_ms(t) for t in o.body.get("fired") or []]
            for t in got:
                fired[(name, t)] += 1
            first, at = nxt[name], o.at_ms
            boundary = at - int(cfg["misfire_grace_ms"])
            window = list(range(-(-first // 1000) * 1000, at + 1, 1000))
            in_grace = [t for t in window if t >= boundary][-ALL_CAP:]
            missed = [t for t in window if t < boundary]
            room = max(ALL_CAP - len(in_grace), 0)
            keep = {"none": [], "one": missed[-1:],
                    "all": missed[len(missed) - room:] if room else []}[cfg["catch_up"]]
            want = keep + in_grace
            skipped += len(window) - len(want)
            if got != want:
                lost = sorted(set(want) - set(got))
                extra = sorted(set(got) - set(want))
                c.fail(f"schedule {name} (catch_up={cfg['catch_up']}), pass at op {o.seq}: "
                       f"missing {[_iso(t) for t in lost]}, fired against its window or policy "
                       f"{[_iso(t) for t in extra]}")
            nxt[name] = int(o.body["next_run_at_ms"])
            last_pass[name] = at
    for (name, t), n in fired.items():
        if n > 1:
            c.fail(f"schedule {name} fired {_iso(t)} {n} times")
    keys = Counter(o.dedup_key.decode(errors="replace") for o in ev.ops
                   if o.op == "Enqueue" and o.dedup_key and o.dedup_key.startswith(b"schedule:"))
    for key, n in keys.items():
        if n > 1:
            c.fail(f"{n} tick jobs were enqueued for {key}")
    for (name, t) in fired:
        key = f"schedule:{name}@{dt.datetime.fromtimestamp(t / 1000, dt.timezone.utc).isoformat()}"
        if key not in keys:
            c.fail(f"schedule {name} fired {_iso(t)} but no tick job was enqueued for it")
    for name in config:
        if last_pass.get(name, 0) < ev.schedules_stopped_ms - 5000:
            c.fail(f"schedule {name} stopped firing: its last pass was at "
                   f"{_iso(last_pass.get(name, 0))}, the schedulers ran until "
                   f"{_iso(ev.schedules_stopped_ms)}")
    ev.figures["ticks_fired"] = sum(fired.values())
    ev.figures["ticks_skipped_by_catch_up"] = skipped
    return c


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%H:%M:%S.%f")[:-3]


def check_replicas(ev: Evidence) -> Check:
    """The remaining replica verifies identical to the final leader, and the final leader
    holds every op the old leader committed (nothing lost in the failover)."""
    c = Check("failover lost no op; the remaining replica is identical")
    mine = {(o.seq, o.op, o.job_id, o.lease_id) for o in ev.ops}
    missing = [op for op in ev.old_leader_ops if op not in mine]
    for op in missing:
        c.fail(f"op {op} of the old leader is not on the new leader")
    if not ev.replica_identical:
        for line in ev.replica_differences[:SHOWN] or ["verify said not identical"]:
            c.fail(f"follow replica: {line}")
    return c


def check_processes(ev: Evidence) -> Check:
    """No worker, scheduler or follower process died by itself or exited badly."""
    c = Check("no process died by itself")
    for line in ev.unexpected_exits:
        c.fail(line)
    return c


def run_all(ev: Evidence) -> list[Check]:
    checks = [check_enqueues(ev), check_acks(ev), check_fencing(ev), check_steps(ev),
              check_cron(ev), check_replicas(ev), check_processes(ev)]
    ev.figures["ops"] = len(ev.ops)
    ev.figures["ops_by_kind"] = dict(sorted(Counter(o.op for o in ev.ops).items()))
    return checks
