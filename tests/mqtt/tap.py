"""A loopback TCP proxy in front of Mosquitto that reads the MQTT packets it forwards.

MQTT has no queue-depth API, so the harness watches the wire instead: every
QoS>0 PUBLISH the broker sends a client and every PUBACK the client returns.
It can also cut a client's connection (a network fault) and hold the broker's
answers back (PUBACKs that do not arrive).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections import Counter
from collections.abc import Iterator

PUBLISH, PUBACK, CONNECT = 3, 4, 1


def _varint(buf: bytes | bytearray, pos: int) -> tuple[int, int] | None:
    value, shift = 0, 0
    for i in range(4):
        if pos + i >= len(buf):
            return None
        byte = buf[pos + i]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos + i + 1
        shift += 7
    raise ValueError("malformed remaining length")


class _Framer:
    def __init__(self) -> None:
        self.buf = bytearray()

    def feed(self, data: bytes) -> Iterator[tuple[int, int, bytes]]:
        self.buf += data
        while len(self.buf) >= 2:
            parsed = _varint(self.buf, 1)
            if parsed is None:
                return
            length, start = parsed
            if len(self.buf) < start + length:
                return
            header = self.buf[0]
            body = bytes(self.buf[start:start + length])
            del self.buf[:start + length]
            yield header >> 4, header & 0x0F, body


class _Conn:
    def __init__(self, tap: Tap, client: socket.socket) -> None:
        self.tap = tap
        self.client = client
        self.broker = socket.create_connection(("127.0.0.1", tap.broker_port))
        self.client_id = ""
        self.v5 = False
        self.inflight: dict[int, str] = {}
        self.held = False
        self.held_data: list[bytes] = []
        #: The client's packets wait here while set (a slow network towards the broker).
        self.upstream_held = False
        self.upstream_data: list[bytes] = []
        self.closed = False
        self.send_lock = threading.Lock()

    def start(self) -> None:
        threading.Thread(target=self._pump, args=(self.client, self.broker, True), daemon=True).start()
        threading.Thread(target=self._pump, args=(self.broker, self.client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, upstream: bool) -> None:
        framer = _Framer()
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                for kind, flags, body in framer.feed(data):
                    self._observe(kind, flags, body, upstream)
                with self.send_lock:
                    if not upstream and self.held:
                        self.held_data.append(data)
                        continue
                    if upstream and self.upstream_held:
                        self.upstream_data.append(data)
                        continue
                dst.sendall(data)
                if upstream:
                    with self.tap.lock:
                        self.tap.upstream_bytes += len(data)
        except (OSError, ValueError):
            pass
        self.close()

    def _observe(self, kind: int, flags: int, body: bytes, upstream: bool) -> None:
        tap = self.tap
        if upstream and kind == CONNECT:
            name_len = int.from_bytes(body[0:2], "big")
            pos = 2 + name_len
            self.v5 = body[pos] == 5
            pos += 4  # level, flags, keepalive
            if self.v5:
                parsed = _varint(body, pos)
                assert parsed is not None
                plen, pos = parsed
                pos += plen
            id_len = int.from_bytes(body[pos:pos + 2], "big")
            self.client_id = body[pos + 2:pos + 2 + id_len].decode()
        elif not upstream and kind == PUBLISH and (flags >> 1) & 3:
            tlen = int.from_bytes(body[0:2], "big")
            topic = body[2:2 + tlen].decode()
            pid = int.from_bytes(body[2 + tlen:4 + tlen], "big")
            with tap.lock:
                self.inflight[pid] = topic
                tap.sent[topic] += 1
        elif upstream and kind == PUBACK:
            pid = int.from_bytes(body[0:2], "big")
            with tap.lock:
                topic = self.inflight.pop(pid, None)
                if topic is not None:
                    tap.acked[topic] += 1

    def release_upstream(self) -> None:
        with self.send_lock:
            self.upstream_held = False
            data, self.upstream_data = self.upstream_data, []
            _send_all(self.broker, data)

    def release(self) -> None:
        with self.send_lock:
            self.held = False
            data, self.held_data = self.held_data, []
            _send_all(self.client, data)

    def close(self) -> None:
        with self.tap.lock:
            if self.closed:
                return
            self.closed = True
            self.inflight.clear()  # the broker will resend these to the next connection
        for sock in (self.client, self.broker):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()


def _send_all(sock: socket.socket, chunks: list[bytes]) -> None:
    """Forward what was held, in order (a closed socket drops it, as a cut network would)."""
    for chunk in chunks:
        with contextlib.suppress(OSError):
            sock.sendall(chunk)


class Tap:
    def __init__(self, broker_port: int = 1883) -> None:
        self.broker_port = broker_port
        self.lock = threading.Lock()
        self.conns: list[_Conn] = []
        self.sent: Counter[str] = Counter()
        self.acked: Counter[str] = Counter()
        #: Bytes forwarded client -> broker, every connection together.
        self.upstream_bytes = 0
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(64)
        self.port = self.server.getsockname()[1]
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            try:
                conn = _Conn(self, client)
            except OSError:
                client.close()
                continue
            with self.lock:
                stopped = self._stop
                if not stopped:
                    self.conns.append(conn)
            if stopped:  # accepted while close() ran: close() did not see it, so close it here
                conn.close()
                return
            conn.start()

    def unacked(self, topic: str) -> int:
        with self.lock:
            return sum(1 for c in self.conns if not c.closed for t in c.inflight.values() if t == topic)

    def _matching(self, client_ids: set[str]) -> list[_Conn]:
        with self.lock:
            return [c for c in self.conns if not c.closed and c.client_id in client_ids]

    def holding(self) -> bool:
        with self.lock:
            return any(c.held and not c.closed for c in self.conns)

    def cut(self, client_ids: set[str]) -> None:
        for conn in self._matching(client_ids):
            conn.close()

    @contextlib.contextmanager
    def hold(self, client_ids: set[str]) -> Iterator[None]:
        conns = self._matching(client_ids)
        for conn in conns:
            with conn.send_lock:
                conn.held = True
        try:
            yield
        finally:
            for conn in conns:
                conn.release()

    def hold_upstream(self, client_ids: set[str]) -> list[_Conn]:
        """Keep these clients' packets from the broker until ``release_upstream`` (or the
        client closes its socket: then they are dropped, as a cut network would)."""
        conns = self._matching(client_ids)
        for conn in conns:
            with conn.send_lock:
                conn.upstream_held = True
        return conns

    def close(self) -> None:
        with self.lock:
            self._stop = True
            conns = list(self.conns)
        with contextlib.suppress(OSError):
            self.server.close()
        for conn in conns:
            conn.close()
