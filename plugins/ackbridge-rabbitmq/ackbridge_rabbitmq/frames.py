"""The frames of one AMQP 0-9-1 publish, byte for byte as pika writes them (no I/O).

pika's ``basic_publish`` builds a Basic.Publish method object, a BasicProperties,
and Method/Header/Body frame objects for every message, then marshals each:
most of what the I/O thread spent per publish, raw pika included. Here the
method frame's payload is built once per destination, the content header's
payload on the publishing thread (so an unencodable message is refused there,
alone), and the I/O thread only wraps both and the body in frame envelopes
carrying its channel number. Messages with headers have their properties
encoded by pika itself. A test compares every frame with pika's own.
"""

from __future__ import annotations

import struct

import pika
from pika import spec

from ackbridge.messages import OutboundMessage
from ackbridge_rabbitmq.codec import property_fields

_ENVELOPE = struct.Struct(">BHI")  # frame type, channel, payload size
_FRAME_END = b"\xce"
_METHOD, _HEADER, _BODY = 1, 2, 3
_HEADER_START = struct.Struct(">HxxQ")  # class 60 (basic), weight 0, body size
_PUBLISH_INDEX = struct.pack(">I", spec.Basic.Publish.INDEX)
_TIMESTAMP = struct.Struct(">Q")

# BasicProperties flags (AMQP 0-9-1 property order)
_CONTENT_TYPE = 1 << 15
_DELIVERY_MODE = 1 << 12
_CORRELATION_ID = 1 << 10
_REPLY_TO = 1 << 9
_MESSAGE_ID = 1 << 7
_TIMESTAMP_FLAG = 1 << 6

_methods: dict[tuple[str, str], bytes] = {}


def publish_method(exchange: str, routing_key: str) -> bytes:
    """Payload of the Basic.Publish method frame (mandatory=True), cached."""
    key = (exchange, routing_key)
    payload = _methods.get(key)
    if payload is None:
        pieces = spec.Basic.Publish(exchange=exchange, routing_key=routing_key, mandatory=True).encode()
        payload = _PUBLISH_INDEX + b"".join(pieces)
        if len(_methods) >= 1024:
            _methods.clear()
        _methods[key] = payload
    return payload


def _short(value: str) -> bytes:
    data = value.encode("utf-8")
    if len(data) > 255:
        raise ValueError(f"{len(data)} bytes where AMQP 0-9-1 allows a short string of at most 255")
    return bytes((len(data),)) + data


def content_header(message: OutboundMessage, message_id: str) -> bytes:
    """Payload of the content header frame for *message* (properties as
    :func:`ackbridge_rabbitmq.codec.property_fields` maps them).

    Raises for a message the wire cannot carry (InvalidOptionError for a float
    header, ValueError/OverflowError/struct.error/pika's own errors otherwise)."""
    body_size = len(message.body)
    if message.headers:
        props = pika.BasicProperties(**property_fields(message, message_id))
        return _HEADER_START.pack(60, body_size) + b"".join(props.encode())
    flags = _DELIVERY_MODE | _MESSAGE_ID
    pieces = []
    if message.content_type is not None:
        flags |= _CONTENT_TYPE
        pieces.append(_short(message.content_type))
    pieces.append(b"\x02" if message.persistent else b"\x01")
    if message.correlation_id is not None:
        flags |= _CORRELATION_ID
        pieces.append(_short(message.correlation_id))
    if message.reply_to is not None:
        flags |= _REPLY_TO
        pieces.append(_short(message.reply_to))
    pieces.append(_short(message_id))
    if message.timestamp is not None:
        flags |= _TIMESTAMP_FLAG
        pieces.append(_TIMESTAMP.pack(int(message.timestamp)))
    return _HEADER_START.pack(60, body_size) + flags.to_bytes(2, "big") + b"".join(pieces)


def publish_frames(channel: int, method: bytes, header: bytes, body: bytes, body_max: int) -> list[bytes]:
    """The marshaled frames of one publish on *channel* (body split at *body_max*)."""
    envelope = _ENVELOPE.pack
    frames = [envelope(_METHOD, channel, len(method)) + method + _FRAME_END,
              envelope(_HEADER, channel, len(header)) + header + _FRAME_END]
    size = len(body)
    if size <= body_max:
        if size:
            frames.append(envelope(_BODY, channel, size) + body + _FRAME_END)
        return frames
    for start in range(0, size, body_max):
        chunk = body[start:start + body_max]
        frames.append(envelope(_BODY, channel, len(chunk)) + chunk + _FRAME_END)
    return frames
