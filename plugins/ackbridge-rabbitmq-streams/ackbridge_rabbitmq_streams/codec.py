"""ackbridge messages <-> AMQP 1.0 encoded stream records.

RabbitMQ stores stream records as AMQP 1.0 messages (what AMQP 0-9-1 and
AMQP 1.0 consumers of the same stream decode), so that is what is written:
the body as one data section, the message fields in the properties section,
headers as application properties. AMQP 1.0 tells strings from binary, but
rstream's decoder returns both as ``bytes``: the names of the headers whose
values really are bytes travel in one ``ackbridge-binary`` property (JSON).
A record that is not AMQP 1.0 (written raw by another client) is read as a
body without fields.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Hashable, Mapping
from typing import Any

from rstream import AMQPMessage, Properties, amqp_decoder

from ackbridge.errors import InvalidOptionError
from ackbridge.messages import InboundMessage, OutboundMessage

BINARY = "ackbridge-binary"
#: An AMQP 1.0 message starts with a described section: 0x00, smallulong, code 0x70-0x78.
_SECTION_START = 0x00
_INT64 = (-(2**63), 2**63 - 1)


def _check_header(key: object, value: Any) -> None:
    if not isinstance(key, str) or not key:
        raise InvalidOptionError(f"header names must be non-empty strings, not {key!r}")
    if key == BINARY:
        raise InvalidOptionError(f"header name {BINARY!r} is reserved by the RabbitMQ streams plugin")
    if isinstance(value, bool) or value is None or isinstance(value, str | bytes | float):
        return
    if isinstance(value, int):
        if not _INT64[0] <= value <= _INT64[1]:
            raise InvalidOptionError(f"header {key!r}: {value} does not fit AMQP 1.0's 64-bit long")
        return
    raise InvalidOptionError(f"header {key!r} of type {type(value).__name__} cannot be sent "
                             "(str, bytes, int, float, bool or None)")


def encode(message: OutboundMessage) -> bytes:
    """*message* as an AMQP 1.0 encoded record."""
    properties: dict[str | bytes, Any] = {}
    binary: list[str] = []
    for key, value in message.headers.items():
        _check_header(key, value)
        properties[key] = value
        if isinstance(value, bytes):
            binary.append(key)
    if binary:
        properties[BINARY] = json.dumps(sorted(binary))
    fields = Properties(
        message_id=message.message_id,
        correlation_id=message.correlation_id,
        reply_to=message.reply_to,
        content_type=message.content_type,
        creation_time=None if message.timestamp is None else round(message.timestamp * 1000),
    )
    return bytes(AMQPMessage(body=bytes(message.body), properties=fields,
                             application_properties=properties or None))


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, uuid.UUID):
        return str(value)
    return str(value)


def _body(value: Any) -> bytes:
    if value is None:
        return b""
    if isinstance(value, bytes):
        return value
    if isinstance(value, list):  # several data sections
        return b"".join(part if isinstance(part, bytes) else str(part).encode() for part in value)
    if isinstance(value, str):
        return value.encode("utf-8")
    return str(value).encode("utf-8")


def _headers(raw: Mapping[Any, Any] | None) -> dict[str, Any]:
    if not raw:
        return {}
    decoded = {(_text(key) or ""): value for key, value in raw.items()}
    binary: set[str] = set()
    marker = decoded.pop(BINARY, None)
    if marker is not None:
        try:
            binary = set(json.loads(_text(marker) or "[]"))
        except ValueError:
            binary = set()
    return {key: value if key in binary or not isinstance(value, bytes) else value.decode("utf-8", "replace")
            for key, value in decoded.items()}


def decode(data: bytes, *, source: str, offset: int, wire_tag: Hashable, generation: int,
           redelivered: bool = False) -> InboundMessage:
    """The record *data* at *offset* of stream *source* as an :class:`InboundMessage`."""
    message: AMQPMessage | None = None
    if len(data) >= 3 and data[0] == _SECTION_START and 0x70 <= data[2] <= 0x78:
        try:
            message = amqp_decoder(data)
        except Exception:  # not AMQP 1.0 after all: keep the bytes as they are
            message = None
    if message is None:
        return InboundMessage(wire_tag=wire_tag, generation=generation, body=bytes(data), source=source,
                              routing_key=source, redelivered=redelivered)
    props = message.properties
    created = getattr(props, "creation_time", None) if props is not None else None
    return InboundMessage(
        wire_tag=wire_tag,
        generation=generation,
        body=_body(message.body),
        source=source,
        headers=_headers(message.application_properties),
        routing_key=source,
        message_id=_text(getattr(props, "message_id", None)),
        correlation_id=_text(getattr(props, "correlation_id", None)),
        reply_to=_text(getattr(props, "reply_to", None)),
        content_type=_text(getattr(props, "content_type", None)),
        timestamp=None if created is None else created / 1000,
        redelivered=redelivered,
    )
