"""The fault proxy itself, against a tiny echo server on loopback."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import pytest

from ackbridge.testing.proxy import FaultProxy


@pytest.fixture
def echo_port() -> Iterator[int]:
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=lambda c=conn: _echo(c), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1]
    server.close()


def _echo(conn: socket.socket) -> None:
    with conn, contextlib.suppress(OSError):  # the proxy resets connections on purpose
        while data := conn.recv(4096):
            conn.sendall(data)


def test_forwards_then_resets(echo_port: int) -> None:
    with FaultProxy(echo_port) as proxy, contextlib.closing(
            socket.create_connection(("127.0.0.1", proxy.port), timeout=5)) as client:
        client.sendall(b"hello")
        assert client.recv(5) == b"hello"
        proxy.reset()
        with pytest.raises((ConnectionResetError, BrokenPipeError)):
            for _ in range(100):
                client.sendall(b"x")
                if client.recv(1) == b"":
                    raise ConnectionResetError("closed")


def test_blackhole_holds_bytes_until_lifted(echo_port: int) -> None:
    with FaultProxy(echo_port) as proxy, contextlib.closing(
            socket.create_connection(("127.0.0.1", proxy.port), timeout=5)) as client:
        client.sendall(b"a")
        assert client.recv(1) == b"a"
        proxy.blackhole(True)
        client.sendall(b"b")
        client.settimeout(0.5)
        with pytest.raises(TimeoutError):
            client.recv(1)
        proxy.blackhole(False)
        client.settimeout(5)
        assert client.recv(1) == b"b"


def test_cut_mid_frame_delivers_a_prefix_then_resets(echo_port: int) -> None:
    with FaultProxy(echo_port) as proxy, contextlib.closing(
            socket.create_connection(("127.0.0.1", proxy.port), timeout=5)) as client:
        proxy.cut_mid_frame(after_bytes=2)
        client.sendall(b"abcdef")
        received = b""
        try:
            while chunk := client.recv(10):
                received += chunk
        except ConnectionResetError:
            pass
        assert received in {b"", b"ab"}
        assert proxy.connections_seen == 1


def test_held_replies_pass_requests_and_hold_answers(echo_port: int) -> None:
    with FaultProxy(echo_port) as proxy, contextlib.closing(
            socket.create_connection(("127.0.0.1", proxy.port), timeout=5)) as client:
        with proxy.held_replies():
            client.sendall(b"q")  # reaches the server, which echoes it back
            client.settimeout(0.5)
            with pytest.raises(TimeoutError):
                client.recv(1)
        client.settimeout(5)
        assert client.recv(1) == b"q"


def test_a_clean_close_is_passed_on_as_a_close_with_every_byte_before_it() -> None:
    """A peer's FIN is forwarded as a FIN, after every byte it wrote: a reset there would
    make the receiving kernel drop what its application had not yet read (the tail of a
    burst a client writes just before closing). The other direction stays open to answer."""
    server = socket.create_server(("127.0.0.1", 0))
    total = 4 * 1024 * 1024

    def count_until_eof() -> None:
        conn, _ = server.accept()
        with conn:
            seen = 0
            while data := conn.recv(65536):
                seen += len(data)
            conn.sendall(str(seen).encode())  # after the FIN: only a half-close lets this through

    threading.Thread(target=count_until_eof, daemon=True).start()
    try:
        with FaultProxy(server.getsockname()[1]) as proxy, contextlib.closing(
                socket.create_connection(("127.0.0.1", proxy.port), timeout=10)) as client:
            client.sendall(b"x" * total)
            client.shutdown(socket.SHUT_WR)
            answer = b""
            while chunk := client.recv(64):
                answer += chunk
            assert answer == str(total).encode()
    finally:
        server.close()
