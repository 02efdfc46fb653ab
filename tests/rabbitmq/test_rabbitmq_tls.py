"""amqps against a real RabbitMQ TLS listener, opened by the test set-up on a free loopback port.

The shared broker (127.0.0.1:5672) has no TLS listener. The module fixture
generates a throw-away CA and a server certificate for IP 127.0.0.1 (openssl
CLI), then asks the running node to open an extra ``amqp/ssl`` listener
(``rabbit_networking:start_ssl_listener/3`` via ``rabbitmqctl eval``; no
restart) and closes it again afterwards. Under CI=true a listener that cannot
be opened fails the tests; locally it skips them.
"""

from __future__ import annotations

import asyncio
import grp
import json
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ackbridge.connect import connect, connect_async
from ackbridge.testing import eventually
from ackbridge.testing.faults import transport_of
from ackbridge.transport.tls import TLSVerificationError
from tests.conftest import IN_CI, require_port
from tests.rabbitmq.harness import TEST_PASSWORD, TEST_USER, RabbitHarness, ensure_test_user, queue_counts

pytestmark = pytest.mark.rabbitmq


@dataclass(frozen=True)
class TLSListener:
    port: int
    ca: Path  # the CA that signed the listener's certificate
    other_ca: Path  # a CA that did not

    def url(self, host: str = "127.0.0.1") -> str:
        return f"amqps://{TEST_USER}:{TEST_PASSWORD}@{host}:{self.port}/"


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def _make_ca(directory: Path, name: str) -> tuple[Path, Path]:
    key, cert = directory / f"{name}.key", directory / f"{name}.pem"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
             "-days", "1", "-subj", f"/CN=ackbridge-test-{name}")
    return key, cert


def _make_server_cert(directory: Path, ca_key: Path, ca: Path) -> tuple[Path, Path]:
    key, csr, cert, ext = (directory / n for n in ("server.key", "server.csr", "server.pem", "server.ext"))
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
             "-subj", "/CN=127.0.0.1")
    # Only the IP: "localhost" must NOT match, for the host name test.
    ext.write_text("subjectAltName=IP:127.0.0.1\n")
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
             "-out", str(cert), "-days", "1", "-extfile", str(ext))
    return cert, key


def _readable_by_broker(directory: Path, files: list[Path]) -> None:
    """The node runs as user rabbitmq: it must traverse the dir and read cert and key."""
    directory.chmod(0o755)
    try:
        gid = grp.getgrnam("rabbitmq").gr_gid
    except KeyError:
        gid = None
    for path in files:
        if gid is not None and os.geteuid() == 0:
            os.chown(path, -1, gid)
            path.chmod(0o640)
        else:
            path.chmod(0o644)  # a throw-away test key


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _erl_str(path: Path | str) -> str:
    return json.dumps(str(path))  # an Erlang string literal for a plain path


def _eval(expr: str) -> str:
    done = subprocess.run(["rabbitmqctl", "-q", "eval", expr], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"rabbitmqctl eval failed ({done.returncode}): {done.stderr.strip() or done.stdout}")
    return done.stdout.strip()


def _start_listener(port: int, ca: Path, cert: Path, key: Path) -> None:
    options = (f"[{{cacertfile, {_erl_str(ca)}}}, {{certfile, {_erl_str(cert)}}}, {{keyfile, {_erl_str(key)}}}, "
               "{verify, verify_none}, {fail_if_no_peer_cert, false}]")
    out = _eval("ok = app_utils:start_applications([asn1, crypto, public_key, ssl]), "
                f"rabbit_networking:start_ssl_listener({{\"127.0.0.1\", {port}}}, "
                f"rabbit_networking:fix_ssl_options({options}), 1).")
    if out != "ok":
        raise RuntimeError(f"start_ssl_listener on 127.0.0.1:{port} answered {out}")


def _stop_listener(port: int) -> None:
    _eval(f"rabbit_networking:stop_tcp_listener({{\"127.0.0.1\", {port}}}).")


def _listener_ports() -> str:
    return _eval("[P || {listener, _, 'amqp/ssl', _, _, P, _} <- rabbit_networking:active_listeners()].")


@pytest.fixture(scope="module")
def tls_listener() -> Iterator[TLSListener]:
    require_port(5672, "RabbitMQ")
    require_port(15672, "RabbitMQ management API")
    directory = Path(tempfile.mkdtemp(prefix="ackbridge-tls-"))
    port = None
    try:
        try:
            ca_key, ca = _make_ca(directory, "ca")
            _, other_ca = _make_ca(directory, "other-ca")
            cert, key = _make_server_cert(directory, ca_key, ca)
            _readable_by_broker(directory, [ca, cert, key])
            port = _free_port()
            _start_listener(port, ca, cert, key)
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            port = None
            message = f"could not open a RabbitMQ TLS listener for the amqps tests: {exc}"
            if IN_CI:
                pytest.fail(message + " -- CI needs it (rabbitmqctl as root, openssl)")
            pytest.skip(message + " (set CI=true to make this a failure)")
        require_port(port, "RabbitMQ TLS listener (just opened)")
        ensure_test_user()
        yield TLSListener(port, ca, other_ca)
    finally:
        if port is not None:
            _stop_listener(port)
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def classic() -> Iterator[RabbitHarness]:
    h = RabbitHarness("classic")
    yield h
    h.cleanup()


def _broker_connection(connection_name: str) -> dict[str, object]:
    """What the broker (not the client) records about one connection (rabbitmqctl: no stats lag)."""
    out = subprocess.run(
        ["rabbitmqctl", "-q", "list_connections", "--formatter", "json",
         "name", "port", "ssl", "ssl_protocol", "peer_cert_subject", "client_properties"],
        capture_output=True, text=True, timeout=60, check=True).stdout
    rows = [r for r in json.loads(out or "[]") if connection_name in json.dumps(r.get("client_properties"))]
    assert len(rows) == 1, f"connection {connection_name} on the broker: {rows}"
    return dict(rows[0])


def _assert_tls_on_broker(listener: TLSListener, connection_name: str) -> None:
    row = _broker_connection(connection_name)
    assert row["ssl"] is True, row
    assert row["port"] == listener.port, row
    assert str(row["ssl_protocol"]).startswith("tlsv1."), row


def _assert_verification_error(err: BaseException, reason: str) -> None:
    text = str(err)
    assert "TLS certificate verification failed" in text and "tls_ca_file" in text, text
    assert reason in text, text
    chain: list[BaseException] = []
    cur: BaseException | None = err
    while cur is not None and len(chain) < 10:
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    for exc in chain:
        assert TEST_PASSWORD not in str(exc) and TEST_PASSWORD not in repr(exc), repr(exc)


# ---- (1) the right CA: verified TLS, and the broker sees a TLS connection -------------------
def test_amqps_verified_publish_consume_ack(tls_listener: TLSListener, classic: RabbitHarness) -> None:
    queue = classic.new_queue()
    with connect(tls_listener.url(), tls_ca_file=str(tls_listener.ca), reconnect=False) as conn:
        _assert_tls_on_broker(tls_listener, transport_of(conn).connection_name)
        assert conn.publish(queue, b"over-tls").result(10).confirmed
        consumer = conn.consume(queue, prefetch=1)
        delivery = consumer.get(10)
        assert delivery is not None and delivery.body == b"over-tls"
        delivery.ack()
        consumer.close()
    eventually(lambda: queue_counts().get(queue, (0, 0)) == (0, 0), message="acked broker-side")


def test_async_amqps_verified_publish_consume_ack(tls_listener: TLSListener, classic: RabbitHarness) -> None:
    queue = classic.new_queue()

    async def run() -> None:
        conn = await connect_async(tls_listener.url(), tls_ca_file=str(tls_listener.ca), reconnect=False)
        try:
            await asyncio.to_thread(_assert_tls_on_broker, tls_listener, transport_of(conn).connection_name)
            assert (await (await conn.publish(queue, b"over-tls")).result(10)).confirmed
            consumer = await conn.consume(queue, prefetch=1)
            delivery = await consumer.get(10)
            assert delivery is not None and delivery.body == b"over-tls"
            await delivery.ack()
            await consumer.close()
        finally:
            await conn.close()

    asyncio.run(run())
    eventually(lambda: queue_counts().get(queue, (0, 0)) == (0, 0), message="acked broker-side")


# ---- (2) verification is on by default, and (3) the host name is checked ------------------
# The listener sends its CA along with its certificate (cacertfile), so OpenSSL's reason is
# "self-signed certificate in certificate chain": that CA is not among the trusted ones.
# Every face fails the same way: TLSVerificationError (a configuration error, not
# recoverable: retrying cannot help), with OpenSSL's reason, on pika (sync, and its
# threaded asyncio transport) as on aio-pika.
FACES = ("sync", "threaded", "aio-pika")
UNTRUSTED = [
    ("127.0.0.1", "other", "self-signed certificate in certificate chain"),  # a CA that did not sign it
    ("127.0.0.1", None, "self-signed certificate in certificate chain"),  # no tls_ca_file: the system CAs
    ("localhost", "right", "Hostname mismatch"),  # the certificate names IP 127.0.0.1 only
]


def _connect_on(face: str, url: str, **options: Any) -> None:
    """Connect on *face*; close again if it (wrongly) succeeds."""
    if face == "sync":
        connect(url, **options).close()
        return

    async def run() -> None:
        conn = await connect_async(url, asyncio_transport=face, **options)
        await conn.close()

    asyncio.run(run())


@pytest.mark.parametrize("face", FACES)
@pytest.mark.parametrize(("host", "ca", "reason"), UNTRUSTED)
def test_an_untrusted_certificate_is_the_same_error_on_every_face(tls_listener: TLSListener, face: str, host: str,
                                                                  ca: str | None, reason: str) -> None:
    ca_file = {"other": tls_listener.other_ca, "right": tls_listener.ca, None: None}[ca]
    options: dict[str, Any] = {"tls_ca_file": str(ca_file)} if ca_file is not None else {}
    with pytest.raises(TLSVerificationError) as err:
        _connect_on(face, tls_listener.url(host), connect_timeout=5, reconnect=False, **options)
    _assert_verification_error(err.value, reason)
    assert not err.value.recoverable


def test_amqps_tls_verify_false_warns_and_connects(tls_listener: TLSListener) -> None:
    with pytest.warns(UserWarning, match="NOT verified"):
        conn = connect(tls_listener.url("localhost"), tls_verify=False, reconnect=False)
    with conn:
        _assert_tls_on_broker(tls_listener, transport_of(conn).connection_name)


def test_tls_listener_is_open_on_the_broker(tls_listener: TLSListener) -> None:
    assert str(tls_listener.port) in _listener_ports()
