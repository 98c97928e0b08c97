"""What bench/peers/peers.py and bench/peers/peers_io.py share: a system's state during the benchmark,
scratch databases, and running one phase of one system in a subprocess."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo
from rich.console import Console

HERE = Path(__file__).resolve().parent
RUNNER = HERE / "peers_runner.py"


class PhaseError(RuntimeError):
    """A phase of one system failed or timed out."""


@dataclass
class SystemState:
    """What is known about one system during the benchmark."""

    name: str
    python: str
    version: str = "?"
    settings: list[dict[str, Any]] = field(default_factory=list)
    latency_setting: dict[str, Any] = field(default_factory=dict)
    best: int | None = None
    tuning: list[list[float]] = field(default_factory=list)
    unavailable: str | None = None
    values: dict[str, list[float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: metrics its adapter does not measure (no such API)
    unmeasured: set[str] = field(default_factory=set)
    #: the adapter's settings for I/O-bound processing, by mode (bench/peers/peers_io.py)
    io_settings: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


# -- databases -------------------------------------------------------------------------------


def fresh_database(server_dsn: str, name: str) -> str:
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return make_conninfo(server_dsn, dbname=name)


def drop_database(server_dsn: str, name: str) -> None:
    """Drop a scratch database; a failure here only leaves it behind."""
    try:
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)))
    except psycopg.Error as exc:
        print(f"could not drop the scratch database {name}: {exc}", file=sys.stderr)


# -- running one phase -----------------------------------------------------------------------


def checkpoint(server_dsn: str) -> None:
    """CHECKPOINT before a timed phase, so that no checkpoint comes due in the middle of it: the
    one after it would make the phase pay full-page writes for the pages it had just written
    (e.g. every job page between enqueue and processing), and when it came was chance. Every
    system gets the same. Needs pg_checkpoint (the embedded server's postgres has it); without
    it, skipped."""
    try:
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            conn.execute("CHECKPOINT")
    except psycopg.errors.InsufficientPrivilege:
        pass


def run_phase(state: SystemState, phase: str, dsn: str, timeout: float, *,
              setup: bool = False, server_dsn: str | None = None,
              **options: Any) -> dict[str, Any]:
    """Run one phase of one system in a subprocess; its JSON result, or PhaseError. With
    server_dsn, a timed phase: the server checkpoints first."""
    if server_dsn is not None:
        checkpoint(server_dsn)
    cmd = [state.python, str(RUNNER), state.name, phase, "--dsn", dsn]
    if setup:
        cmd.append("--setup")
    for key, value in options.items():
        cmd += [f"--{key.replace('_', '-')}", str(value)]
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True, cwd=str(HERE))
    except OSError as exc:
        raise PhaseError(f"{phase} could not start: {exc}") from None
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the phase and any worker process it started
        proc.communicate()
        raise PhaseError(f"{phase} timed out after {timeout:.0f} s") from None
    except BaseException:  # Ctrl-C: its own session does not get the terminal's SIGINT
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    if proc.returncode != 0:
        tail = [line for line in err.strip().splitlines() if line.strip()][-3:]
        raise PhaseError(f"{phase} exited with {proc.returncode}: {' / '.join(tail)}")
    try:
        result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        raise PhaseError(f"{phase} printed no result") from None
    return result


def record(state: SystemState, result: dict[str, Any], keys: list[str]) -> None:
    for key in keys:
        state.values.setdefault(key, []).append(float(result[key]))


def failed(state: SystemState, run: int, exc: Exception, console: Console) -> None:
    state.notes.append(f"run {run}: {exc}")
    console.print(f"  run {run} {state.name:<13} failed: {exc}")


