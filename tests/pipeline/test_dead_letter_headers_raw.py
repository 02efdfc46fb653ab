"""The policy's dead-letter header set, read by each broker's RAW client (issue 37).

On every broker that can dead-letter, a message whose handler always fails is
dead-lettered by the pipeline's policy (attempts exhausted), and the copy is read
without ackbridge: sqlite3 on the embedded broker's file, pika on RabbitMQ (classic
and quorum), python-qpid-proton on an AMQP 1.0 queue (the protocol the copy was
published with: its application-properties, typed as an AMQP 1.0 peer sees them; pika
on the same queue finds the set only as the encoded section in one binary header),
nats-py on the JetStream stream, paho-mqtt (MQTT 5 user properties) on the
dead-letter session (tests/pipeline/mqtt_sessions.py). Each test also reads the
broker-side state with that client: the original queue empty, the dead-letter
destination holding exactly that one copy.

Three attempts, 10 ms apart, on every broker here (``Capabilities.delayed_retry``): in
delay queues, or held by the consumer on AMQP 1.0. RabbitMQ streams reject nothing by
themselves (declared); the pipeline's dead-letter stream there is read with rstream's
decoder in tests/pipeline/test_held_retry.py, and MQTT 3.1.1's body-only copy with paho.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import re
import sqlite3
from collections.abc import Callable
from typing import Any

import pytest

import ackbridge
from ackbridge.capabilities import Level, RejectFate, RetryMethod, Verb
from ackbridge.pipeline import RedeliveryPolicy, Schedule
from ackbridge.pipeline.sync import Pipeline
from tests.conftest import require_port
from tests.pipeline.brokers import RABBIT_URL, broker, queue_name, wait_for

#: The names as docs/failure-policy.md documents them for a foreign client, spelled out
#: here rather than imported from ackbridge.pipeline.headers: a renamed constant would
#: rename the check with it, and a raw client only knows the documented text.
ATTEMPT = "ackbridge-retry-attempt"
ORIGINAL_QUEUE = "ackbridge-original-queue"
ORIGINAL_ID = "ackbridge-original-id"
FIRST_FAILURE = "ackbridge-first-failure"
LAST_FAILURE = "ackbridge-last-failure"
FAILURE_REASON = "ackbridge-failure-reason"

#: Where retries are emulated: three attempts, 10 ms apart (the least delay that keeps the
#: first and the last failure time, millisecond text, apart).
RETRY_SOON = Schedule.fixed(0.01)

#: What each raw reader checks besides the header set.
BODY = b"poison"
MESSAGE_ID = "p-1"
#: The URL password the handler's exception names: it must not reach the reason header.
PASSWORD = "hunter2"
#: The documented time format: RFC 3339 UTC text, millisecond precision (2026-11-28T18:36:11.537Z).
RFC3339_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def _moment(text: Any) -> datetime.datetime:
    assert isinstance(text, str) and RFC3339_UTC.fullmatch(text), text
    return datetime.datetime.fromisoformat(text)


def _always_failing(runs: list[Any]) -> Callable[[Any], None]:
    def handler(delivery: Any) -> None:
        runs.append(delivery.headers.get(ATTEMPT))
        raise KeyError(f"no such order; db at postgres://app:{PASSWORD}@db/orders (run {len(runs)})")

    return handler


def _dead_letter(conn: Any, queue: str, policy: RedeliveryPolicy, done: Callable[[], bool]) -> list[Any]:
    """Publish one message to *queue*, run an always-failing handler through the pipeline
    until *done* (read on the broker's side), and return the attempts the handler saw."""
    runs: list[Any] = []
    with Pipeline(conn, queue, policy=policy) as pipeline:
        pipeline.consume(_always_failing(runs))
        conn.publish(queue, BODY, message_id=MESSAGE_ID, headers={"tenant": "t1"}).result(10)
        wait_for(lambda: len(runs) >= policy.attempts and done(), "the dead-letter copy on the broker")
    return runs


def _check_header_set(headers: dict[str, Any], queue: str, attempts: int, *, attempt_value: Any) -> None:
    """The documented set (docs/failure-policy.md, "The header set"), as a raw client reads it."""
    assert headers[ATTEMPT] == attempt_value, headers
    assert headers[ORIGINAL_QUEUE] == queue, headers
    assert headers[ORIGINAL_ID] == MESSAGE_ID, headers
    first, last = _moment(headers[FIRST_FAILURE]), _moment(headers[LAST_FAILURE])
    assert first <= last, headers
    if attempts > 1:
        assert first < last, headers  # failures apart in time: first and last are not the same one
    reason = headers[FAILURE_REASON]
    assert reason.startswith("KeyError: "), reason
    assert f"(run {attempts})" in reason, reason  # the LAST failure's message
    assert PASSWORD not in reason and "app:***@" in reason, reason
    assert headers["tenant"] == "t1", headers  # the application's header travels on


# ---- the embedded broker: sqlite3 on its file ---------------------------------------------
def _local_rows(path: str) -> list[tuple[str, bytes, dict[str, Any]]]:
    """Every stored message (queue, body, props) of the embedded broker's file, read with
    sqlite3 (schema: plugins/ackbridge-local/ackbridge_local/store.py, ``messages``)."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return [(q, bytes(body), json.loads(props)) for q, body, props in
                db.execute("SELECT queue, body, props FROM messages ORDER BY id")]
    finally:
        db.close()


def test_local_dead_letter_headers_read_with_sqlite3() -> None:
    with broker("local") as b, ackbridge.connect(b.url) as conn:
        path = b.url.removeprefix("local://")
        queue = queue_name("raw-local")
        conn.declare_queue(queue)
        policy = RedeliveryPolicy(attempts=3, schedule=RETRY_SOON)
        runs = _dead_letter(conn, queue, policy,
                            lambda: [q for q, _, _ in _local_rows(path)] == [queue + ".dlq"])
        assert runs == [None, 2, 3]
        rows = _local_rows(path)
        # The file holds exactly one message, in the dead-letter queue (none in QUEUE or a delay queue).
        assert [q for q, _, _ in rows] == [queue + ".dlq"], rows
        _, body, props = rows[0]
        assert (body, props["message_id"]) == (BODY, MESSAGE_ID + "~dead")
        _check_header_set(props["headers"], queue, 3, attempt_value=3)


# ---- RabbitMQ classic and quorum: pika ------------------------------------------------------
def _rabbit_ready(name: str) -> int | None:
    """Ready messages of *name* by a raw pika passive declare (None: no such queue)."""
    import pika
    import pika.exceptions

    connection = pika.BlockingConnection(pika.URLParameters(RABBIT_URL))
    try:
        return int(connection.channel().queue_declare(name, passive=True).method.message_count)
    except pika.exceptions.ChannelClosedByBroker:
        return None
    finally:
        connection.close()


def _rabbit_read_one(name: str) -> tuple[bytes, str | None, dict[str, Any]]:
    """The first message of *name* by pika basic_get (body, message id, headers), given
    back (nack requeue) so the broker still holds it."""
    import pika

    connection = pika.BlockingConnection(pika.URLParameters(RABBIT_URL))
    try:
        channel = connection.channel()
        method, properties, body = channel.basic_get(name, auto_ack=False)
        assert method is not None, f"pika found nothing in {name}"
        channel.basic_nack(method.delivery_tag, requeue=True)
        return body, properties.message_id, dict(properties.headers or {})
    finally:
        connection.close()


@pytest.mark.rabbitmq
@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_rabbitmq_dead_letter_headers_read_with_pika(queue_type: str) -> None:
    require_port(5672, "RabbitMQ")
    with ackbridge.connect(f"{RABBIT_URL}?queue_type={queue_type}") as conn:
        queue = queue_name(f"raw-{queue_type}")
        dlq = queue + ".dlq"
        conn.declare_queue(queue)
        policy = RedeliveryPolicy(attempts=3, schedule=RETRY_SOON)
        try:
            runs = _dead_letter(conn, queue, policy, lambda: _rabbit_ready(dlq) == 1)
            assert runs == [None, 2, 3]
            assert _rabbit_ready(queue) == 0
            for name in policy.delay_queues(queue):
                assert _rabbit_ready(name) == 0, name
            body, message_id, headers = _rabbit_read_one(dlq)
            assert (body, message_id) == (BODY, MESSAGE_ID + "~dead")
            _check_header_set(headers, queue, 3, attempt_value=3)
            assert _rabbit_ready(dlq) == 1  # exactly that one copy, given back
        finally:
            for name in policy.delay_queues(queue):
                conn.delete_queue(name)
            conn.delete_queue(queue)


# ---- AMQP 1.0 on RabbitMQ: python-qpid-proton -------------------------------------------------
def _declare_durable(*names: str) -> None:
    """AMQP 1.0 declares no queue (declare_queue is unsupported there): pika declares them."""
    import pika

    connection = pika.BlockingConnection(pika.URLParameters(RABBIT_URL))
    try:
        channel = connection.channel()
        for name in names:
            channel.queue_declare(name, durable=True)
    finally:
        connection.close()


def _delete(*names: str) -> None:
    import pika

    connection = pika.BlockingConnection(pika.URLParameters(RABBIT_URL))
    try:
        channel = connection.channel()
        for name in names:
            channel.queue_delete(name)
    finally:
        connection.close()


def _proton_read_one(address: str) -> tuple[bytes, Any, dict[str, Any]]:
    """The first message at *address* read by a raw AMQP 1.0 receiver (proton's
    BlockingConnection): body, message id, application-properties; released so the
    broker keeps it."""
    from proton.utils import BlockingConnection

    connection = BlockingConnection("amqp://127.0.0.1:5672", user="guest", password="guest",
                                    allowed_mechs="PLAIN", timeout=30)
    try:
        receiver = connection.create_receiver(address, credit=1)
        message = receiver.receive(timeout=10)
        receiver.release(delivered=False)
        body = message.body
        # A data section (the plugin sends a bytes body so): proton hands it out as a memoryview.
        assert isinstance(body, (bytes, memoryview)), body
        return bytes(body), message.id, dict(message.properties or {})
    finally:
        connection.close()


def _amqp10_section(encoded: bytes) -> dict[str, Any]:
    """The map of an encoded AMQP 1.0 application-properties section (descriptor 0x74)."""
    from proton import Data, Described

    data = Data()
    data.decode(encoded)
    data.rewind()
    data.next()
    section = data.get_object()
    assert isinstance(section, Described) and section.descriptor == 0x74, section
    assert isinstance(section.value, dict), section
    return {str(key): value for key, value in section.value.items()}


@pytest.mark.amqp10
def test_amqp10_dead_letter_headers_read_with_proton() -> None:
    require_port(5672, "RabbitMQ (AMQP 1.0 plugin)")
    name = queue_name("raw-amqp10")
    queue, dlq = f"/amq/queue/{name}", f"/amq/queue/{name}.dlq"
    _declare_durable(name, name + ".dlq")
    try:
        with ackbridge.connect("amqp10://guest:guest@127.0.0.1:5672") as conn:
            # Held retries (no queue management to declare delay queues): the same three attempts.
            assert conn.capabilities.delayed_retry.level is Level.EMULATED
            policy = RedeliveryPolicy(attempts=3, schedule=RETRY_SOON, dead_letter_queue=dlq)
            runs = _dead_letter(conn, queue, policy, lambda: _rabbit_ready(name + ".dlq") == 1)
        assert runs == [None, 2, 3]
        assert (_rabbit_ready(name), _rabbit_ready(name + ".dlq")) == (0, 1)
        body, message_id, headers = _proton_read_one(dlq)
        assert (body, message_id) == (BODY, MESSAGE_ID + "~dead")
        _check_header_set(headers, queue, 3, attempt_value=3)
        wait_for(lambda: _rabbit_ready(name + ".dlq") == 1, "the released copy back in the dead-letter queue")
        # pika on the same queue (RabbitMQ 3.10's AMQP 1.0 plugin): the set is no 0-9-1 header
        # of its own, only the encoded application-properties section in one binary header.
        body, message_id, table = _rabbit_read_one(name + ".dlq")
        assert (body, message_id) == (BODY, MESSAGE_ID + "~dead")
        assert not [key for key in table if key.startswith("ackbridge-")], table
        _check_header_set(_amqp10_section(table["x-amqp-1.0-app-properties"]), queue, 3, attempt_value=3)
        assert _rabbit_ready(name + ".dlq") == 1  # exactly that one copy, given back
    finally:
        _delete(name, name + ".dlq")


# ---- NATS JetStream: nats-py ----------------------------------------------------------------
async def _jetstream_state(subjects: list[str]) -> tuple[dict[str, int], Any]:
    """Messages stored per subject's stream, and the dead-letter stream's first message
    (the last subject's), read with nats-py."""
    import nats

    client = await nats.connect("nats://127.0.0.1:4222")
    try:
        js = client.jetstream()
        counts: dict[str, int] = {}
        first: Any = None
        for subject in subjects:
            stream = await js.find_stream_name_by_subject(subject)
            info = await js.stream_info(stream)
            counts[subject] = int(info.state.messages)
            if subject == subjects[-1] and info.state.messages:
                first = await js.get_msg(stream, seq=info.state.first_seq)
        return counts, first
    finally:
        await client.close()


@pytest.mark.nats
def test_nats_dead_letter_headers_read_with_nats_py() -> None:
    with broker("nats") as b, ackbridge.connect(b.url) as conn:
        queue = queue_name("raw-nats")
        dlq = queue + ".dlq"
        conn.declare_queue(queue)
        policy = RedeliveryPolicy(attempts=3, schedule=RETRY_SOON)
        subjects = [queue, *policy.delay_queues(queue), dlq]
        try:
            runs = _dead_letter(conn, queue, policy,
                                lambda: asyncio.run(_jetstream_state(subjects))[0][dlq] == 1)
            assert runs == [None, 2, 3]
            counts, raw = asyncio.run(_jetstream_state(subjects))
            assert counts == {**{s: 0 for s in subjects[:-1]}, dlq: 1}, counts
            assert raw.data == BODY and raw.subject == dlq
            headers = dict(raw.headers or {})
            assert headers["Nats-Msg-Id"] == MESSAGE_ID + "~dead"
            # NATS headers are text: the attempt count is "3", with its type tag beside it.
            _check_header_set(headers, queue, 3, attempt_value="3")
            assert json.loads(headers["Ackbridge-Types"])[ATTEMPT] == "int", headers
        finally:
            for name in policy.delay_queues(queue):
                conn.delete_queue(name)
            conn.delete_queue(queue)


# ---- MQTT 5: paho-mqtt ----------------------------------------------------------------------
@pytest.mark.mqtt
def test_mqtt5_dead_letter_headers_read_with_paho() -> None:
    from tests.pipeline.mqtt_sessions import URLS, held, pipeline_topics

    require_port(1883, "Mosquitto")
    with ackbridge.connect(URLS["5"]) as conn:
        topic = queue_name("raw-mqtt")
        dlq = topic + "/dlq"
        conn.declare_queue(topic)  # with its dead-letter session (dead_letter=True)
        assert conn.inspect_queue(topic).dead_letter == dlq
        assert conn.capabilities.delayed_retry.level is Level.EMULATED
        policy = RedeliveryPolicy(attempts=3, schedule=RETRY_SOON)
        try:
            # Nothing to poll on Mosquitto (no depth, and a look takes the session over): close()
            # waits for the handler's last run, whose failure path ends with the copy's PUBACK.
            runs = _dead_letter(conn, topic, policy, lambda: True)
            assert runs == [None, 2, 3]
            # Each session resumed by paho: the original's and the delay topics' hold nothing,
            # the dead-letter session exactly the copy.
            found = {name: held(name) for name in pipeline_topics(topic, policy)}
            assert {name: len(messages) for name, messages in found.items() if messages} == {dlq: 1}, found
            [copy] = found[dlq]
            assert copy.body == BODY
            properties = copy.properties
            assert properties["ackbridge-message-id"] == MESSAGE_ID + "~dead"
            # MQTT user properties are text: the attempt count is "3", its type tag beside it.
            _check_header_set(properties, topic, 3, attempt_value="3")
            assert json.loads(properties["ackbridge-types"])[ATTEMPT] == "int", properties
        finally:
            for name in [topic, *policy.delay_queues(topic)]:
                conn.delete_queue(name)


# ---- RabbitMQ streams: no reject, and it says so --------------------------------------------
@pytest.mark.rabbitmq_streams
def test_rabbitmq_streams_declare_that_they_reject_nothing_and_hold_retries() -> None:
    """A stream keeps every message (acks are offsets): no reject, no reject fate that
    moves anything; the pipeline's retries are held by the consumer. Declared, so never a
    silent pass."""
    require_port(5552, "RabbitMQ streams")
    with ackbridge.connect("rabbitmq-stream://guest:guest@127.0.0.1:5552/") as conn:
        caps = conn.capabilities
        assert caps.verbs[Verb.REJECT].level is Level.UNSUPPORTED
        assert "dead-letter" in caps.verbs[Verb.REJECT].how
        assert (caps.delayed_retry.level, caps.retry_method) == (Level.EMULATED, RetryMethod.HOLDING)
        assert caps.reject_outcome.fate is RejectFate.NO_REJECT
