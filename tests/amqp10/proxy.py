"""A loopback TCP proxy the tests control: cut every connection (RST) or stop
forwarding the broker's frames (so confirms are held), like a network fault."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Iterator


class FaultProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self._target = (target_host, target_port)
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._server.getsockname()[1]
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = False
        threading.Thread(target=self._accept, name="fault-proxy", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self._target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, from_broker: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if from_broker:
                    # Bounded wait: a held direction resumes when released or cut.
                    while not self._flowing.wait(0.05):
                        if self._closed or src.fileno() < 0:
                            return
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        """Reset every proxied connection (RST, no FIN), as a network fault would."""
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for s in sockets:
            with contextlib.suppress(OSError):
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            # close() alone would not wake the pump blocked in recv(); SHUT_RD does,
            # and sends nothing, so the close that follows still resets (RST).
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RD)
            with contextlib.suppress(OSError):
                s.close()
        self._flowing.set()

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """Forward nothing from the broker inside the block."""
        self._flowing.clear()
        try:
            yield
        finally:
            self._flowing.set()

    def close(self) -> None:
        self._closed = True
        self.cut()
        with contextlib.suppress(OSError):
            self._server.close()
