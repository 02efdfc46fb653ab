"""Registers the ``rabbitmq-stream://`` and ``rabbitmq-stream+tls://`` schemes."""

from __future__ import annotations

from collections.abc import Callable

from ackbridge.hookspecs import hookimpl
from ackbridge.plugins import AdapterSpec
from ackbridge_rabbitmq_streams.capabilities import CAPABILITIES
from ackbridge_rabbitmq_streams.connection import StreamAsyncTransport, StreamSyncTransport
from ackbridge_rabbitmq_streams.offset_log import open_stream_log
from ackbridge_rabbitmq_streams.options import SCHEME, TLS_SCHEME


@hookimpl
def ackbridge_register_adapters(register: Callable[[AdapterSpec], None]) -> None:
    register(AdapterSpec(
        name="rabbitmq-streams",
        schemes=(SCHEME, TLS_SCHEME),
        sync_transport=StreamSyncTransport,
        async_transport=StreamAsyncTransport,
        capabilities=CAPABILITIES,
        offset_log=open_stream_log,
        messaging_system="rabbitmq",
        client_loggers=("rstream",),
        description="RabbitMQ streams via rstream, rabbitmq-stream[+tls]://user:pass@host:5552/vhost",
    ))
