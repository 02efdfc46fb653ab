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

def connection_attributes(url: BrokerURL, messaging_system: str) -> dict[str, Any]:
    """What describes a connection in every attribute set: the system (as its
    plugin declared it: ``AdapterSpec.messaging_system``), host and port -- the
    URL's user name and password never appear."""
    attributes: dict[str, Any] = {MESSAGING_SYSTEM: messaging_system}
    if url.host:
        attributes[SERVER_ADDRESS] = url.host
    if url.port is not None:
        attributes[SERVER_PORT] = url.port
    return attributes
