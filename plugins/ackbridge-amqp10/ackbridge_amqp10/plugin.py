"""Registers the ``amqp10://`` and ``amqp10s://`` schemes."""

from __future__ import annotations

from collections.abc import Callable

from ackbridge.hookspecs import hookimpl
from ackbridge.plugins import AdapterSpec
from ackbridge_amqp10.aio import Amqp10AsyncTransport
from ackbridge_amqp10.capabilities import GENERIC, RABBITMQ
from ackbridge_amqp10.connection import Amqp10Transport


@hookimpl
def ackbridge_register_adapters(register: Callable[[AdapterSpec], None]) -> None:
    register(AdapterSpec(
        name="amqp10",
        schemes=("amqp10", "amqp10s"),
        sync_transport=Amqp10Transport,
        async_transport=Amqp10AsyncTransport,
        capabilities=RABBITMQ,
        description="AMQP 1.0 (python-qpid-proton): amqp10://user:pass@host:5672, amqp10s:// for TLS",
        messaging_system="amqp",
        client_loggers=("proton",),
        variants=(GENERIC,),
    ))
