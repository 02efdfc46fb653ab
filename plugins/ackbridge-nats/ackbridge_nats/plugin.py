"""Registers the ``nats://`` and ``nats+tls://`` schemes."""

from __future__ import annotations

from collections.abc import Callable

from ackbridge.hookspecs import hookimpl
from ackbridge.plugins import AdapterSpec
from ackbridge_nats.capabilities import CAPABILITIES
from ackbridge_nats.connection import NatsAsyncTransport, NatsSyncTransport


@hookimpl
def ackbridge_register_adapters(register: Callable[[AdapterSpec], None]) -> None:
    register(AdapterSpec(
        name="nats",
        schemes=("nats", "nats+tls"),
        sync_transport=NatsSyncTransport,
        async_transport=NatsAsyncTransport,
        capabilities=CAPABILITIES,
        description="NATS JetStream via nats-py, nats[+tls]://[user:pass@|token@]host:4222",
        messaging_system="nats",
        client_loggers=("nats",),
    ))
