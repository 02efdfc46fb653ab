"""Issue 15, item 4 on NATS: the failure taxonomy against a private nats-server with a user and password.

Bad credentials -> AuthenticationError (never recoverable, no password in it,
sync and async); nothing listening -> BrokerUnreachableError; the right
credentials work; a body over the server's max_payload is refused before
sending, with the reason, and the connection is untouched.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

import ackbridge
from ackbridge.errors import AuthenticationError, BrokerUnreachableError
from ackbridge.messages import ConfirmStatus
from ackbridge.testing.faults import faults
from ackbridge.testing.twins import Twin
from tests.failures.private_mosquitto import free_port
from tests.failures.private_nats import PrivateNats
from tests.failures.test_failure_taxonomy import CANARY, _connect_error, _connect_error_async, _no_secret

pytestmark = pytest.mark.nats


@pytest.fixture(scope="module")
def auth_nats() -> Iterator[PrivateNats]:
    with PrivateNats(users={"alice": "right-password"}) as server:
        yield server


@pytest.mark.parametrize("face", ["sync", "async"])
@pytest.mark.parametrize("who", ["wrong-password", "unknown-user", "no-credentials"])
def test_bad_credentials_are_authentication_errors(face: str, who: str, auth_nats: PrivateNats) -> None:
    url = {"wrong-password": auth_nats.url("alice", CANARY), "unknown-user": auth_nats.url("mallory", CANARY),
           "no-credentials": auth_nats.url()}[who]
    error = (_connect_error if face == "sync" else _connect_error_async)(url, connect_timeout=5)
    assert isinstance(error, AuthenticationError), (who, type(error), error)
    assert error.recoverable is False
    assert "Authorization Violation" in str(error)
    if who != "no-credentials":
        assert "***" in str(error)
    _no_secret(error)


def test_right_credentials_work(auth_nats: PrivateNats) -> None:
    subject = f"abtest.auth.{uuid.uuid4().hex[:8]}"
    auth_nats.add_stream(subject, user="alice", password="right-password")
    with ackbridge.connect(auth_nats.url("alice", "right-password")) as conn:
        assert conn.publish(subject, b"x").result(10).confirmed
        delivery = conn.consume(subject).get(timeout=10)
        assert delivery is not None and delivery.body == b"x"
        delivery.ack()


@pytest.mark.parametrize("face", ["sync", "async"])
def test_nothing_listening_reads_cleanly(face: str) -> None:
    url = f"nats://user:{CANARY}@127.0.0.1:{free_port()}"
    error = (_connect_error if face == "sync" else _connect_error_async)(url, connect_timeout=3)
    assert isinstance(error, BrokerUnreachableError) and error.recoverable, error
    assert "refused" in str(error).lower(), error
    _no_secret(error)


@pytest.mark.parametrize("face", ["sync", "async"])
def test_over_max_payload_is_refused_before_sending(face: str) -> None:
    subject = f"abtest.size.{uuid.uuid4().hex[:8]}"
    twin = Twin(face)
    with PrivateNats(extra="max_payload: 1024\n") as server:
        server.add_stream(subject)
        conn = twin.connect(server.url())
        try:
            generation = faults(conn).generation
            outcome = conn.publish(subject, bytes(2000)).result(timeout=10)
            assert outcome.status is ConfirmStatus.REFUSED and "max_payload" in outcome.reason, outcome
            assert conn.publish(subject, b"small").result(timeout=10).confirmed
            assert faults(conn).generation == generation, "the connection was never touched"
            assert server.stream_messages(subject) == 1, "only the small one is on the server"
        finally:
            conn.close()
            twin.close()
