"""MQTT topic filters as consume() / declare_queue() sources (the tables' ``source_patterns``).

``conn.consume("sensors/+/temp")`` is served by one persistent session
subscribed to the filter: it receives what is published to every matching
topic, settles it as any delivery, and a requeued copy (published to the
message's own topic) comes back through the filter.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

import ackbridge
from ackbridge.capabilities import Capabilities, Verb, native
from ackbridge.errors import InvalidOptionError
from ackbridge.messages import ConfirmStatus
from ackbridge_mqtt.capabilities import CAPABILITIES_V5, CAPABILITIES_V311
from ackbridge_mqtt.sessions import check_source, session_id, session_topic
from tests.mqtt.harness import delete_session, peek_session

pytestmark = pytest.mark.mqtt
URL = "mqtt://127.0.0.1:1883"


@pytest.fixture(params=["5", "3.1.1"])
def protocol(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def prefix() -> Iterator[str]:
    found = f"abtest-filter/{uuid.uuid4().hex[:10]}"
    yield found
    for source in (f"{found}/+/temp", f"{found}/#"):
        delete_session(session_id(source))


def test_source_patterns_is_declared_by_mqtt_only() -> None:
    assert CAPABILITIES_V5.source_patterns and "'+'" in CAPABILITIES_V5.source_patterns
    assert CAPABILITIES_V311.source_patterns == CAPABILITIES_V5.source_patterns
    assert CAPABILITIES_V5.patterns_row()[:2] == ("source patterns", "native")
    plain = Capabilities("plain", {verb: native("x") for verb in Verb})
    assert plain.source_patterns is None  # the default: a source names one queue
    assert plain.patterns_row()[:2] == ("source patterns", "unsupported")


def test_filter_session_is_the_spark_placeholder_session() -> None:
    # The connector subscribed filters through a placeholder topic's session; the plugin
    # uses the same session id, so the sessions the connector made are resumed.
    assert session_topic("sensors/+/temp").startswith("ackbridge-spark/filter-")
    assert session_topic("orders") == "orders"
    assert session_id("sensors/+/temp") != session_id("sensors/#")


@pytest.mark.parametrize("bad", ["a/#/b", "a/b#", "a/+b/c", "+x"])
def test_malformed_filters_are_refused(bad: str) -> None:
    with pytest.raises(InvalidOptionError, match="malformed"):
        check_source(bad)
    with ackbridge.connect(URL) as conn, pytest.raises(InvalidOptionError, match="malformed"):
        conn.consume(bad)


def test_publish_to_a_filter_is_still_refused() -> None:
    with ackbridge.connect(URL) as conn:
        outcome = conn.publish("abtest-filter/+/temp", b"x").result(timeout=10)
        assert outcome.status is ConfirmStatus.REFUSED and "wildcard" in outcome.reason


def test_filter_consume_receives_matching_topics_settles_and_redelivers(protocol: str, prefix: str) -> None:
    source = f"{prefix}/+/temp"
    one, two, other = f"{prefix}/a/temp", f"{prefix}/b/temp", f"{prefix}/a/humidity"
    with ackbridge.connect(URL, protocol=protocol) as conn:
        assert conn.capabilities.source_patterns is not None
        conn.declare_queue(source, dead_letter=False)  # the filter's session keeps what matches from now on
        for topic, body in ((one, b"one"), (two, b"two"), (other, b"other")):
            conn.publish(topic, body).result(timeout=10)
        consumer = conn.consume(source, prefetch=10)
        got = {}
        for _ in range(2):
            delivery = consumer.get(timeout=10)
            assert delivery is not None
            got[delivery.body] = delivery
        assert set(got) == {b"one", b"two"}
        assert consumer.get(timeout=1.0) is None  # the humidity topic does not match
        assert {d.source for d in got.values()} == {source}  # type: ignore[attr-defined]
        assert got[b"one"].routing_key == one and got[b"two"].routing_key == two  # type: ignore[attr-defined]
        assert not any(d.redelivered for d in got.values())
        got[b"one"].ack()
        got[b"two"].requeue()  # the copy goes to its own topic, which the filter matches
        again = consumer.get(timeout=10)
        assert again is not None and again.body == b"two" and again.redelivered
        assert again.routing_key == two  # type: ignore[attr-defined]
        if protocol == "5":
            assert again.delivery_count == 2
        again.ack()
        assert consumer.get(timeout=1.0) is None
        consumer.close()
    # Everything was settled: the filter's session holds nothing.
    assert peek_session(session_id(source), quiet=0.5) == []


def test_filter_session_keeps_messages_between_consumers(protocol: str, prefix: str) -> None:
    source = f"{prefix}/#"
    with ackbridge.connect(URL, protocol=protocol) as conn:
        conn.consume(source, prefetch=5).close()  # the first consume makes the session, as declare does
        conn.publish(f"{prefix}/x/y", b"kept").result(timeout=10)
        consumer = conn.consume(source, prefetch=5)
        delivery = consumer.get(timeout=10)
        assert delivery is not None and delivery.body == b"kept"
        delivery.ack()
        consumer.close()


def test_dead_letter_filter_must_be_valid(prefix: str) -> None:
    with ackbridge.connect(URL) as conn, pytest.raises(InvalidOptionError, match="dead-letter filter"):
        conn.declare_queue(f"{prefix}/#")  # '{topic}/dlq' would put '#' before the last level
