"""ackbridge messages <-> AMQP 1.0 encoded stream records.

RabbitMQ stores stream records as AMQP 1.0 messages (what AMQP 0-9-1 and
AMQP 1.0 consumers of the same stream decode), so that is what is written:
the message fields in the properties section, headers as application
properties, the body as one data section. AMQP 1.0 tells strings from binary,
but rstream's decoder returns both as ``bytes``: the names of the headers whose
values really are bytes travel in one ``ackbridge-binary`` property (JSON).
A record that is not AMQP 1.0 (written raw by another client) is read as a
body without fields.

Two paths, the same bytes. rstream's encoder and decoder (the public path,
:func:`encode_public` and :func:`through_rstream`) take any record. With
``fast=True`` the common records (string ids, or none) are written and read
by hand (:mod:`~ackbridge_rabbitmq_streams.sections`: byte for byte what
rstream 1.1.1 writes); the transport asks for that only when
:mod:`~ackbridge_rabbitmq_streams.fastpath` found the rstream it was written for.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Hashable, Mapping
from typing import Any

from rstream import AMQPMessage, Properties, amqp_decoder

from ackbridge.errors import InvalidOptionError
from ackbridge.messages import InboundMessage, OutboundMessage
from ackbridge_rabbitmq_streams import sections

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


def _application_properties(headers: Mapping[str, Any]) -> dict[str | bytes, Any]:
    """The headers as application properties, checked (rstream types each value: long, double,
    boolean, string, binary, null), with the names of the binary ones."""
    properties: dict[str | bytes, Any] = {}
    binary: list[str] = []
    for key, value in headers.items():
        _check_header(key, value)
        properties[key] = value
        if isinstance(value, bytes):
            binary.append(key)
    if binary:
        properties[BINARY] = json.dumps(sorted(binary))
    return properties


def _creation_time(message: OutboundMessage) -> int | None:
    if message.timestamp is None:
        return None
    created = round(message.timestamp * 1000)
    if not _INT64[0] <= created <= _INT64[1]:
        raise InvalidOptionError(f"timestamp {message.timestamp} does not fit AMQP 1.0's 64-bit timestamp")
    return created


def encode_public(message: OutboundMessage) -> bytes:
    """*message* as an AMQP 1.0 encoded record, every section through rstream's encoder (and
    an empty data section after them for an empty body)."""
    properties = _application_properties(message.headers)
    fields = Properties(message_id=message.message_id, correlation_id=message.correlation_id,
                        reply_to=message.reply_to, content_type=message.content_type,
                        creation_time=_creation_time(message))
    body = bytes(message.body)
    data = bytes(AMQPMessage(body=body, properties=fields, application_properties=properties or None))
    # rstream writes no body section for an empty body: RabbitMQ cannot convert that record
    # for an AMQP 0-9-1 consumer (sections.EMPTY_DATA).
    return data if body else data + sections.EMPTY_DATA


def encode(message: OutboundMessage, *, fast: bool) -> bytes:
    """*message* as an AMQP 1.0 encoded record; with *fast*, the properties and data sections
    of a message whose ids are strings (or unset) written by hand, the same bytes."""
    message_id, correlation_id, reply_to, content_type = (
        message.message_id, message.correlation_id, message.reply_to, message.content_type)
    # Spelled out, not all() over a generator: this runs once per publish.
    if not fast or not ((message_id is None or type(message_id) is str)
                        and (correlation_id is None or type(correlation_id) is str)
                        and (reply_to is None or type(reply_to) is str)
                        and (content_type is None or type(content_type) is str)):
        # An id that is not a string (the short publish path does not check its type):
        # rstream types it (ulong, uuid, binary) as it always did.
        return encode_public(message)
    head = sections.properties_section(
        message_id=message_id, reply_to=reply_to, correlation_id=correlation_id, content_type=content_type,
        creation_time=None if message.timestamp is None else _creation_time(message))
    if message.headers:
        # Headers stay with rstream's encoder: the application-properties section alone is
        # what it writes between properties and data in a whole message.
        head += bytes(AMQPMessage(application_properties=_application_properties(message.headers)))
    body = message.body if type(message.body) is bytes else bytes(message.body)
    return head + sections.data_section(body)


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


def decode(data: bytes, source: str, offset: int, wire_tag: Hashable, generation: int, fast: bool,
           redelivered: bool = False) -> InboundMessage:
    """The record *data* at *offset* of stream *source* as an :class:`InboundMessage`; with
    *fast*, a record of properties and a body, or of a body alone, is read by hand (what
    rstream's decoder would tell). Positional arguments are welcome (once per delivery)."""
    if fast:
        common = sections.properties_and_body(data)
        if common is not None:  # the plugin's own records without headers
            fields, body = common
            created = fields[sections.CREATION_TIME]
            # Positional, in InboundMessage's field order (keywords cost about twice as much per
            # delivery); test_the_fast_reader_builds_the_public_paths_message fails if that order changes.
            return InboundMessage(
                wire_tag, generation, body, source, {}, source, fields[sections.MESSAGE_ID],
                fields[sections.CORRELATION_ID], fields[sections.REPLY_TO], fields[sections.CONTENT_TYPE],
                None if created is None else created / 1000, redelivered)
        bare = sections.bare_body(data)
        if bare is not None:  # a body and nothing else (another client's record)
            return InboundMessage(wire_tag=wire_tag, generation=generation, body=bare, source=source,
                                  routing_key=source, redelivered=redelivered)
    return through_rstream(data, source=source, wire_tag=wire_tag, generation=generation, redelivered=redelivered)


def through_rstream(data: bytes, *, source: str, wire_tag: Hashable, generation: int,
                    redelivered: bool = False) -> InboundMessage:
    """*data* read by rstream's ``amqp_decoder`` (any record: the public path)."""
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
        # Another client's record may hold anything there (text): no timestamp, not a crash.
        timestamp=created / 1000 if type(created) is int else None,
        redelivered=redelivered,
    )
