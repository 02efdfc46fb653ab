"""mqtts:// against a Mosquitto listener this test starts with a throw-away CA."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import ackbridge
from ackbridge.errors import ConnectionLostError, InvalidOptionError
from ackbridge.messages import ConfirmStatus
from ackbridge.testing.faults import transport_of
from ackbridge.testing.processes import reap
from ackbridge_mqtt.errors import TLSVerificationError

pytestmark = pytest.mark.mqtt


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _make_ca(d: Path, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
             "-keyout", f"{name}.key", "-out", f"{name}.pem", cwd=d)


def _tls_broker(*, require_certificate: bool) -> Iterator[tuple[int, Path, Path]]:
    # Not pytest's tmp_path: its parents are 0700 and mosquitto drops privileges to its own user.
    tmp_path = Path(tempfile.mkdtemp(prefix="ab-mqtts-"))
    tmp_path.chmod(0o755)
    _make_ca(tmp_path, "ca")
    _make_ca(tmp_path, "otherca")
    (tmp_path / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", "server.key",
             "-out", "server.csr", cwd=tmp_path)
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "2", "-extfile", "ext.cnf", "-out", "server.pem", cwd=tmp_path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    if require_certificate:
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=ackbridge-client", "-keyout", "client.key",
                 "-out", "client.csr", cwd=tmp_path)
        _openssl("x509", "-req", "-in", "client.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                 "-days", "2", "-out", "client.pem", cwd=tmp_path)
    for pem in tmp_path.iterdir():
        pem.chmod(0o644)  # readable by the mosquitto user; throw-away test keys only
    conf = tmp_path / "mosquitto.conf"
    conf.write_text(
        f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n"
        f"cafile {tmp_path / 'ca.pem'}\ncertfile {tmp_path / 'server.pem'}\nkeyfile {tmp_path / 'server.key'}\n"
        + ("require_certificate true\n" if require_certificate else "")
    )
    proc = subprocess.Popen(["mosquitto", "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        end = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > end or proc.poll() is not None:
                    err = proc.stderr.read() if proc.stderr else b""
                    raise AssertionError(f"TLS mosquitto did not start: {err!r}") from None
                time.sleep(0.05)
        yield port, tmp_path / "ca.pem", tmp_path / "otherca.pem"
    finally:
        reap(proc, sig=signal.SIGTERM, timeout=10)  # closes its stderr pipe too
        shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.fixture
def tls_broker() -> Iterator[tuple[int, Path, Path]]:
    yield from _tls_broker(require_certificate=False)


@pytest.fixture
def mtls_broker() -> Iterator[tuple[int, Path, Path]]:
    """A listener that requires a client certificate signed by its CA (client.pem / client.key)."""
    yield from _tls_broker(require_certificate=True)


def test_mqtts_verifies_with_the_right_ca(tls_broker: tuple[int, Path, Path]) -> None:
    port, ca, _ = tls_broker
    with ackbridge.connect(f"mqtts://user:canary-pw-123@127.0.0.1:{port}", tls_ca_file=str(ca)) as conn:
        assert "canary-pw-123" not in repr(conn) + repr(transport_of(conn))
        conn.declare_queue("abtest/tls", dead_letter=False)  # a session holds it: a publish no one holds is refused
        assert conn.publish("abtest/tls", b"x").result(timeout=10).status is ConfirmStatus.CONFIRMED


def test_mqtts_bad_ca_fails_clearly_without_password(tls_broker: tuple[int, Path, Path]) -> None:
    port, _, other = tls_broker
    with pytest.raises(TLSVerificationError, match="certificate verification failed") as err:
        ackbridge.connect(f"mqtts://user:canary-pw-123@127.0.0.1:{port}", tls_ca_file=str(other))
    assert "canary-pw-123" not in str(err.value)
    assert "tls_ca_file" in str(err.value)


def test_mqtts_verification_is_on_by_default(tls_broker: tuple[int, Path, Path]) -> None:
    port, _, _ = tls_broker
    with pytest.raises(TLSVerificationError):
        ackbridge.connect(f"mqtts://127.0.0.1:{port}")  # system CAs do not know our throw-away CA


def test_mqtts_client_certificate(mtls_broker: tuple[int, Path, Path]) -> None:
    port, ca, _ = mtls_broker
    folder = ca.parent
    with ackbridge.connect(f"mqtts://127.0.0.1:{port}", tls_ca_file=str(ca), tls_cert_file=str(folder / "client.pem"),
                           tls_key_file=str(folder / "client.key")) as conn:
        conn.declare_queue("abtest/mtls", dead_letter=False)
        assert conn.publish("abtest/mtls", b"x").result(timeout=10).status is ConfirmStatus.CONFIRMED


def test_mqtts_without_client_certificate_is_turned_away(mtls_broker: tuple[int, Path, Path]) -> None:
    port, ca, _ = mtls_broker
    # TLS 1.3: the handshake completes, then the broker drops the connection before CONNACK;
    # the connect fails at once (not after connect_timeout) and names the option.
    with pytest.raises(ConnectionLostError, match=r"before CONNACK.*tls_cert_file"):
        ackbridge.connect(f"mqtts://127.0.0.1:{port}", tls_ca_file=str(ca), connect_timeout=30)


def test_unreadable_client_certificate_names_the_option(tls_broker: tuple[int, Path, Path]) -> None:
    port, ca, _ = tls_broker
    with pytest.raises(InvalidOptionError, match="tls_cert_file"):
        ackbridge.connect(f"mqtts://127.0.0.1:{port}", tls_ca_file=str(ca), tls_cert_file=str(ca.parent / "nope.pem"))
