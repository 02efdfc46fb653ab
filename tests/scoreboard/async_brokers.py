"""The asyncio rows' targets: RabbitMQ classic and quorum on each asyncio transport of
``connect_async`` (``asyncio_transport=threaded``: pika on its I/O thread; ``=aio-pika``:
on the caller's loop). The sync rows (:mod:`tests.scoreboard.brokers`) stay as they are."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ackbridge.testing import BrokerHarness
from ackbridge.transport import ThreadedAsyncTransport
from tests.scoreboard.brokers import NETWORK, _rabbit, _via_proxy

#: The RabbitMQ plugin's asyncio transports (ackbridge_rabbitmq.options.ASYNCIO_TRANSPORTS).
ASYNCIO_TRANSPORTS = ("threaded", "aio-pika")


def transport_kind(conn: Any) -> str:
    """Which asyncio transport *conn* runs on: a row must run on the one it names."""
    from ackbridge_rabbitmq.aio.transport import RabbitAioPikaTransport

    found = conn._transport
    if isinstance(found, RabbitAioPikaTransport):
        return "aio-pika"
    if isinstance(found, ThreadedAsyncTransport):
        return "threaded"
    return type(found).__name__


@dataclass(frozen=True)
class AsyncBrokerEntry:
    name: str
    queue_type: str
    asyncio_transport: str
    faults: tuple[str, ...]

    def make(self) -> BrokerHarness:
        return _rabbit(self.queue_type)()

    @property
    def proxied(self) -> Callable[[BrokerHarness], Callable[[int], str]]:
        return _via_proxy


ASYNC_BROKERS: list[AsyncBrokerEntry] = [
    AsyncBrokerEntry(f"rabbitmq-{queue_type}-async-{transport}", queue_type, transport,
                     (*NETWORK, "poison") if queue_type == "quorum" else NETWORK)
    for queue_type in ("classic", "quorum") for transport in ASYNCIO_TRANSPORTS
]

#: The CI tier's consumer faults for the asyncio rows: one broker-side cut and one killed consumer.
ASYNC_CI_FAULTS = ("connection-cut", "consumer-sigkill")
