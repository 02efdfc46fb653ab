"""Rows of the broker file <-> ackbridge messages.

Message properties are stored as JSON, keeping bytes header values as bytes.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

from ackbridge.messages import InboundMessage, OutboundMessage
from ackbridge_local.store import Row


def _encode(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"__b64__": base64.b64encode(value).decode("ascii")}
    raise TypeError(f"cannot store {type(value).__name__}")


def _decode(obj: dict[str, Any]) -> Any:
    if len(obj) == 1 and "__b64__" in obj:
        return base64.b64decode(obj["__b64__"])
    return obj


def dumps(props: dict[str, Any]) -> str:
    return json.dumps(props, default=_encode, separators=(",", ":"))


def loads(text: str) -> dict[str, Any]:
    # The hook runs once per object decoded; without a bytes value there is nothing for it to do.
    result: dict[str, Any] = json.loads(text, object_hook=_decode) if "__b64__" in text else json.loads(text)
    return result


def props_of(message: OutboundMessage) -> str:
    """The stored properties of *message* (stamped with the time now when it has none)."""
    return dumps({
        "headers": dict(message.headers), "message_id": message.message_id,
        "correlation_id": message.correlation_id, "reply_to": message.reply_to,
        "content_type": message.content_type, "timestamp": message.timestamp or time.time(),
    })


def inbound(row: Row, generation: int) -> InboundMessage:
    """*row*, leased under *generation*, as the core's message."""
    props = loads(row.props)
    return InboundMessage(
        wire_tag=row.id, generation=generation, body=bytes(row.body), source=row.queue,
        headers=props.get("headers") or {}, routing_key=row.queue, message_id=props.get("message_id"),
        correlation_id=props.get("correlation_id"), reply_to=props.get("reply_to"),
        content_type=props.get("content_type"), timestamp=props.get("timestamp"),
        redelivered=row.delivery_count > 1, delivery_count=row.delivery_count,
    )
