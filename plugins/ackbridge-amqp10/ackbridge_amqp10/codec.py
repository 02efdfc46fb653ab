"""ackbridge messages <-> proton messages (no I/O)."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from proton import Message

from ackbridge.errors import InvalidOptionError
from ackbridge.messages import InboundMessage, OutboundMessage
from ackbridge.text import forbidden_character


def check_address(address: str) -> str:
    """Refuse an address RabbitMQ 3.10 answers by ending the connection (framing-error,
    measured with U+FFFE): control characters and non-characters."""
    bad = forbidden_character(address)
    if bad is None:
        return address
    raise InvalidOptionError(
        f"AMQP 1.0 address {address[:60]!r} contains U+{ord(bad):04X} (control character or non-character); "
        "RabbitMQ ends the connection on it")


def to_proton(message: OutboundMessage) -> Message:
    # inferred=True sends bytes as a data section: other protocols (and RabbitMQ's
    # AMQP 0-9-1 side) see the raw body, not an AMQP-encoded binary value.
    # Only fields that are set are passed: proton reads and writes every keyword
    # through its C binding, which made a bare publish cost twice a raw one.
    fields: dict[str, Any] = {"inferred": True, "durable": message.persistent}
    if message.message_id is not None:
        fields["id"] = message.message_id
    if message.correlation_id is not None:
        fields["correlation_id"] = message.correlation_id
    if message.reply_to:
        fields["reply_to"] = message.reply_to
    if message.content_type:
        fields["content_type"] = message.content_type
    if message.timestamp:
        fields["creation_time"] = message.timestamp
    if message.headers:
        fields["properties"] = dict(message.headers)
    return Message(body=message.body, **fields)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _body(body: Any) -> bytes:
    if body is None:
        return b""
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body)
    if isinstance(body, str):
        return body.encode("utf-8")
    return repr(body).encode("utf-8")


def from_proton(message: Message, *, wire_tag: Hashable, generation: int, source: str,
                count_header: bool) -> InboundMessage:
    """Build an InboundMessage. ``count_header``: trust the header's delivery-count
    (peers like RabbitMQ 3.10 leave it at 0, so the count is reported as unknown)."""
    props: dict[Any, Any] = message.properties or {}
    annotations: Any = message.annotations or {}
    routing_key = annotations.get("x-routing-key") if isinstance(annotations, dict) else None
    prior = int(message.delivery_count or 0)
    return InboundMessage(
        wire_tag=wire_tag,
        generation=generation,
        body=_body(message.body),
        source=source,
        # proton decodes binary values as memoryview: hand out bytes, as sent.
        headers={str(k): bytes(v) if isinstance(v, (memoryview, bytearray)) else v for k, v in props.items()},
        routing_key=_text(routing_key) or _text(message.subject),
        message_id=_text(message.id),
        correlation_id=_text(message.correlation_id),
        reply_to=_text(message.reply_to),
        content_type=_text(message.content_type) or None,
        timestamp=float(message.creation_time) if message.creation_time else None,
        # A peer that sends no header makes first-acquirer read False: a false
        # "redelivered" errs on the safe side for at-least-once consumers.
        redelivered=(not message.first_acquirer) or prior > 0,
        delivery_count=prior + 1 if count_header else None,
    )
