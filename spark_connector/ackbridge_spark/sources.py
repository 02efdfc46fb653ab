"""Many sources per query: one consumer per listed queue, topic filter or address,
all on the reader's one broker connection, all handing deliveries to one inbox.

Each delivery knows its consumer's source (``delivery.source``); the row's
``source`` column carries the name as configured (a queue, an MQTT filter such
as ``sensors/#``, an AMQP 1.0 address), and the ``topic`` column of an MQTT row
is the real topic the message was published to.

Topic filters (MQTT's ``+``/``#``) are passed to ``consume()`` and
``declare_queue()`` as they are, where the broker's plugin declares it takes
them (``capabilities.source_patterns``): the MQTT plugin keeps one persistent
session per filter, re-subscribed on every reconnect and kept by the broker
across query restarts. A filter on a broker that takes none is refused here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ackbridge.errors import ConfigurationError

if TYPE_CHECKING:
    from ackbridge import Connection, Consumer, Delivery

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


def check_patterns(conn: Connection, names: tuple[str, ...]) -> None:
    """Refuse a topic filter where the broker's plugin declares it takes none."""
    filters = [name for name in names if is_filter(name)]
    if filters and is_mqtt(conn.url.scheme) and conn.capabilities.source_patterns is None:
        raise ConfigurationError(f"this ackbridge-mqtt version cannot consume topic filters {filters} "
                                 "(its capabilities declare no source_patterns); list topic names instead")


def subscribe_all(conn: Connection, scheme: str, names: tuple[str, ...], prefetch: int,
                  handler: Callable[[Delivery], object]) -> list[OpenedSource]:
    """One consumer per name, each handing deliveries to *handler*; on a failure the
    consumers opened so far are closed (their deliveries return to the broker)."""
    opened: list[OpenedSource] = []
    check_patterns(conn, names)
    try:
        for name in names:
            # Acks are decided per committed batch, then flushed in one go.
            consumer = conn.consume(name, prefetch=prefetch, conflate_count="manual", conflate_ms=0.0,
                                    handler=handler)
            opened.append(OpenedSource(name, name, consumer))
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

    with ackbridge.connect(url, **options) as conn:
        check_patterns(conn, names)
        for name in names:
            # A filter's session has no dead-letter companion (the source never made one).
            conn.declare_queue(name, dead_letter=not (is_mqtt(conn.url.scheme) and is_filter(name)))
