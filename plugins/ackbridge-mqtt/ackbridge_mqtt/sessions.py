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


def consumer_session_id(topic: str, client_id: str | None, index: int = 0) -> str:
    """The session id the index-th subscription of a connection uses for *topic*."""
    if client_id:
        return client_id if index == 0 else f"{client_id}-{index}"
    return derived_session_id(topic)


def dead_letter_topic(template: str | None, topic: str) -> str:
    return (template or DEFAULT_DEAD_LETTER_TOPIC).replace("{topic}", topic)
