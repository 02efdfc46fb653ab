"""ackbridge: one acknowledgement model for every broker, carried into Spark.

Start with :func:`connect` (or :func:`connect_async`); the URL's scheme picks
the plugin. See ``docs/`` for the settlement model.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ackbridge.aio.connection import AsyncConfirm, AsyncConnection, AsyncConsumer, AsyncDelivery, AsyncPublisher
    from ackbridge.capabilities import Capabilities, ConfirmDurability, Durability, Level, Support, Topology, Verb
    from ackbridge.errors import (
        AccessDeniedError,
        AckbridgeError,
        AlreadySettledError,
        AuthenticationError,
        BrokerError,
        BrokerUnreachableError,
        ConfigurationError,
        ConnectionLostError,
        ConsumerClosedError,
        DataLossError,
        HandlerTimeoutError,
        InvalidLabelError,
        InvalidOptionError,
        InvalidURLError,
        MissingMessageIdError,
        PluginError,
        SettlementError,
        StaleDeliveryError,
        SubscriptionCancelledError,
        UnknownSchemeError,
        UnsupportedVerbError,
    )
    from ackbridge.kernel.labels import AggregatedAcks, LabelAck
    from ackbridge.kernel.settlement import State
    from ackbridge.messages import ConfirmOutcome, ConfirmStatus, QueueInfo
    from ackbridge.sync.connection import Confirm, Connection, Consumer, Delivery, Publisher
    from ackbridge.transport.offset_log import LogRecord, OffsetLog, OffsetRange, open_offset_log

# Bound at import, not lazily: ``ackbridge.connect`` is also a submodule, and the
# first import of a submodule sets the package attribute of that name to the module.
from ackbridge.connect import connect, connect_async

__version__ = "0.1.0"

__all__ = [
    "AccessDeniedError",
    "AckbridgeError",
    "AggregatedAcks",
    "AlreadySettledError",
    "AsyncConfirm",
    "AsyncConnection",
    "AsyncConsumer",
    "AsyncDelivery",
    "AsyncPublisher",
    "AuthenticationError",
    "BrokerError",
    "BrokerUnreachableError",
    "Capabilities",
    "ConfigurationError",
    "Confirm",
    "ConfirmDurability",
    "ConfirmOutcome",
    "ConfirmStatus",
    "Connection",
    "ConnectionLostError",
    "Consumer",
    "ConsumerClosedError",
    "DataLossError",
    "Delivery",
    "Durability",
    "HandlerTimeoutError",
    "InvalidLabelError",
    "InvalidOptionError",
    "InvalidURLError",
    "LabelAck",
    "Level",
    "LogRecord",
    "MissingMessageIdError",
    "OffsetLog",
    "OffsetRange",
    "PluginError",
    "Publisher",
    "QueueInfo",
    "SettlementError",
    "StaleDeliveryError",
    "State",
    "SubscriptionCancelledError",
    "Support",
    "Topology",
    "UnknownSchemeError",
    "UnsupportedVerbError",
    "Verb",
    "connect",
    "connect_async",
    "open_offset_log",
]

# Names load on first use (PEP 562): a process that needs only a leaf module
# (errors, files, offset_log: every Spark worker process, started anew for each
# query) skips the clients, asyncio and the plugin registry, ~80 ms of imports.
_EXPORTS: dict[str, str] = {
    "AccessDeniedError": "ackbridge.errors",
    "AckbridgeError": "ackbridge.errors",
    "AggregatedAcks": "ackbridge.kernel.labels",
    "AlreadySettledError": "ackbridge.errors",
    "AsyncConfirm": "ackbridge.aio.connection",
    "AsyncConnection": "ackbridge.aio.connection",
    "AsyncConsumer": "ackbridge.aio.connection",
    "AsyncDelivery": "ackbridge.aio.connection",
    "AsyncPublisher": "ackbridge.aio.connection",
    "AuthenticationError": "ackbridge.errors",
    "BrokerError": "ackbridge.errors",
    "BrokerUnreachableError": "ackbridge.errors",
    "Capabilities": "ackbridge.capabilities",
    "ConfigurationError": "ackbridge.errors",
    "Confirm": "ackbridge.sync.connection",
    "ConfirmDurability": "ackbridge.capabilities",
    "ConfirmOutcome": "ackbridge.messages",
    "ConfirmStatus": "ackbridge.messages",
    "Connection": "ackbridge.sync.connection",
    "ConnectionLostError": "ackbridge.errors",
    "ConsumerClosedError": "ackbridge.errors",
    "Consumer": "ackbridge.sync.connection",
    "DataLossError": "ackbridge.errors",
    "Delivery": "ackbridge.sync.connection",
    "Durability": "ackbridge.capabilities",
    "HandlerTimeoutError": "ackbridge.errors",
    "InvalidLabelError": "ackbridge.errors",
    "InvalidOptionError": "ackbridge.errors",
    "InvalidURLError": "ackbridge.errors",
    "MissingMessageIdError": "ackbridge.errors",
    "LabelAck": "ackbridge.kernel.labels",
    "Level": "ackbridge.capabilities",
    "LogRecord": "ackbridge.transport.offset_log",
    "OffsetLog": "ackbridge.transport.offset_log",
    "OffsetRange": "ackbridge.transport.offset_log",
    "PluginError": "ackbridge.errors",
    "Publisher": "ackbridge.sync.connection",
    "QueueInfo": "ackbridge.messages",
    "SettlementError": "ackbridge.errors",
    "StaleDeliveryError": "ackbridge.errors",
    "SubscriptionCancelledError": "ackbridge.errors",
    "State": "ackbridge.kernel.settlement",
    "Support": "ackbridge.capabilities",
    "Topology": "ackbridge.capabilities",
    "UnknownSchemeError": "ackbridge.errors",
    "UnsupportedVerbError": "ackbridge.errors",
    "Verb": "ackbridge.capabilities",
    "open_offset_log": "ackbridge.transport.offset_log",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
    else:  # a submodule used as an attribute (``ackbridge.sync.connection``), as eager imports allowed
        try:
            value = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
