"""mqtts:// against a Mosquitto listener this test starts with a throw-away CA."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import ackbridge
from ackbridge.messages import ConfirmStatus
from ackbridge_mqtt.transport import TLSVerificationError

pytestmark = pytest.mark.mqtt


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _make_ca(d: Path, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
             "-keyout", f"{name}.key", "-out", f"{name}.pem", cwd=d)


@pytest.fixture
def tls_broker() -> Iterator[tuple[int, Path, Path]]:
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
    for pem in tmp_path.iterdir():
        pem.chmod(0o644)  # readable by the mosquitto user; throw-away test keys only
    conf = tmp_path / "mosquitto.conf"
    conf.write_text(
        f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n"
        f"cafile {tmp_path / 'ca.pem'}\ncertfile {tmp_path / 'server.pem'}\nkeyfile {tmp_path / 'server.key'}\n"
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
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(tmp_path, ignore_errors=True)


def test_mqtts_verifies_with_the_right_ca(tls_broker: tuple[int, Path, Path]) -> None:
    port, ca, _ = tls_broker
    with ackbridge.connect(f"mqtts://user:canary-pw-123@127.0.0.1:{port}", tls_ca_file=str(ca)) as conn:
        assert "canary-pw-123" not in repr(conn) + repr(conn._transport)
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
