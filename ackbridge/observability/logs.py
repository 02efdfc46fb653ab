"""The ``ackbridge.*`` logger tree, and the client libraries' noise kept below INFO.

Loggers: ``ackbridge`` (core), ``ackbridge.rabbitmq``, ``ackbridge.mqtt``,
``ackbridge.amqp10``, ``ackbridge.nats``, ``ackbridge.local`` (embedded broker),
``ackbridge.spark``. ``logging.getLogger("ackbridge").setLevel(...)`` governs all.

pika, paho, proton, nats-py and rstream log every connect and reconnect at INFO. The first
connection ackbridge opens sets those libraries' own named loggers to WARNING --
only a logger the application has not configured (level NOTSET, no handler but
the library's own NullHandler);
nothing process-wide (no root logger, no ``logging.disable``, no patching).
To see their INFO lines, set their level before connecting, e.g.
``logging.getLogger("pika").setLevel(logging.INFO)``.
"""

from __future__ import annotations

import logging
from typing import Any

#: The client libraries' top-level logger names.
CLIENT_LOGGERS = ("pika", "paho", "paho.mqtt", "proton", "nats", "aio_pika", "aiormq", "rstream")
_quieted = False


def quiet_client_libraries(level: int = logging.WARNING) -> list[str]:
    """Set each client library's logger the application left alone to *level*;
    the names changed. Runs once per process (later calls change nothing)."""
    global _quieted
    if _quieted:
        return []
    _quieted = True
    changed = []
    for name in CLIENT_LOGGERS:
        logger = logging.getLogger(name)
        # A library's own NullHandler does not count as the application configuring it.
        if logger.level == logging.NOTSET and all(type(h) is logging.NullHandler for h in logger.handlers):
            logger.setLevel(level)
            changed.append(name)
    return changed


def delivery_fields(broker: str, source: str, generation: int) -> dict[str, Any]:
    """``extra=`` of a warning about a delivery: grep-able and on the record
    (``record.ackbridge_broker`` ...), never a URL or credential."""
    return {"ackbridge_broker": broker, "ackbridge_destination": source, "ackbridge_generation": generation}
