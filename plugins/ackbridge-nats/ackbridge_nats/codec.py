"""ackbridge message fields <-> NATS headers, and deliveries -> InboundMessage.

NATS headers are text lines, so non-string header values are written as text
and their types listed in one ``Ackbridge-Types`` header (JSON), which lets
them come back with the type they were sent with. A header NATS cannot carry
as a line of its own (a name that is not a printable-ASCII token, a value with
a line break or edge whitespace, which nats-py strips) travels inside one
``Ackbridge-Headers`` header (ASCII JSON), so every header the core accepts
comes back exactly as sent. The message id travels as
``Nats-Msg-Id``, which JetStream also uses to drop retransmits.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from nats.aio.msg import Msg

from ackbridge.errors import InvalidOptionError
from ackbridge.messages import InboundMessage, OutboundMessage
from ackbridge.transport import header_text

MSG_ID = "Nats-Msg-Id"
TYPES = "Ackbridge-Types"
EXTRA = "Ackbridge-Headers"
CORRELATION_ID = "Ackbridge-Correlation-Id"
REPLY_TO = "Ackbridge-Reply-To"
CONTENT_TYPE = "Content-Type"
TIMESTAMP = "Ackbridge-Timestamp"
#: Set on dead-lettered copies: where and how often the original was delivered.
DEAD_LETTERED_FROM = "Ackbridge-Dead-Lettered-From"
DEAD_LETTER_SEQUENCE = "Ackbridge-Dead-Letter-Sequence"
DEAD_LETTER_DELIVERIES = "Ackbridge-Dead-Letter-Deliveries"
_FIELDS = {MSG_ID, TYPES, EXTRA, CORRELATION_ID, REPLY_TO, CONTENT_TYPE, TIMESTAMP}
#: Headers the server or nats-py add, never the application's.
_SERVER = {"Status", "Description", "Nats-Expected-Stream"}
#: How every JetStream reply subject (a delivery's ack handle) begins.
ACK_PREFIX = "$JS.ACK."


def _check_key(key: object) -> str:
    if not isinstance(key, str) or not key:
        raise InvalidOptionError(f"NATS header names must be non-empty strings, not {key!r}")
    if not key.isascii() or any(ch <= " " or ch in ":\x7f" for ch in key):
        raise InvalidOptionError(f"NATS header name {key!r} must be printable ASCII without ':' or spaces")
    return key


def _check_text(text: str, what: str) -> str:
    if "\r" in text or "\n" in text:
        raise InvalidOptionError(f"{what} contains a line break, which would end the NATS header")
    if text != text.strip():
        # nats-py strips values: the round trip would not be faithful.
        raise InvalidOptionError(f"{what} starts or ends with whitespace, which NATS headers do not keep")
    return text


def _encode(value: Any, what: str) -> tuple[str, str | None]:
    text, tag = header_text.to_text(value, what)
    return (_check_text(text, what) if tag is None else text), tag


def headers_for(message: OutboundMessage) -> dict[str, str] | None:
    """The NATS headers carrying *message*'s fields (None when there are none)."""
    if not (message.headers or message.message_id or message.correlation_id or message.reply_to
            or message.content_type or message.timestamp is not None):
        return None
    out: dict[str, str] = {}
    types: dict[str, str] = {}
    extra: dict[str, tuple[str, str | None]] = {}
    reserved = {k.lower() for k in (*_FIELDS, *_SERVER)}
    for key, value in message.headers.items():
        if not isinstance(key, str) or not key:
            raise InvalidOptionError(f"NATS header names must be non-empty strings, not {key!r}")
        if isinstance(value, str):
            text, tag = value, None
        else:
            text, tag = _encode(value, f"header {key!r}")
        try:
            _check_key(key)
            _check_text(text, f"header {key!r}")
            native = key.lower() not in reserved
        except InvalidOptionError:
            native = False
        if native:
            out[key] = text
            if tag is not None:
                types[key] = tag
        else:
            extra[key] = (text, tag)
    if types:
        out[TYPES] = json.dumps(types, separators=(",", ":"))
    if extra:
        out[EXTRA] = json.dumps(extra, separators=(",", ":"), ensure_ascii=True)
    if message.message_id:
        out[MSG_ID] = _check_text(str(message.message_id), "message_id")
    if message.correlation_id:
        out[CORRELATION_ID] = _check_text(str(message.correlation_id), "correlation_id")
    if message.reply_to:
        out[REPLY_TO] = _check_text(str(message.reply_to), "reply_to")
    if message.content_type:
        out[CONTENT_TYPE] = _check_text(str(message.content_type), "content_type")
    if message.timestamp is not None:
        out[TIMESTAMP] = repr(float(message.timestamp))
    return out


def ack_metadata(reply: str) -> tuple[str, int, int] | None:
    """(stream, stream sequence, times delivered) from a ``$JS.ACK`` reply subject.

    Both layouts: ``$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>``
    and the v2 one with domain and account hash before the stream."""
    if not reply.startswith(ACK_PREFIX):
        return None
    tokens = reply.split(".")
    try:
        if len(tokens) == 9:
            return tokens[2], int(tokens[5]), int(tokens[4])
        if len(tokens) >= 11:
            return tokens[4], int(tokens[7]), int(tokens[6])
    except ValueError:
        return None
    return None


def inbound_plain(subject: str, reply: str, body: bytes, generation: int, source: str) -> InboundMessage:
    """A delivery without headers as the core sees it: what most deliveries are, so its
    reply subject's usual layout is parsed inline (no helper call, no tuple to unpack)."""
    delivered: int | None
    # The broker id is the same in every delivery of the stored message: ack_wait redelivers
    # it while an earlier delivery is unsettled, and that is no separately stored copy.
    stored: tuple[str, int] | None
    tokens = reply.split(".")
    if len(tokens) == 9 and tokens[1] == "ACK" and tokens[0] == "$JS":
        try:
            delivered = int(tokens[4])
            stored = (tokens[2], int(tokens[5]))
        except ValueError:
            delivered = stored = None
    else:
        meta = ack_metadata(reply)
        delivered = meta[2] if meta is not None else None
        stored = (meta[0], meta[1]) if meta is not None else None
    return InboundMessage(wire_tag=reply, generation=generation, body=body, source=source, headers={},
                          routing_key=subject, redelivered=delivered is not None and delivered > 1,
                          delivery_count=delivered, broker_id=stored)


def inbound(msg: Msg, generation: int, source: str) -> InboundMessage:
    """The delivery *msg* (from a pull request) as the core sees it."""
    raw: Mapping[str, str] | None = msg.headers
    if not raw:
        return inbound_plain(msg.subject, msg.reply, msg.data, generation, source)
    reply = msg.reply
    meta = ack_metadata(reply)
    delivered = meta[2] if meta is not None else None
    stored = (meta[0], meta[1]) if meta is not None else None
    types: dict[str, str] = {}
    if TYPES in raw:
        try:
            loaded = json.loads(raw[TYPES])
            if isinstance(loaded, dict):
                types = {str(k): str(v) for k, v in loaded.items()}
        except ValueError:
            types = {}
    headers = {k: header_text.from_text(v, types.get(k)) for k, v in raw.items()
               if k not in _FIELDS and k not in _SERVER}
    if EXTRA in raw:
        try:
            carried = json.loads(raw[EXTRA])
        except ValueError:
            carried = {}
        if isinstance(carried, dict):
            for key, pair in carried.items():
                if isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str):
                    headers[str(key)] = header_text.from_text(pair[0], pair[1] if isinstance(pair[1], str) else None)
    timestamp: float | None = None
    if TIMESTAMP in raw:
        try:
            timestamp = float(raw[TIMESTAMP])
        except ValueError:
            timestamp = None
    return InboundMessage(
        wire_tag=reply, generation=generation, body=msg.data, source=source, headers=headers,
        routing_key=msg.subject, message_id=raw.get(MSG_ID), correlation_id=raw.get(CORRELATION_ID),
        reply_to=raw.get(REPLY_TO), content_type=raw.get(CONTENT_TYPE), timestamp=timestamp,
        redelivered=bool(delivered and delivered > 1), delivery_count=delivered, broker_id=stored)


def dead_letter_headers(message: InboundMessage) -> dict[str, str]:
    """Headers of the copy reject() stores in the dead-letter subject."""
    out = headers_for(OutboundMessage(
        body=b"", headers=message.headers, correlation_id=message.correlation_id, reply_to=message.reply_to,
        content_type=message.content_type, timestamp=message.timestamp)) or {}
    meta = ack_metadata(str(message.wire_tag))
    out[DEAD_LETTERED_FROM] = message.routing_key or message.source
    if meta is not None:
        out[DEAD_LETTER_SEQUENCE] = str(meta[1])
        out[DEAD_LETTER_DELIVERIES] = str(meta[2])
        # A retransmitted dead-letter publish (after a lost PubAck) is stored once.
        out[MSG_ID] = f"dlq-{meta[0]}-{meta[1]}"
    if message.message_id:
        out["Ackbridge-Original-Message-Id"] = message.message_id
    return out
