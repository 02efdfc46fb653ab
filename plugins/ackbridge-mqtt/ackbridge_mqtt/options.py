"""The plugin's own options and the resolved settings a link reads.

The shared connection options (``connect_timeout``, ``heartbeat``,
``reconnect``, ``reconnect_max_delay``, ``tls_*``) are declared once in
:mod:`ackbridge.options`; only what is MQTT's alone is declared here.
:class:`MqttSettings` is the one typed view of both that the links read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from paho.mqtt.enums import MQTTProtocolVersion

from ackbridge.errors import InvalidOptionError, InvalidURLError
from ackbridge.options import ConnectionSettings, OptionSpec, positive_int
from ackbridge.urls import BrokerURL
from ackbridge_mqtt.codec import MAX_STRING_BYTES
from ackbridge_mqtt.sessions import DEFAULT_DEAD_LETTER_TOPIC

PROTOCOLS = {"5": MQTTProtocolVersion.MQTTv5, "5.0": MQTTProtocolVersion.MQTTv5,
             "3.1.1": MQTTProtocolVersion.MQTTv311, "311": MQTTProtocolVersion.MQTTv311}

#: The largest keep alive an MQTT CONNECT carries (a 16-bit field, in seconds).
MAX_KEEPALIVE = 65535

OPTIONS = (
    OptionSpec("protocol", str, "5", "MQTT protocol version: '5' or '3.1.1'",
               lambda v: v in PROTOCOLS, "must be '5' or '3.1.1'"),
    OptionSpec("client_id", str, None, "fixed client id of the consumer session (default: derived from the topic)",
               lambda v: 0 < len(v.encode("utf-8", "surrogatepass")) <= MAX_STRING_BYTES,
               "must be a non-empty string", nullable=True),
    positive_int("session_expiry", 3600, "seconds the broker keeps a disconnected consumer session (MQTT 5)"),
    OptionSpec("qos", int, 1, "QoS for subscriptions and publishes (1 = at-least-once)",
               lambda v: v in (0, 1, 2), "must be 0, 1 or 2"),
    OptionSpec("dead_letter_topic", str, DEFAULT_DEAD_LETTER_TOPIC,
               "where reject() publishes; '{topic}' is replaced by the message's topic",
               lambda v: bool(v) and "+" not in v and "#" not in v, "must be a topic name without wildcards"),
    OptionSpec("retry_topic", str, None, "where requeue() republishes ('{topic}' replaced); the consumer "
               "subscribes to it too. Default: the message's own topic", nullable=True),
    positive_int("publish_inflight", 100, "unacknowledged outgoing QoS>0 publishes paho keeps on the wire"),
    positive_int("broker_max_queued", 1000, "the broker's max_queued_messages per session (Mosquitto's default "
                 "1000): beyond it an offline session's messages are dropped; consume() warns when the "
                 "expected backlog exceeds it"),
    positive_int("expected_backlog", None, "most messages that may pile up in a session while its consumer is "
                 "offline (None: unknown, so consume() warns that the broker may drop past broker_max_queued)",
                 nullable=True),
)


def keepalive_seconds(heartbeat: float) -> int:
    """MQTT's keep alive (whole seconds) for the shared ``heartbeat`` option.

    0 keeps its meaning (no keep alive); any other value is at least 1 s, so a
    sub-second heartbeat never rounds to "off"."""
    if heartbeat == 0:
        return 0
    keepalive = max(1, round(heartbeat))
    if keepalive > MAX_KEEPALIVE:
        raise InvalidOptionError(f"option 'heartbeat'={heartbeat!r} is invalid: MQTT keep alive is at most "
                                 f"{MAX_KEEPALIVE} s")
    return keepalive


@dataclass(frozen=True)
class MqttSettings:
    """Everything a link needs to know about the connection, resolved and typed."""

    host: str
    port: int
    tls: bool
    protocol: MQTTProtocolVersion
    client_id: str | None
    session_expiry: int
    qos: int
    dead_letter_template: str
    retry_template: str | None
    publish_inflight: int
    broker_max_queued: int
    expected_backlog: int | None
    keepalive: int
    connection: ConnectionSettings

    @property
    def v5(self) -> bool:
        return self.protocol == MQTTProtocolVersion.MQTTv5

    @classmethod
    def resolve(cls, url: BrokerURL, options: Mapping[str, Any], connection: ConnectionSettings) -> MqttSettings:
        if url.path not in ("", "/"):
            raise InvalidURLError(f"{url.redacted!r}: an MQTT URL has no path (topics are given to consume/publish)")
        if connection.tls_key_file and not connection.tls_cert_file:
            raise InvalidOptionError("option 'tls_key_file' needs 'tls_cert_file' (the client certificate)")
        tls = url.scheme == "mqtts"
        return cls(
            host=url.host or "localhost",
            port=url.port or (8883 if tls else 1883),
            tls=tls,
            protocol=PROTOCOLS[str(options.get("protocol", "5"))],
            client_id=options.get("client_id"),
            session_expiry=int(options.get("session_expiry", 3600)),
            qos=int(options.get("qos", 1)),
            dead_letter_template=str(options.get("dead_letter_topic") or DEFAULT_DEAD_LETTER_TOPIC),
            retry_template=options.get("retry_topic"),
            publish_inflight=int(options.get("publish_inflight", 100)),
            broker_max_queued=int(options.get("broker_max_queued", 1000)),
            expected_backlog=options.get("expected_backlog"),
            keepalive=keepalive_seconds(connection.heartbeat),
            connection=connection,
        )

    def retry_target(self, topic: str) -> str:
        """Where requeue() republishes a message of *topic*."""
        return self.retry_template.replace("{topic}", topic) if self.retry_template else topic
