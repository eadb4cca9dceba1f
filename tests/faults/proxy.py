"""A small loopback TCP proxy the suite owns, to cut PostgreSQL (or Redis) connections on demand.

``cut()`` drops every open connection at once (both sides see a reset or EOF); ``pause()`` also
refuses new ones until ``resume()``. It listens on 127.0.0.1 only and forwards to a loopback target.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading


class TcpProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        assert target_host in ("127.0.0.1", "localhost", "::1"), (
            "the suite never targets a non-loopback address"
        )
        self.target = (target_host, target_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._refusing = False
        self._closed = False
        self.cuts = 0
        self._thread = threading.Thread(target=self._accept_loop, name="fault-proxy", daemon=True)
        self._thread.start()

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self._refusing:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._pairs.append((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        sel = selectors.DefaultSelector()
        sel.register(a, selectors.EVENT_READ, b)
        sel.register(b, selectors.EVENT_READ, a)
        try:
            while True:
                for key, _ in sel.select(timeout=1.0):
                    src = key.fileobj
                    assert isinstance(src, socket.socket)  # only the two sockets are registered
                    data = src.recv(65536)
                    if not data:
                        return
                    key.data.sendall(data)
                if self._closed:
                    return
        except (OSError, ValueError):
            return
        finally:
            sel.close()
            self._drop(a, b)

    def _drop(self, a: socket.socket, b: socket.socket) -> None:
        for s in (a, b):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()
        with self._lock:
            if (a, b) in self._pairs:
                self._pairs.remove((a, b))

    def cut(self) -> int:
        """Drop every open connection; returns how many were cut."""
        with self._lock:
            pairs = list(self._pairs)
        for a, b in pairs:
            self._drop(a, b)
        self.cuts += 1
        return len(pairs)

    def pause(self) -> None:
        self._refusing = True
        self.cut()

    def resume(self) -> None:
        self._refusing = False

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._pairs)

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self.listener.close()
        self.cut()
