"""The plugin's own options and the resolved settings the transport reads.

The shared connection options (``connect_timeout``, ``heartbeat``,
``reconnect``, ``reconnect_max_delay``, ``tls_*``) come from
:mod:`ackbridge.options` (:class:`~ackbridge.options.ConnectionSettings`);
only what is RabbitMQ's alone is declared here. :func:`endpoint` turns the URL
and those settings into what pika's connection parameters need.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ackbridge.options import ConnectionSettings, OptionSpec, positive_int
from ackbridge.transport.tls import tls_context
from ackbridge.urls import BrokerURL

QUEUE_TYPES = ("classic", "quorum")
#: The asyncio transports of connect_async (docs/brokers/rabbitmq.md, "asyncio transports").
THREADED, AIO_PIKA = "threaded", "aio-pika"
ASYNCIO_TRANSPORTS = (THREADED, AIO_PIKA)

OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("queue_type", str, "classic", "type of queues declare_queue() creates (classic|quorum)",
               lambda v: v in QUEUE_TYPES, "must be 'classic' or 'quorum'"),
    positive_int("delivery_limit", None, "quorum queues: x-delivery-limit (broker-side poison limit)",
                 nullable=True),
    OptionSpec("asyncio_transport", str, THREADED,
               "connect_async(): pika on an I/O thread (threaded) or aio-pika on the caller's loop (aio-pika)",
               lambda v: v in ASYNCIO_TRANSPORTS, "must be 'threaded' or 'aio-pika'"),
)

_DEFAULTS = {spec.name: spec.default for spec in OPTIONS}


@dataclass(frozen=True)
class RabbitSettings:
    """The plugin's own options, resolved and typed."""

    queue_type: str
    delivery_limit: int | None
    asyncio_transport: str = THREADED

    @property
    def quorum(self) -> bool:
        return self.queue_type == "quorum"

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> RabbitSettings:
        """Read them from a transport's resolved options (defaults where absent)."""
        return cls(queue_type=str(options.get("queue_type", _DEFAULTS["queue_type"])),
                   delivery_limit=options.get("delivery_limit", _DEFAULTS["delivery_limit"]),
                   asyncio_transport=str(options.get("asyncio_transport", _DEFAULTS["asyncio_transport"])))


# ---- connection parameters ------------------------------------------------------
@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    vhost: str
    username: str
    password: str
    tls: ssl.SSLContext | None


def endpoint(url: BrokerURL, connection: ConnectionSettings) -> Endpoint:
    """Where to connect and as whom. ``amqps``: the core's TLS context (verified
    unless ``tls_verify=false``, which is a UserWarning)."""
    tls = url.scheme == "amqps"
    vhost = url.path[1:] if url.path.startswith("/") else url.path
    return Endpoint(
        host=url.host or "localhost",
        port=url.port or (5671 if tls else 5672),
        vhost=vhost or "/",
        username=url.username or "guest",
        password=url.password_text or "guest",
        tls=tls_context(connection, url, warn_unverified=True) if tls else None,
    )
