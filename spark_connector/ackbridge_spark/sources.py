"""Many sources per query: one consumer per listed queue, topic filter or address,
all on the reader's one broker connection, all handing deliveries to one inbox.

Each delivery knows its consumer's source (``delivery.source``); the row's
``source`` column carries the name as configured (a queue, an MQTT filter such
as ``sensors/#``, an AMQP 1.0 address), and the ``topic`` column of an MQTT row
is the real topic the message was published to.

MQTT topic filters: the ackbridge-mqtt plugin's ``consume()`` takes a topic
*name* only (it refuses ``+``/``#``; a queue is one topic there). Until the
plugin takes a filter, the connector subscribes a stable placeholder topic,
``ackbridge-spark/filter-<hash of the filter>`` -- whose persistent session is
then the filter's -- and adds the filter to that session's subscription through
the link the transport lists (``links()``, ``subscribe_topic``). The link
re-subscribes every topic it holds on each reconnect, so the filter survives
connection losses; the session is kept by the broker across query restarts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ackbridge.errors import BrokerError, ConfigurationError

if TYPE_CHECKING:
    from ackbridge.contract import Connection, Consumer, Delivery

_MQTT_SCHEMES = ("mqtt", "mqtts")


@dataclass(frozen=True)
class OpenedSource:
    #: The name as configured (what the row's ``source`` column says).
    name: str
    #: What ``delivery.source`` is for this consumer's deliveries.
    key: str
    consumer: Consumer


def is_mqtt(url_scheme: str) -> bool:
    return url_scheme in _MQTT_SCHEMES


def is_filter(name: str) -> bool:
    return "+" in name or "#" in name


def placeholder_topic(topic_filter: str) -> str:
    """The topic name whose persistent session holds *topic_filter*'s subscription."""
    return "ackbridge-spark/filter-" + hashlib.sha256(topic_filter.encode("utf-8")).hexdigest()[:20]


def _add_filter(conn: Any, consumer: Any, topic_filter: str) -> None:
    from ackbridge.testing.faults import transport_of

    transport = transport_of(conn)
    links = getattr(transport, "links", None)
    link = next((lk for lk in (links() if callable(links) else [])
                 if getattr(lk, "subscription", None) == consumer.subscription), None)
    if link is None or not callable(getattr(link, "subscribe_topic", None)):
        raise ConfigurationError(
            f"this ackbridge-mqtt version cannot subscribe topic filter {topic_filter!r} for the Spark source "
            "(no link with subscribe_topic); list topic names instead")
    link.subscribe_topic(topic_filter)
    if getattr(link, "subscribe_error", None):
        raise BrokerError(f"the MQTT broker refused the subscription to {topic_filter!r}: {link.subscribe_error}")


def subscribe_all(conn: Connection, scheme: str, names: tuple[str, ...], prefetch: int,
                  handler: Callable[[Delivery], object]) -> list[OpenedSource]:
    """One consumer per name, each handing deliveries to *handler*; on a failure the
    consumers opened so far are closed (their deliveries return to the broker)."""
    opened: list[OpenedSource] = []
    try:
        for name in names:
            mqtt_filter = is_mqtt(scheme) and is_filter(name)
            key = placeholder_topic(name) if mqtt_filter else name
            # Acks are decided per committed batch, then flushed in one go.
            consumer = conn.consume(key, prefetch=prefetch, conflate_count="manual", conflate_ms=0.0,
                                    handler=handler)
            opened.append(OpenedSource(name, key, consumer))
            if mqtt_filter:
                _add_filter(conn, consumer, name)
    except BaseException:
        for source in opened:
            try:
                source.consumer.close()
            except Exception:
                pass
        raise
    return opened


def declare_sources(url: str, names: tuple[str, ...], **options: Any) -> None:
    """Create what holds messages for *names* before anything is published:
    queues (``declare_queue``), and for MQTT topic filters the persistent
    session subscribed to the filter (as the source's first start would)."""
    import ackbridge
    from ackbridge.urls import parse_url

    scheme = parse_url(url).scheme
    with ackbridge.connect(url, **options) as conn:
        for name in names:
            if is_mqtt(scheme) and is_filter(name):
                consumer = conn.consume(placeholder_topic(name), prefetch=1)
                _add_filter(conn, consumer, name)
                consumer.close()
            else:
                conn.declare_queue(name)
