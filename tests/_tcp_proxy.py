"""A TCP proxy for network faults: 127.0.0.1:<port> forwarded to a server, and a ``cut()``
that black-holes the traffic like a dead network (nothing forwarded either way, every socket
kept open, so neither end sees the connection close) until ``restore()``.

Bytes sent during a cut are held, not dropped: on ``restore()`` they go on in order, as
after a network partition heals. A connection made during a cut is accepted and then hangs
until the restore, as a connect to an unreachable host would.

``hold_answer(pattern)`` is a narrower fault: on the connection whose client sends
``pattern`` (a byte string in a transaction's writes), the server's answers are held from
the first client message with ``COMMIT`` at or after it, until ``release()``. The COMMIT
reaches the server and lands; only its answer (and anything after it on that connection)
is late, as on a network that delays one direction.
"""

from __future__ import annotations

import contextlib
import socket
import threading

__all__ = ["TcpProxy"]


class TcpProxy:
    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._pattern: bytes | None = None
        #: Set when a connection's answers started being held (see ``hold_answer``).
        self.holding = threading.Event()
        self._released = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self) -> None:
        """From now on nothing is forwarded, either way, on any connection."""
        self._flowing.clear()

    def restore(self) -> None:
        """Forward again, the held bytes first."""
        self._flowing.set()

    def hold_answer(self, pattern: bytes) -> None:
        """Hold the server's answers on the connection that sends ``pattern`` and then
        ``COMMIT``, from that COMMIT on, until :meth:`release` (once)."""
        self._pattern = pattern

    def release(self) -> None:
        """Let the held answers through."""
        self._released.set()

    def close(self) -> None:
        self._closed = True
        self._flowing.set()
        self._released.set()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in (self._listener, *sockets):
            with contextlib.suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        self._flowing.wait()
        try:
            server = socket.create_connection(self.upstream)
        except OSError:
            client.close()
            return
        with self._lock:
            self._sockets += [client, server]
        held = threading.Event()  # this connection's answers are held
        for source, target, up in ((client, server, True), (server, client, False)):
            threading.Thread(
                target=self._pump, args=(source, target, up, held), daemon=True
            ).start()

    def _pump(
        self, source: socket.socket, target: socket.socket, up: bool, held: threading.Event
    ) -> None:
        seen = False  # the pattern went up this connection
        try:
            while True:
                data = source.recv(65536)
                self._flowing.wait()  # held during a cut (the kernel buffers the rest)
                pattern = self._pattern
                if up and pattern is not None and not held.is_set():
                    at = data.find(pattern)
                    seen = seen or at >= 0
                    if seen and data.find(b"COMMIT", max(at, 0)) >= 0:
                        self._pattern = None  # one connection, once
                        held.set()
                        self.holding.set()
                if not up and held.is_set():
                    self._released.wait()
                if not data:
                    target.shutdown(socket.SHUT_WR)
                    return
                target.sendall(data)
        except OSError:
            for sock in (source, target):
                with contextlib.suppress(OSError):
                    sock.close()
