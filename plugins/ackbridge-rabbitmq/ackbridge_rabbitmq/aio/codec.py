"""Wire messages <-> ackbridge messages for the aio-pika transport (no I/O).

The rules are the pika transport's (``ackbridge_rabbitmq.codec``): the same
property fields, the same refusal of float headers (so a message either face
can send, both can), the same delivery count. Only the carrier differs: pamqp's
``Basic.Properties`` (a ``datetime`` timestamp) instead of pika's.
"""

from __future__ import annotations

import datetime
from typing import Any

from aiormq.abc import DeliveredMessage
from pamqp.commands import Basic

from ackbridge.messages import InboundMessage, OutboundMessage
from ackbridge_rabbitmq.codec import delivery_count, property_fields


def properties(message: OutboundMessage, message_id: str) -> Basic.Properties:
    """pamqp properties for *message* (InvalidOptionError for a header the wire cannot carry)."""
    fields: dict[str, Any] = property_fields(message, message_id)
    stamp = fields.pop("timestamp")
    if stamp is not None:
        fields["timestamp"] = datetime.datetime.fromtimestamp(stamp, tz=datetime.UTC)
    return Basic.Properties(**{k: v for k, v in fields.items() if v is not None})


def inbound(delivered: DeliveredMessage, *, generation: int, source: str, quorum: bool) -> InboundMessage:
    """Build an InboundMessage from an aiormq delivery."""
    props = delivered.header.properties
    headers = dict(props.headers) if props.headers else {}
    frame = delivered.delivery
    redelivered = bool(getattr(frame, "redelivered", False))
    stamp = props.timestamp
    return InboundMessage(
        wire_tag=getattr(frame, "delivery_tag", 0), generation=generation, body=delivered.body, source=source,
        headers=headers, routing_key=getattr(frame, "routing_key", None), message_id=props.message_id,
        correlation_id=props.correlation_id, reply_to=props.reply_to, content_type=props.content_type,
        timestamp=float(stamp.timestamp()) if stamp is not None else None, redelivered=redelivered,
        delivery_count=delivery_count(headers, redelivered, quorum),
    )
