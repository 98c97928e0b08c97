"""What an embedded Postgres runs from, read without SQL: the version of a binary or a data
directory, the running postmaster (its pid file and /proc/PID/exe, Linux), and whether that is
this install's binary. embedded.py decides from these whether to restart a server.
"""
from __future__ import annotations

import contextlib
import functools
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

_DELETED = " (deleted)"


def binary_version(binary: Path) -> str | None:
    """The version a postgres binary reports (`postgres --version`: "18.6"), None if it cannot
    run. The wheel's postgres links only system libraries, so this works on /proc/PID/exe of a
    postmaster whose files were deleted."""
    try:
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                             timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    words = out.split()
    return words[-1] if words else None


@functools.lru_cache(maxsize=8)
def _install_version(binary: Path) -> str | None:
    return binary_version(binary)


def major(version: str) -> str:
    """The major version of a version string or PG_VERSION: "18.6" -> "18", "9.6.24" -> "9.6"."""
    parts = version.split(".")
    return parts[0] if int(parts[0]) >= 10 else ".".join(parts[:2])


@dataclass(frozen=True)
class Postmaster:
    """A live postmaster of a data directory and the binary it executes."""

    pid: int
    port: int | None
    #: The binary it runs from; None when that cannot be told (not Linux, or not permitted).
    binary: Path | None
    #: Whether that binary was deleted (or replaced) since it started.
    deleted: bool


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):  # a zombie is dead for our purposes
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("State:"):
                return "Z" not in line.split()[1]
    return True


def read_postmaster(pgdata: Path) -> Postmaster | None:
    """The live postmaster of `pgdata` (from its postmaster.pid), or None when none runs."""
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
        pid = int(lines[0])
    except (OSError, ValueError, IndexError):
        return None
    if pid <= 0 or not _alive(pid):
        return None
    port = int(lines[3]) if len(lines) > 3 and lines[3].strip().isdigit() else None
    try:
        target = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return Postmaster(pid, port, None, False)
    deleted = target.endswith(_DELETED)
    binary = Path(target.removesuffix(_DELETED))
    if binary.name != "postgres":  # the pid was reused: the postmaster is gone
        return None
    return Postmaster(pid, port, binary, deleted or not binary.exists())


def runs_from(pm: Postmaster, binaries: Path) -> bool | None:
    """Whether `pm` executes `binaries`/postgres (the same file, not just the same path), None
    when that cannot be told."""
    if pm.binary is None:
        return None
    if pm.deleted:
        return False
    try:
        running = os.stat(f"/proc/{pm.pid}/exe")
        ours = os.stat(binaries / "postgres")
    except OSError:
        return None
    return (running.st_dev, running.st_ino) == (ours.st_dev, ours.st_ino)


@dataclass(frozen=True)
class EmbeddedStatus:
    """What `pgqueue embedded status` reports; every field is read without connecting."""

    data_dir: Path
    initialised: bool
    running: bool
    pid: int | None
    port: int | None
    #: The directory of the binary the running postmaster executes.
    binaries: Path | None
    binaries_deleted: bool | None
    #: Whether it runs from this install's binaries (None: not running, or cannot tell).
    this_install: bool | None
    install_binaries: Path
    #: The running binary's `--version`.
    server_version: str | None
    #: The major version the data directory was initialised by (PG_VERSION).
    data_version: str | None
    install_version: str | None


@dataclass(frozen=True)
class Restarted:
    """A server that ran from other binaries and was restarted from this install's."""

    pgdata: Path
    old_binary: Path | None
    old_deleted: bool
    old_version: str | None
    new_binaries: Path
    new_version: str | None

    def message(self) -> str:
        """The one line the CLI prints on stderr."""
        old = str(self.old_binary) if self.old_binary else "unknown binary"
        if self.old_deleted:
            old += ", deleted"
        if self.old_version:
            old += f", PostgreSQL {self.old_version}"
        new = str(self.new_binaries) + (f", PostgreSQL {self.new_version}"
                                        if self.new_version else "")
        return (f"pgqueue: the embedded Postgres in {self.pgdata} was running from other "
                f"binaries ({old}); restarted it with this install's ({new})")
