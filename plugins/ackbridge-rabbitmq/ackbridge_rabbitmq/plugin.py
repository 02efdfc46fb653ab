"""Registers the ``amqp://`` and ``amqps://`` schemes."""

from __future__ import annotations

from collections.abc import Callable

from ackbridge.hookspecs import hookimpl
from ackbridge.plugins import AdapterSpec
from ackbridge_rabbitmq.aio.selection import RabbitAsyncTransport
from ackbridge_rabbitmq.capabilities import CLASSIC, QUORUM
from ackbridge_rabbitmq.connection import RabbitSyncTransport


@hookimpl
def ackbridge_register_adapters(register: Callable[[AdapterSpec], None]) -> None:
    register(AdapterSpec(
        name="rabbitmq",
        schemes=("amqp", "amqps"),
        sync_transport=RabbitSyncTransport,
        # asyncio_transport=threaded (the default): pika on its I/O thread; =aio-pika: on the caller's loop.
        async_transport=RabbitAsyncTransport,
        capabilities=CLASSIC,
        description="RabbitMQ over AMQP 0-9-1, amqp://user:pass@host:5672/vhost (queue_type=classic|quorum)",
        variants=(QUORUM,),
        messaging_system="rabbitmq",
        client_loggers=("pika", "aio_pika", "aiormq"),
    ))
