"""Topic and session names: how a "queue" maps onto MQTT.

A queue is a topic plus the persistent session subscribed to it. The
session's client id is fixed (so the broker keeps unacked messages across
restarts): the ``client_id`` option when given, otherwise derived from the
topic, so every process consuming the same topic resumes the same session.

A source may also be a topic FILTER (``sensors/+/temp``, ``sensors/#``): its
session subscribes to the filter, and its id is derived from a stable
placeholder topic name (:func:`session_topic`), the one the Spark connector
used before the plugin took filters, so the sessions it made are resumed.
"""

from __future__ import annotations

import hashlib

from ackbridge.errors import InvalidOptionError
from ackbridge_mqtt.codec import MAX_STRING_BYTES, check_mqtt_text

DEFAULT_DEAD_LETTER_TOPIC = "{topic}/dlq"
#: The placeholder topic names of filter sessions start so (see :func:`session_topic`).
FILTER_SESSION_PREFIX = "ackbridge-spark/filter-"


def derived_session_id(topic: str) -> str:
    # MQTT 3.1.1 servers need only accept 23-byte ids; Mosquitto accepts more,
    # but staying short keeps 3.1.1 brokers happy.
    return "ab-" + hashlib.sha256(topic.encode("utf-8")).hexdigest()[:20]


def check_topic_name(topic: str) -> str:
    """A queue is a topic NAME: non-empty, no wildcards, at most 65535 UTF-8 bytes and
    no character MQTT forbids. paho raises on a wildcard inside its network thread (on
    connect, so the link never comes up) and Mosquitto drops the connection on an
    empty or control-character topic: refuse them before anything is sent."""
    if not isinstance(topic, str) or not topic:
        raise InvalidOptionError(f"an MQTT topic must be a non-empty string, not {topic!r:.60}")
    if "+" in topic or "#" in topic:
        raise InvalidOptionError(f"MQTT topic {topic[:60]!r} contains a wildcard ('+' or '#'); a queue is one topic")
    if len(topic.encode("utf-8", "surrogatepass")) > MAX_STRING_BYTES:
        raise InvalidOptionError(f"MQTT topic {topic[:40]!r}... is longer than {MAX_STRING_BYTES} bytes")
    return check_mqtt_text(topic, f"MQTT topic {topic[:60]!r}")


def is_filter(source: str) -> bool:
    """Whether *source* is a topic filter (has ``+`` or ``#``) rather than a topic name."""
    return "+" in source or "#" in source


def check_source(source: str) -> str:
    """A consume / declare source: a topic name (:func:`check_topic_name`) or a valid
    topic filter: ``+`` is a whole level, ``#`` a whole last level (MQTT 4.7.1).
    paho raises on a malformed filter inside its network thread: refuse it here."""
    if not isinstance(source, str) or not is_filter(source):
        return check_topic_name(source)
    if len(source.encode("utf-8", "surrogatepass")) > MAX_STRING_BYTES:
        raise InvalidOptionError(f"MQTT topic filter {source[:40]!r}... is longer than {MAX_STRING_BYTES} bytes")
    levels = source.split("/")
    for i, level in enumerate(levels):
        if ("#" in level and (level != "#" or i != len(levels) - 1)) or ("+" in level and level != "+"):
            raise InvalidOptionError(
                f"MQTT topic filter {source[:60]!r} is malformed: '+' must be a whole level and '#' the whole "
                "last level (e.g. 'sensors/+/temp', 'sensors/#')")
    return check_mqtt_text(source, f"MQTT topic filter {source[:60]!r}")


def session_topic(source: str) -> str:
    """The topic name a source's session id is derived from: the topic itself, or for
    a filter a stable placeholder (``ackbridge-spark/filter-<hash of the filter>``)."""
    if not is_filter(source):
        return source
    return FILTER_SESSION_PREFIX + hashlib.sha256(source.encode("utf-8")).hexdigest()[:20]


def session_id(source: str) -> str:
    """The derived session id of a topic or filter (no ``client_id`` option)."""
    return derived_session_id(session_topic(source))


def consumer_session_id(topic: str, client_id: str | None, index: int = 0) -> str:
    """The session id the index-th subscription of a connection uses for *topic*, a
    topic name or filter (checked first: every declare and subscribe passes here)."""
    check_source(topic)
    if client_id:
        return client_id if index == 0 else f"{client_id}-{index}"
    return session_id(topic)


def dead_letter_topic(template: str | None, topic: str) -> str:
    return (template or DEFAULT_DEAD_LETTER_TOPIC).replace("{topic}", topic)
