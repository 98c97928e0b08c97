"""A TCP proxy in front of the test Postgres that can lose a reply on purpose, or hold new
connections unanswered.

Armed with a marker (bytes of a statement's text), it forwards the client's message that
contains the marker to the server, then drops the connection when the server answers: the
server runs (and, in autocommit, commits) the statement, and the client never hears back, as
when a network path or a failover cuts a call in flight. It disarms itself after one drop.
With `stall_after=N`, every connection after the first N is accepted and never answered (a
server slow to accept one), until the proxy closes.
"""
from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from psycopg.conninfo import conninfo_to_dict, make_conninfo


class LossyProxy:
    """Listens on 127.0.0.1; every accepted connection is piped to (host, port)."""

    def __init__(self, server_dsn: str, *, stall_after: int | None = None) -> None:
        self.stall_after = stall_after
        self.accepted = 0
        #: the connections held unanswered (stall_after)
        self.stalled: list[socket.socket] = []
        parts = conninfo_to_dict(server_dsn)
        self.target = (str(parts.get("host") or "127.0.0.1"), int(parts.get("port") or 5432))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._marker: bytes | None = None
        self.dropped = threading.Event()
        self._open: list[socket.socket] = []
        self._closing = False
        threading.Thread(target=self._accept, daemon=True, name="proxy-accept").start()

    def dsn(self, dsn: str) -> str:
        """`dsn` with its host and port replaced by the proxy's."""
        return make_conninfo(dsn, host="127.0.0.1", port=str(self.port))

    def arm(self, marker: bytes) -> None:
        """Lose the reply to the next statement whose text contains `marker`."""
        with self._lock:
            self._marker = marker
            self.dropped.clear()

    def close(self) -> None:
        self._closing = True
        self._listener.close()
        for sock in list(self._open):
            _close(sock)

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self.accepted += 1
            if self.stall_after is not None and self.accepted > self.stall_after:
                self._open.append(client)
                self.stalled.append(client)
                continue
            server = socket.create_connection(self.target)
            self._open += [client, server]
            cut = threading.Event()  # the marked statement was sent: drop the next reply
            threading.Thread(target=self._pipe, args=(client, server, cut, True),
                             daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, cut, False),
                             daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, cut: threading.Event,
              upstream: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if upstream:
                    with self._lock:
                        hit = self._marker is not None and self._marker in data
                        if hit:
                            self._marker = None
                    if hit:
                        # set before the statement leaves: a server quick to answer (this
                        # thread preempted after sending) could otherwise have its reply
                        # forwarded, and nothing lost
                        cut.set()
                    dst.sendall(data)
                elif cut.is_set():
                    # the server answered the marked statement: the client never hears. Said
                    # before the sockets close, so a client that sees the loss (and retries)
                    # finds it said (a set in `finally` alone raced the retry under load)
                    self.dropped.set()
                    break
                else:
                    dst.sendall(data)
        except OSError:
            pass
        finally:
            if cut.is_set():
                self.dropped.set()
            _close(src)
            _close(dst)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


@contextmanager
def lossy_proxy(server_dsn: str) -> Iterator[LossyProxy]:
    proxy = LossyProxy(server_dsn)
    try:
        yield proxy
    finally:
        proxy.close()
