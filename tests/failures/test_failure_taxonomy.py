"""Issue 15, item 4: one failure taxonomy on every plugin, sync and async, on the real brokers.

Bad credentials -> AuthenticationError (never recoverable, no password in it);
unknown vhost -> AccessDeniedError; nothing listening -> BrokerUnreachableError
with a clean message; oversized publishes refused with the broker's reason
(or before sending); publishing during an outage -> unknown "not sent", no raise.
"""

from __future__ import annotations

import asyncio
import traceback
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import ackbridge
from ackbridge.errors import (
    AccessDeniedError,
    AckbridgeError,
    AuthenticationError,
    BrokerUnreachableError,
)
from ackbridge.messages import ConfirmStatus
from ackbridge.testing.faults import faults
from tests.conftest import require_port
from tests.failures.private_mosquitto import PrivateMosquitto, free_port

CANARY = "Canary-pw-7f3a"


def _connect_error(url: str, **options: Any) -> AckbridgeError:
    with pytest.raises(AckbridgeError) as info:
        ackbridge.connect(url, reconnect=False, **options).close()
    return info.value


def _connect_error_async(url: str, **options: Any) -> AckbridgeError:
    async def run() -> None:
        conn = await ackbridge.connect_async(url, reconnect=False, **options)
        await conn.close()

    with pytest.raises(AckbridgeError) as info:
        asyncio.run(run())
    return info.value


def _no_secret(error: BaseException) -> None:
    text = "".join(traceback.format_exception(error)) + repr(error)
    assert CANARY not in text, text


@pytest.fixture(scope="module")
def auth_mosquitto() -> Iterator[PrivateMosquitto]:
    with PrivateMosquitto(users={"alice": "right-password"}) as broker:
        yield broker


def _bad_credential_urls(auth_mosquitto: PrivateMosquitto) -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"amqp://guest:{CANARY}@127.0.0.1:5672/", {}),
        (f"amqp10://guest:{CANARY}@127.0.0.1:5672", {}),
        # RabbitMQ answers a refused AMQP 1.0 login after ~3 s: it must not read as a timeout.
        (f"amqp10://guest:{CANARY}@127.0.0.1:5672", {"connect_timeout": 2}),
        (auth_mosquitto.url("alice", CANARY), {"protocol": "5"}),
        (auth_mosquitto.url("alice", CANARY), {"protocol": "3.1.1"}),
    ]


@pytest.mark.rabbitmq
@pytest.mark.amqp10
@pytest.mark.mqtt
@pytest.mark.parametrize("face", ["sync", "async"])
def test_bad_credentials_are_authentication_errors(face: str, auth_mosquitto: PrivateMosquitto) -> None:
    require_port(5672, "RabbitMQ")
    for url, options in _bad_credential_urls(auth_mosquitto):
        error = (_connect_error if face == "sync" else _connect_error_async)(url, **options)
        assert isinstance(error, AuthenticationError), (url, options, type(error), error)
        assert error.recoverable is False
        assert "***" in str(error)
        _no_secret(error)


@pytest.mark.mqtt
def test_right_credentials_on_the_private_broker_work(auth_mosquitto: PrivateMosquitto) -> None:
    with ackbridge.connect(auth_mosquitto.url("alice", "right-password")) as conn:
        topic = f"abtest/auth/{uuid.uuid4().hex[:8]}"
        conn.declare_queue(topic, dead_letter=False)  # a session holds it: a publish no one holds is refused
        assert conn.publish(topic, b"x").result(10).confirmed


@pytest.mark.rabbitmq
@pytest.mark.parametrize("face", ["sync", "async"])
def test_unknown_vhost_is_access_denied(face: str) -> None:
    require_port(5672, "RabbitMQ")
    url = f"amqp://guest:guest@127.0.0.1:5672/no-such-vhost-{uuid.uuid4().hex[:6]}"
    error = (_connect_error if face == "sync" else _connect_error_async)(url)
    assert isinstance(error, AccessDeniedError) and not error.recoverable, error
    assert "vhost" in str(error)


@pytest.mark.parametrize("face", ["sync", "async"])
@pytest.mark.parametrize("scheme", ["amqp", "amqp10", "mqtt"])
def test_nothing_listening_reads_cleanly(scheme: str, face: str) -> None:
    url = f"{scheme}://user:{CANARY}@127.0.0.1:{free_port()}"
    error = (_connect_error if face == "sync" else _connect_error_async)(url, connect_timeout=5)
    assert isinstance(error, BrokerUnreachableError) and error.recoverable, error
    assert "refused" in str(error).lower(), error
    assert "AMQPConnectionError" not in str(error)
    _no_secret(error)


# ---- oversized publishes --------------------------------------------------------------
@pytest.mark.rabbitmq
@pytest.mark.slow
def test_rabbitmq_body_over_max_message_size_is_refused_with_the_reason() -> None:
    require_port(5672, "RabbitMQ")
    queue = f"abtest-size-{uuid.uuid4().hex[:8]}"
    with ackbridge.connect("amqp://guest:guest@127.0.0.1:5672/") as conn:
        conn.declare_queue(queue, dead_letter=False)
        try:
            # RabbitMQ 3.10's default max_message_size is 128 MiB (not changed here: the broker is shared).
            big = conn.publish(queue, bytes(134217728 + 1)).result(timeout=60)
            assert big.status is ConfirmStatus.REFUSED, big
            assert "larger than configured max size" in big.reason
            assert conn.publish(queue, b"after").result(timeout=10).confirmed, "the channel came back"
        finally:
            conn.delete_queue(queue, dead_letter=False)


@pytest.mark.rabbitmq
@pytest.mark.parametrize("fast_path", ["1", "0"])
def test_rabbitmq_headers_over_the_frame_size_are_refused_before_sending(
        fast_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    require_port(5672, "RabbitMQ")
    monkeypatch.setenv("ACKBRIDGE_PIKA_FAST_PATH", fast_path)
    queue = f"abtest-hdr-{uuid.uuid4().hex[:8]}"
    with ackbridge.connect("amqp://guest:guest@127.0.0.1:5672/") as conn:
        conn.declare_queue(queue, dead_letter=False)
        try:
            generation = faults(conn).generation
            consumer = conn.consume(queue)
            outcome = conn.publish(queue, b"x", headers={"big": "h" * 230_000}).result(timeout=10)
            assert outcome.status is ConfirmStatus.REFUSED and "frame_max" in outcome.reason, outcome
            assert conn.publish(queue, b"after").result(timeout=10).confirmed
            delivery = consumer.get(timeout=10)
            assert delivery is not None and delivery.body == b"after"
            delivery.ack()
            # the connection (and the consumer on it) was never touched
            assert faults(conn).generation == generation
        finally:
            conn.delete_queue(queue, dead_letter=False)


@pytest.mark.mqtt
def test_mqtt5_over_the_brokers_maximum_packet_size_is_refused_before_sending() -> None:
    """Mosquitto's max_packet_size reaches an MQTT 5 client in CONNACK; sent anyway, the
    PUBLISH would end the connection, so it is refused before sending."""
    with PrivateMosquitto(extra="max_packet_size 1100\n") as broker, \
            ackbridge.connect(broker.url(), protocol="5") as conn:
        generation = faults(conn).generation
        outcome = conn.publish(f"abtest/size/{uuid.uuid4().hex[:8]}", bytes(5000)).result(timeout=10)
        assert outcome.status is ConfirmStatus.REFUSED and "Maximum Packet Size (1100" in outcome.reason, outcome
        conn.declare_queue("abtest/size/small", dead_letter=False)
        assert conn.publish("abtest/size/small", b"x").result(timeout=10).confirmed
        assert faults(conn).generation == generation


@pytest.mark.mqtt
def test_mqtt_message_size_limit_cannot_be_told_and_the_table_says_so() -> None:
    """message_size_limit: v5 drops the connection (unknown), 3.1.1 PUBACKs and drops (confirmed!)."""
    with PrivateMosquitto(extra="message_size_limit 1000\n") as broker:
        with ackbridge.connect(broker.url(), protocol="3.1.1") as conn:
            assert conn.publish("abtest/size/x", bytes(5000)).result(timeout=10).confirmed  # the broker lied
            note = conn.capabilities.support(ackbridge.Verb.CONFIRM_REFUSED).how
            assert "message_size_limit" in note, note
        with ackbridge.connect(broker.url(), protocol="5", reconnect=False) as conn:
            assert conn.publish("abtest/size/x", bytes(5000)).result(timeout=10).status is ConfirmStatus.UNKNOWN


def test_local_over_max_message_bytes_is_refused(tmp_path: Any) -> None:
    with ackbridge.connect(f"local://{tmp_path}/b.db", max_message_bytes=100) as conn:
        conn.declare_queue("q")
        outcome = conn.publish("q", bytes(101)).result(timeout=10)
        assert outcome.status is ConfirmStatus.REFUSED and "max_message_bytes" in outcome.reason


# ---- publishing during an outage: one rule --------------------------------------------
def _outage_urls(tmp_path: Any) -> list[tuple[str, dict[str, Any]]]:
    return [("amqp://guest:guest@127.0.0.1:5672/", {}), ("mqtt://127.0.0.1:1883", {"protocol": "5"}),
            ("amqp10://guest:guest@127.0.0.1:5672", {})]
    # The embedded broker has no network to lose: its sever ends a generation, publishing goes on.


@pytest.mark.rabbitmq
@pytest.mark.mqtt
@pytest.mark.amqp10
def test_publish_during_an_outage_is_unknown_not_sent_on_every_plugin(tmp_path: Any) -> None:
    for url, options in _outage_urls(tmp_path):
        with ackbridge.connect(url, reconnect=False, **options) as conn:
            faults(conn).sever("test outage")
            outcome = conn.publish("abtest-outage", b"x").result(timeout=15)
            assert outcome.status is ConfirmStatus.UNKNOWN, (url, outcome)
            assert "sent" in outcome.reason or "not connected" in outcome.reason, (url, outcome)
