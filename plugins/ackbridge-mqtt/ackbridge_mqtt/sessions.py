"""Topic and session names: how a "queue" maps onto MQTT.

A queue is a topic plus the persistent session subscribed to it. The
session's client id is fixed (so the broker keeps unacked messages across
restarts): the ``client_id`` option when given, otherwise derived from the
topic, so every process consuming the same topic resumes the same session.
"""

from __future__ import annotations

import hashlib

DEFAULT_DEAD_LETTER_TOPIC = "{topic}/dlq"


def derived_session_id(topic: str) -> str:
    # MQTT 3.1.1 servers need only accept 23-byte ids; Mosquitto accepts more,
    # but staying short keeps 3.1.1 brokers happy.
    return "ab-" + hashlib.sha256(topic.encode("utf-8")).hexdigest()[:20]


def check_topic_name(topic: str) -> str:
    """A queue is a topic NAME: non-empty, no wildcards, at most 65535 UTF-8 bytes and
    no character MQTT forbids. paho raises on a wildcard inside its network thread (on
    connect, so the link never comes up) and Mosquitto drops the connection on an
    empty or control-character topic: refuse them before anything is sent."""
    from ackbridge.errors import InvalidOptionError
    from ackbridge_mqtt.codec import MAX_STRING_BYTES, check_mqtt_text

    if not isinstance(topic, str) or not topic:
        raise InvalidOptionError(f"an MQTT topic must be a non-empty string, not {topic!r:.60}")
    if "+" in topic or "#" in topic:
        raise InvalidOptionError(f"MQTT topic {topic[:60]!r} contains a wildcard ('+' or '#'); a queue is one topic")
    if len(topic.encode("utf-8", "surrogatepass")) > MAX_STRING_BYTES:
        raise InvalidOptionError(f"MQTT topic {topic[:40]!r}... is longer than {MAX_STRING_BYTES} bytes")
    return check_mqtt_text(topic, f"MQTT topic {topic[:60]!r}")


def consumer_session_id(topic: str, client_id: str | None, index: int = 0) -> str:
    """The session id the index-th subscription of a connection uses for *topic*
    (which is checked first: every declare and subscribe passes here)."""
    check_topic_name(topic)
    if client_id:
        return client_id if index == 0 else f"{client_id}-{index}"
    return derived_session_id(topic)


def dead_letter_topic(template: str | None, topic: str) -> str:
    return (template or DEFAULT_DEAD_LETTER_TOPIC).replace("{topic}", topic)
