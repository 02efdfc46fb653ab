"""The blocking transport: :class:`NatsAsyncTransport` on an event loop of its own
thread (nats-py is asyncio-only); the hand-off lives in :mod:`ackbridge.transport.loop_thread`."""

from __future__ import annotations

from ackbridge.transport.loop_thread import LoopThreadTransport
from ackbridge_nats.async_transport import NatsAsyncTransport
from ackbridge_nats.capabilities import CAPABILITIES
from ackbridge_nats.options import OPTIONS


class NatsSyncTransport(LoopThreadTransport):
    capabilities = CAPABILITIES
    option_specs = OPTIONS
    inner_type = NatsAsyncTransport
