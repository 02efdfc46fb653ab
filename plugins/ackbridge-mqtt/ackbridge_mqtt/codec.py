"""ackbridge message fields <-> MQTT 5 PUBLISH properties.

MQTT 5 user properties are UTF-8 string pairs, so non-string header values
are written as text and their types listed in one ``ackbridge-types`` user
property, which lets them come back with the type they were sent with.
MQTT 3.1.1 has no properties: only the body travels.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from ackbridge.errors import InvalidOptionError
from ackbridge.transport import header_text
from ackbridge.transport.text import forbidden_character

TYPES_KEY = "ackbridge-types"
MESSAGE_ID_KEY = "ackbridge-message-id"
TIMESTAMP_KEY = "ackbridge-timestamp"
#: How many times the message was delivered before this copy was made (requeue / dead-letter).
ATTEMPT_KEY = "ackbridge-attempt"
DEAD_LETTERED_FROM_KEY = "ackbridge-dead-lettered-from"
_RESERVED = {TYPES_KEY, MESSAGE_ID_KEY, TIMESTAMP_KEY, ATTEMPT_KEY}
#: The longest UTF-8 string MQTT carries (a 16-bit length prefix): topics, client ids.
MAX_STRING_BYTES = 65535

def check_mqtt_text(text: str, what: str) -> str:
    """Refuse a string an MQTT server may reject with a dropped connection: MQTT 5
    forbids U+0000 and lets a server refuse control characters and non-characters
    (section 1.5.4); Mosquitto 2.0 does, dropping every other publish in flight
    with it. paho sends them as given."""
    bad = forbidden_character(text)
    if bad is None:
        return text
    raise InvalidOptionError(
        f"{what} contains {bad!r} (U+{ord(bad):04X}), which MQTT forbids in strings (control character or "
        "non-character); Mosquitto drops the connection on it")


def publish_properties(
    *,
    headers: Mapping[str, Any],
    message_id: str | None,
    correlation_id: str | None,
    reply_to: str | None,
    content_type: str | None,
    timestamp: float | None,
    extra: Mapping[str, str] | None = None,
) -> Properties:
    props = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]  # paho leaves it untyped
    pairs: list[tuple[str, str]] = []
    types: dict[str, str] = {}
    for key, value in headers.items():
        if key in _RESERVED:
            continue  # ackbridge's own bookkeeping is rewritten below, never copied blindly
        text, tag = header_text.to_text(value)
        check_mqtt_text(key, "header name")
        check_mqtt_text(text, f"header {key!r}")
        pairs.append((key, text))
        if tag is not None:
            types[key] = tag
    if types:
        pairs.append((TYPES_KEY, json.dumps(types, separators=(",", ":"))))
    if message_id is not None:
        pairs.append((MESSAGE_ID_KEY, check_mqtt_text(message_id, "message_id")))
    if timestamp is not None:
        pairs.append((TIMESTAMP_KEY, repr(timestamp)))
    for key, text in (extra or {}).items():
        pairs.append((key, text))
    if pairs:
        props.UserProperty = pairs
    if correlation_id is not None:
        props.CorrelationData = correlation_id.encode("utf-8")
    if reply_to:
        props.ResponseTopic = check_mqtt_text(reply_to, "reply_to")
    if content_type:
        props.ContentType = check_mqtt_text(content_type, "content_type")
    return props


class Decoded:
    """Fields read back from a PUBLISH's properties."""

    __slots__ = ("attempt", "content_type", "correlation_id", "headers", "message_id", "reply_to", "timestamp")

    def __init__(self) -> None:
        self.headers: dict[str, Any] = {}
        self.message_id: str | None = None
        self.correlation_id: str | None = None
        self.reply_to: str | None = None
        self.content_type: str | None = None
        self.timestamp: float | None = None
        self.attempt = 0


def decode_properties(props: Properties | None) -> Decoded:
    out = Decoded()
    if props is None:
        return out
    # paho's Properties keeps each property present as a plain attribute: reading
    # them from vars() costs no AttributeError per missing one (the common case).
    present = vars(props)
    pairs: list[tuple[str, str]] = present.get("UserProperty") or []
    types: dict[str, str] = {}
    for key, text in pairs:
        if key == TYPES_KEY:
            try:
                types = json.loads(text)
            except ValueError:
                types = {}
    for key, text in pairs:
        if key == TYPES_KEY:
            continue
        if key == MESSAGE_ID_KEY:
            out.message_id = text
        elif key == TIMESTAMP_KEY:
            try:
                out.timestamp = float(text)
            except ValueError:
                out.timestamp = None
        elif key == ATTEMPT_KEY:
            try:
                out.attempt = max(int(text), 0)
            except ValueError:
                out.attempt = 0
        else:
            try:
                out.headers[key] = header_text.from_text(text, types.get(key))
            except ValueError:
                out.headers[key] = text  # foreign publisher: keep its text as is
    correlation = present.get("CorrelationData")
    if isinstance(correlation, (bytes, bytearray)):
        out.correlation_id = bytes(correlation).decode("utf-8", "replace")
    out.reply_to = present.get("ResponseTopic")
    out.content_type = present.get("ContentType")
    return out


def over_packet_limit(limit: int | None, topic: str, body: bytes, props: Any) -> str | None:
    """Why a PUBLISH cannot go to a broker whose CONNACK set Maximum Packet Size
    *limit* (sent, it would end the connection), or None when it fits."""
    if not limit or len(body) < limit - 65_600:  # far below: skip the count (hot path)
        return None
    size = 2 + len(topic.encode()) + 2 + len(body) + (len(props.pack()) if props is not None else 1)
    size += 1 + (1 if size < 128 else 2 if size < 16_384 else 3 if size < 2_097_152 else 4)
    if size <= limit:
        return None
    return (f"refused before sending: the PUBLISH packet takes {size} bytes, more than the broker's Maximum "
            f"Packet Size ({limit} bytes; Mosquitto: max_packet_size)")
