"""ackbridge messages <-> proton messages (no I/O)."""

from __future__ import annotations

import struct
from collections.abc import Hashable
from typing import Any

import cproton  # type: ignore[import-untyped]  # proton's C binding ships no types
from proton import Message, MessageException

from ackbridge.errors import InvalidOptionError
from ackbridge.messages import InboundMessage, OutboundMessage
from ackbridge.transport.text import forbidden_character
from ackbridge_amqp10.peer_text import bytes_text, c_text, read_body, read_data


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


# The sections of a bare message, as proton writes them (the descriptors are
# smallulong codes: 0x70 header, 0x73 properties, 0x75 data).
_HEADER_DURABLE = b"\x00\x53\x70\xc0\x02\x01\x41"  # header [durable=true]
_HEADER_PLAIN = b"\x00\x53\x70\x45"  # header [] (proton writes it even then)
_PROPERTIES = b"\x00\x53\x73"
_DATA = b"\x00\x53\x75"
_NULL = b"\x40"
_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")


def _variable(small: int, large: int, payload: bytes) -> bytes:
    size = len(payload)
    if size <= 255:
        return bytes((small, size)) + payload
    return bytes((large,)) + _UINT32.pack(size) + payload


def encode(message: OutboundMessage) -> bytes:
    """The AMQP 1.0 encoding of *message*, exactly as ``to_proton(message).encode()``.

    A message without headers (the common case) is written here directly:
    building a proton Message and encoding it through the C binding cost a
    sender more than everything else it does per publish. Anything else (and
    any value this writer does not handle) goes through proton. Runs on the
    publishing thread, so an unencodable message is refused there, alone.
    A test compares both encodings byte for byte."""
    if message.headers:
        return bytes(to_proton(message).encode())
    try:
        return _encode_bare(message)
    except (UnicodeError, struct.error, TypeError, ValueError, OverflowError):
        return bytes(to_proton(message).encode())


def _encode_bare(message: OutboundMessage) -> bytes:
    # properties: message-id, user-id, to, subject, reply-to, correlation-id,
    # content-type, content-encoding, absolute-expiry-time, creation-time
    if "\x00" in (message.reply_to or "") or "\x00" in (message.content_type or ""):
        raise ValueError("proton passes these as C strings (cut at NUL): leave them to proton")
    fields: list[bytes] = []
    last = 0
    if message.message_id is not None:
        fields.append(_variable(0xA1, 0xB1, message.message_id.encode("utf-8")))
        last = 1
    else:
        fields.append(_NULL)
    fields += (_NULL, _NULL, _NULL)
    if message.reply_to:
        fields.append(_variable(0xA1, 0xB1, message.reply_to.encode("utf-8")))
        last = 5
    else:
        fields.append(_NULL)
    if message.correlation_id is not None:
        fields.append(_variable(0xA1, 0xB1, message.correlation_id.encode("utf-8")))
        last = 6
    else:
        fields.append(_NULL)
    if message.content_type:
        fields.append(_variable(0xA3, 0xB3, message.content_type.encode("utf-8")))
        last = 7
    else:
        fields.append(_NULL)
    fields += (_NULL, _NULL)
    millis = int(message.timestamp * 1000) if message.timestamp else 0
    if millis:  # proton leaves a zero creation-time out
        fields.append(b"\x83" + _INT64.pack(millis))
        last = 10
    if last:
        items = b"".join(fields[:last])
        if len(items) + 1 <= 255 and last <= 255:
            properties = bytes((0xC0, len(items) + 1, last)) + items
        else:
            properties = b"\xd0" + _UINT32.pack(len(items) + 4) + _UINT32.pack(last) + items
    else:
        properties = b"\x45"
    body = message.body if type(message.body) is bytes else bytes(message.body)
    return b"".join((_HEADER_DURABLE if message.persistent else _HEADER_PLAIN, _PROPERTIES, properties,
                     _DATA, _variable(0xA0, 0xB0, body)))


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


_lib = cproton.lib


def _c_id(msgid: Any) -> str | None:
    kind = msgid.type
    if kind == cproton.PN_NULL:
        return None
    if kind == cproton.PN_STRING:  # proton's msgid2py decodes it strictly
        return bytes_text(msgid.u.as_bytes)
    return _text(cproton.msgid2py(msgid))


def from_proton(message: Message, *, wire_tag: Hashable, generation: int, source: str,
                count_header: bool) -> InboundMessage:
    """Build an InboundMessage. ``count_header``: trust the header's delivery-count
    (peers like RabbitMQ 3.10 leave it at 0, so the count is reported as unknown).

    The header and properties fields are read through proton's C binding
    (``cproton.lib``), as proton's own Message properties do, without their
    Python layer: per received message that layer cost about as much again as
    the rest of this function. Its ``content_type`` also turned a missing value
    into the text ``'None'``; here it is None. Text fields are decoded by
    :func:`~ackbridge_amqp10.peer_text.peer_text` (UTF-8, else Latin-1).
    ``tests/amqp10/test_codec_amqp10.py`` checks every field against proton's
    Message API."""
    return _inbound(message._msg, message.properties, message.annotations, message.body, wire_tag=wire_tag,
                    generation=generation, source=source, count_header=count_header)


def from_bytes(raw: bytes, *, wire_tag: Hashable, generation: int, source: str,
               count_header: bool) -> InboundMessage:
    """Decode one transfer's bytes into an InboundMessage.

    proton's ``Message.decode`` reads the message's sections strictly as UTF-8
    and raises on a string that is not; such a message is read again here with
    its strings decoded by :func:`~ackbridge_amqp10.peer_text.peer_text`
    (UTF-8, else Latin-1) and a string body handed out as the bytes sent, so
    it is delivered like any other. A message proton cannot decode at all
    raises :class:`proton.MessageException`."""
    message = Message()
    try:
        message.decode(raw)
    except UnicodeDecodeError:
        return _from_bytes_tolerant(raw, wire_tag=wire_tag, generation=generation, source=source,
                                    count_header=count_header)
    return from_proton(message, wire_tag=wire_tag, generation=generation, source=source,
                       count_header=count_header)


def _from_bytes_tolerant(raw: bytes, *, wire_tag: Hashable, generation: int, source: str,
                         count_header: bool) -> InboundMessage:
    impl = cproton.pn_message()
    try:
        if cproton.pn_message_decode(impl, raw) < 0:
            text = c_text(_lib.pn_error_text(_lib.pn_message_error(impl)))
            raise MessageException(f"cannot decode the message: {text}")
        return _inbound(impl, read_data(_lib.pn_message_properties(impl)),
                        read_data(_lib.pn_message_annotations(impl)), read_body(_lib.pn_message_body(impl)),
                        wire_tag=wire_tag, generation=generation, source=source, count_header=count_header)
    finally:
        _lib.pn_message_free(impl)


def _inbound(impl: Any, props: dict[Any, Any] | None, annotations: Any, body: Any, *, wire_tag: Hashable,
             generation: int, source: str, count_header: bool) -> InboundMessage:
    routing_key = annotations.get("x-routing-key") if isinstance(annotations, dict) else None
    prior = _lib.pn_message_get_delivery_count(impl)
    created = _lib.pn_message_get_creation_time(impl)
    return InboundMessage(
        wire_tag=wire_tag,
        generation=generation,
        body=body if type(body) is bytes else _body(body),
        source=source,
        # proton decodes binary values as memoryview: hand out bytes, as sent.
        headers={str(k): bytes(v) if isinstance(v, (memoryview, bytearray)) else v
                 for k, v in props.items()} if props else {},
        routing_key=_text(routing_key) or c_text(_lib.pn_message_get_subject(impl)),
        message_id=_c_id(_lib.pn_message_get_id(impl)),
        correlation_id=_c_id(_lib.pn_message_get_correlation_id(impl)),
        reply_to=c_text(_lib.pn_message_get_reply_to(impl)),
        content_type=c_text(_lib.pn_message_get_content_type(impl)) or None,
        timestamp=created / 1000.0 if created else None,
        # A peer that sends no header makes first-acquirer read False: a false
        # "redelivered" errs on the safe side for at-least-once consumers.
        redelivered=not _lib.pn_message_is_first_acquirer(impl) or prior > 0,
        delivery_count=prior + 1 if count_header else None,
    )
