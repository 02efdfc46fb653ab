"""Registers the ``local://`` scheme."""

from __future__ import annotations

from collections.abc import Callable

from ackbridge.hookspecs import hookimpl
from ackbridge.plugins import AdapterSpec
from ackbridge_local.capabilities import CAPABILITIES
from ackbridge_local.connection import LocalTransport


@hookimpl
def ackbridge_register_adapters(register: Callable[[AdapterSpec], None]) -> None:
    register(AdapterSpec(
        name="embedded",
        schemes=("local",),
        sync_transport=LocalTransport,
        capabilities=CAPABILITIES,
        messaging_system="ackbridge_local",
        description="embedded SQLite broker, local://PATH/TO/FILE.db (no server)",
    ))
