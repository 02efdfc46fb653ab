"""The RabbitMQ harness with every connection on the aio-pika asyncio transport.

Broker-side answers (rabbitmqctl, the management API) are RabbitHarness's own;
only the connection option differs."""

from __future__ import annotations

from typing import Any

from tests.rabbitmq.harness import RabbitHarness


class AioPikaHarness(RabbitHarness):
    def __init__(self, queue_type: str = "classic") -> None:
        super().__init__(queue_type)
        self.name = f"rabbitmq-{queue_type}-aio-pika"

    def connect_options(self) -> dict[str, Any]:
        return {**super().connect_options(), "asyncio_transport": "aio-pika"}
