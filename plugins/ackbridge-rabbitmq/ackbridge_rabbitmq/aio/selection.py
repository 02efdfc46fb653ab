"""Which asyncio transport serves ``connect_async("amqp://...")``: the option
``asyncio_transport`` (``threaded``, the default, or ``aio-pika``).

The core builds the class a plugin registers as its ``async_transport``; this
class is that seam's one switch: it reads the resolved option and builds the
chosen transport instead of itself (the option was checked against
``ASYNCIO_TRANSPORTS`` when the connection's options were resolved). aio-pika
is imported only when it is chosen, so the sync face and the threaded path
never load it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ackbridge.transport import AsyncTransport, ThreadedAsyncTransport, TransportEvents
from ackbridge.urls import BrokerURL
from ackbridge_rabbitmq.capabilities import CLASSIC
from ackbridge_rabbitmq.connection import RabbitSyncTransport
from ackbridge_rabbitmq.options import AIO_PIKA, OPTIONS, RabbitSettings

#: pika's sync transport on its I/O thread, handed to the loop by the core.
ThreadedRabbitTransport = ThreadedAsyncTransport.over(RabbitSyncTransport)


class RabbitAsyncTransport(AsyncTransport):
    """Builds the asyncio transport the ``asyncio_transport`` option names; never an instance itself."""

    capabilities = CLASSIC
    option_specs = OPTIONS

    def __new__(cls, url: BrokerURL, options: Mapping[str, Any], events: TransportEvents) -> Any:
        if RabbitSettings.from_options(options).asyncio_transport == AIO_PIKA:
            from ackbridge_rabbitmq.aio.transport import RabbitAioPikaTransport

            return RabbitAioPikaTransport(url, options, events)
        return ThreadedRabbitTransport(url, options, events)
