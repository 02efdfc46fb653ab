"""Attribute names and values: OpenTelemetry's messaging semantic conventions
where one exists, ``ackbridge.*`` where the convention has nothing to say.

Nothing here ever holds a credential: a connection is described by its
broker, host and port (``server.address``/``server.port``), never its URL.
"""

from __future__ import annotations

from typing import Any

from ackbridge.urls import BrokerURL

MESSAGING_SYSTEM = "messaging.system"
DESTINATION = "messaging.destination.name"
OPERATION_TYPE = "messaging.operation.type"
OPERATION_NAME = "messaging.operation.name"
MESSAGE_ID = "messaging.message.id"
CONSUMER_GROUP = "messaging.consumer.group.name"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
ERROR_TYPE = "error.type"
#: A publish's final outcome: confirmed, refused or unknown.
OUTCOME = "ackbridge.outcome"
ACK_LABEL = "ackbridge.ack.label"
ACK_STATUS = "ackbridge.ack.status"
GENERATION = "ackbridge.generation"

#: messaging.operation.name of a poison message dead-lettered by ``max_deliveries``.
DEAD_LETTER = "dead_letter"

#: messaging.system per URL scheme: the convention's well-known value where it has one.
_SYSTEMS = {
    "amqp": "rabbitmq", "amqps": "rabbitmq",
    "amqp10": "amqp", "amqp10s": "amqp",
    "mqtt": "mqtt", "mqtts": "mqtt",
    "nats": "nats", "nats+tls": "nats",
    "local": "ackbridge_local",
}


def messaging_system(url: BrokerURL) -> str:
    return _SYSTEMS.get(url.scheme, url.scheme)


def connection_attributes(url: BrokerURL) -> dict[str, Any]:
    """What describes a connection in every attribute set: the system, host and
    port -- the URL's user name and password never appear."""
    attributes: dict[str, Any] = {MESSAGING_SYSTEM: messaging_system(url)}
    if url.host:
        attributes[SERVER_ADDRESS] = url.host
    if url.port is not None:
        attributes[SERVER_PORT] = url.port
    return attributes
