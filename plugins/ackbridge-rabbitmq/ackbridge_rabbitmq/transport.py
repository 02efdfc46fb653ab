"""The ``amqp://`` / ``amqps://`` transport: both sides on one class.

The sync methods (pika) and the ``*_async`` methods (aiormq) keep separate
state; one instance serves one client, so only one side is ever opened.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from ackbridge.transport import Transport, TransportEvents
from ackbridge.urls import BrokerURL
from ackbridge_rabbitmq import common
from ackbridge_rabbitmq.async_side import AsyncSide
from ackbridge_rabbitmq.sync_side import SyncSide


class RabbitTransport(SyncSide, AsyncSide, Transport):
    capabilities = common.CLASSIC
    option_specs = common.OPTIONS
    supports_sync = True
    supports_async = True

    def __init__(self, url: BrokerURL, options: Mapping[str, Any], events: TransportEvents) -> None:
        super().__init__(url, options, events)
        # Per instance: delivery counts exist only for quorum queues.
        self.capabilities = common.capabilities_for(options)
        #: Shown by the broker (rabbitmqctl list_connections client_properties); lets tests find us.
        self.connection_name = f"ackbridge-{uuid.uuid4().hex[:16]}"
        self._sync_init()
        self._async_init()

    @property
    def generation(self) -> int:
        return max(self._gen, self._agen)
