"""The brokers whose delayed retry is held by the consumer (``retry_method`` holding):
AMQP 1.0 on RabbitMQ, RabbitMQ streams and MQTT 3.1.1, each with a raw reader of what
it holds (tests/pipeline/test_held_retry.py, tests/scoreboard/test_held_retry_rows.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

import ackbridge
from tests.conftest import require_port
from tests.pipeline.brokers import RABBIT_URL, queue_name, wait_for
from tests.pipeline.test_dead_letter_headers_raw import _declare_durable, _delete, _proton_read_one

#: The broker's own port per held broker (a FaultProxy in front of it cuts the pipeline's connection).
PORTS = {"amqp10": 5672, "rabbitmq-streams": 5552, "mqtt3.1.1": 1883}


@dataclass
class HeldBroker:
    """One broker under test: where to publish and consume, how its side is read."""

    name: str
    url: str
    queue: str
    dlq: str
    #: () -> True when the broker holds nothing of the queue (asked once the pipeline is closed).
    drained: Callable[[], bool]
    #: (expected) -> what the dead-letter destination holds once it holds *expected* messages:
    #: [(body, headers as the raw client reads them)].
    dead: Callable[[int], list[tuple[bytes, dict[str, Any]]]]
    cleanup: list[Callable[[], None]] = field(default_factory=list)
    #: The headers travel (the dead-letter copy carries the set).
    carries_headers: bool = True
    #: Asking takes something from the broker (a look at an MQTT session PUBACKs what it shows).
    asked_once: bool = False

    def wait_drained(self, what: str) -> None:
        if self.asked_once:
            assert self.drained(), what
        else:
            wait_for(self.drained, what)


# ---- AMQP 1.0 on RabbitMQ -------------------------------------------------------------------
@contextmanager
def _amqp10() -> Iterator[HeldBroker]:
    require_port(5672, "RabbitMQ (AMQP 1.0 plugin)")
    name = queue_name("held-amqp10")
    _declare_durable(name, name + ".dlq")

    def depth(queue: str) -> int:
        # A passive declare: the count now (the management API's can be seconds old). Asked
        # once every consumer is closed, when every message the queue holds is ready.
        import pika

        connection = pika.BlockingConnection(pika.URLParameters(RABBIT_URL))
        try:
            return int(connection.channel().queue_declare(queue, passive=True).method.message_count)
        finally:
            connection.close()

    def dead(expected: int) -> list[tuple[bytes, dict[str, Any]]]:
        wait_for(lambda: depth(name + ".dlq") == expected, f"{expected} in the dead-letter queue")
        if not expected:
            return []
        body, message_id, headers = _proton_read_one(f"/amq/queue/{name}.dlq")
        return [(body, {**headers, "message-id": message_id})]

    try:
        yield HeldBroker("amqp10", "amqp10://guest:guest@127.0.0.1:5672", f"/amq/queue/{name}",
                         f"/amq/queue/{name}.dlq", lambda: depth(name) == 0, dead)
    finally:
        _delete(name, name + ".dlq")


# ---- RabbitMQ streams ----------------------------------------------------------------------
@contextmanager
def _streams() -> Iterator[HeldBroker]:
    require_port(5552, "RabbitMQ streams")
    from rstream.amqp import amqp_decoder

    from tests.rabbitmq_streams.harness import REFERENCE
    from tests.rabbitmq_streams.streams import StreamAdmin

    with StreamAdmin() as admin:
        queue = admin.new_stream("ab-test-held")
        dlq = queue + ".dlq"
        admin._loop.run(admin._client.create_stream(dlq), 15)  # the admin's own client: a name of ours
        admin.created.append(dlq)

        def drained() -> bool:
            # Settled means the stored offset is past the last record, and nothing was dead-lettered.
            last = max((offset for offset, _ in admin.records(queue)), default=None)
            return last is not None and admin.broker_offset(queue, REFERENCE) == last

        def dead(expected: int) -> list[tuple[bytes, dict[str, Any]]]:
            found = []
            for _, data in admin.records(dlq):
                message = amqp_decoder(data)  # rstream's own decoder: what a raw streams client reads
                headers = {str(k.decode() if isinstance(k, bytes) else k): v.decode() if isinstance(v, bytes) else v
                           for k, v in (message.application_properties or {}).items()}
                message_id = bytes(message.properties.message_id).decode()
                found.append((bytes(message.body), {**headers, "message-id": message_id}))
            return found

        yield HeldBroker("rabbitmq-streams", "rabbitmq-stream://guest:guest@127.0.0.1:5552/", queue, dlq,
                         drained, dead)


# ---- MQTT 3.1.1 ----------------------------------------------------------------------------
@contextmanager
def _mqtt311() -> Iterator[HeldBroker]:
    require_port(1883, "Mosquitto")
    from tests.pipeline.mqtt_sessions import URLS, held

    topic = queue_name("held-mqtt311")
    with ackbridge.connect(URLS["3.1.1"]) as conn:
        conn.declare_queue(topic)  # its persistent session and its dead-letter session
    try:
        # Mosquitto tells no depth: resuming a session with paho shows (and drains) what it holds,
        # so these are read only once the pipeline is closed.
        yield HeldBroker("mqtt3.1.1", URLS["3.1.1"], topic, topic + "/dlq", lambda: held(topic, "3.1.1") == [],
                         lambda _: [(m.body, m.properties) for m in held(topic + "/dlq", "3.1.1")],
                         carries_headers=False, asked_once=True)
    finally:
        with ackbridge.connect(URLS["3.1.1"]) as conn:
            conn.delete_queue(topic)


HELD = {"amqp10": _amqp10, "rabbitmq-streams": _streams, "mqtt3.1.1": _mqtt311}
WHERE = [pytest.param("amqp10", marks=pytest.mark.amqp10), pytest.param("rabbitmq-streams",
         marks=pytest.mark.rabbitmq_streams), pytest.param("mqtt3.1.1", marks=pytest.mark.mqtt)]
