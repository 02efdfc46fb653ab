"""Wire messages <-> ackbridge messages: pika's properties both ways (no I/O).

Outbound, :func:`property_fields` maps an OutboundMessage onto
``pika.BasicProperties`` (the fast path builds the same bytes in ``frames.py``);
inbound, :func:`inbound` builds the InboundMessage the core receives.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ackbridge.errors import InvalidOptionError
from ackbridge.messages import InboundMessage, OutboundMessage


def property_fields(message: OutboundMessage, message_id: str) -> dict[str, Any]:
    """Keyword arguments for pika.BasicProperties.

    Called before the publish is queued, so a header the wire cannot carry is an
    InvalidOptionError for this publish alone."""
    if message.headers:
        for key, value in message.headers.items():
            if isinstance(value, float):
                # pika's table encoder has no float: it raised inside the I/O loop,
                # after the confirm tracker had counted the publish, which shifted
                # every later confirm onto the wrong message.
                raise InvalidOptionError(
                    f"header {key!r} holds a float, which the RabbitMQ plugin cannot send (pika has no "
                    "float field type); send it as a string or an int")
    return {
        "headers": dict(message.headers) if message.headers else None,
        "message_id": message_id,
        "correlation_id": message.correlation_id,
        "reply_to": message.reply_to,
        "content_type": message.content_type,
        "timestamp": int(message.timestamp) if message.timestamp is not None else None,
        "delivery_mode": 2 if message.persistent else 1,
    }


def delivery_count(headers: Mapping[str, Any], redelivered: bool, quorum: bool) -> int | None:
    """Deliveries so far including this one. Quorum queues add x-delivery-count
    (returns so far) from the first redelivery on; classic queues tell nothing."""
    raw = headers.get("x-delivery-count")
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw + 1
    if quorum and not redelivered:
        return 1
    return None


def inbound(*, tag: int, generation: int, body: bytes, source: str, props: Any, routing_key: str | None,
            redelivered: bool, quorum: bool) -> InboundMessage:
    """Build an InboundMessage from pika's properties."""
    headers = dict(props.headers) if props.headers else {}
    for key, value in headers.items():
        if isinstance(value, int) and type(value) not in (int, bool):
            headers[key] = int(value)  # pika decodes 64-bit ints as its own ``long`` subclass
    ts = props.timestamp
    return InboundMessage(
        wire_tag=tag, generation=generation, body=body, source=source, headers=headers,
        routing_key=routing_key, message_id=props.message_id, correlation_id=props.correlation_id,
        reply_to=props.reply_to, content_type=props.content_type,
        timestamp=float(ts) if ts is not None else None, redelivered=redelivered,
        delivery_count=delivery_count(headers, redelivered, quorum),
    )
