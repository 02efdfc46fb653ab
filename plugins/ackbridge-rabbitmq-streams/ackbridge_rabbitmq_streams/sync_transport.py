"""The blocking transport: :class:`StreamAsyncTransport` on an event loop of its own
thread (rstream is asyncio-only); the hand-off lives in :mod:`ackbridge.transport.loop_thread`.
``unsubscribe`` is queued behind earlier acks there, so their offset is stored
before the consumer ends."""

from __future__ import annotations

from ackbridge.transport.loop_thread import LoopThreadTransport
from ackbridge_rabbitmq_streams.async_transport import StreamAsyncTransport
from ackbridge_rabbitmq_streams.capabilities import CAPABILITIES
from ackbridge_rabbitmq_streams.options import OPTIONS


class StreamSyncTransport(LoopThreadTransport):
    capabilities = CAPABILITIES
    option_specs = OPTIONS
    inner_type = StreamAsyncTransport
