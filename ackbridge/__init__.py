"""ackbridge: one acknowledgement model for every broker, carried into Spark.

Start with :func:`connect` (or :func:`connect_async`); the URL's scheme picks
the plugin. See ``docs/`` for the settlement model.
"""

from ackbridge.aclient import AsyncConfirm, AsyncConnection, AsyncConsumer, AsyncDelivery, AsyncPublisher
from ackbridge.capabilities import Capabilities, ConfirmDurability, Durability, Level, Support, Topology, Verb
from ackbridge.client import Confirm, Connection, Consumer, Delivery, Publisher
from ackbridge.connect import connect, connect_async
from ackbridge.errors import (
    AccessDeniedError,
    AckbridgeError,
    AlreadySettledError,
    AuthenticationError,
    BrokerError,
    BrokerUnreachableError,
    ConfigurationError,
    ConnectionLostError,
    DataLossError,
    InvalidLabelError,
    InvalidOptionError,
    InvalidURLError,
    PluginError,
    SettlementError,
    StaleDeliveryError,
    UnknownSchemeError,
    UnsupportedVerbError,
)
from ackbridge.labels import AggregatedAcks, LabelAck
from ackbridge.messages import ConfirmOutcome, ConfirmStatus, QueueInfo
from ackbridge.offset_log import LogRecord, OffsetLog, OffsetRange, open_offset_log
from ackbridge.settlement import State

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
    "DataLossError",
    "Delivery",
    "Durability",
    "InvalidLabelError",
    "InvalidOptionError",
    "InvalidURLError",
    "LabelAck",
    "Level",
    "LogRecord",
    "OffsetLog",
    "OffsetRange",
    "PluginError",
    "Publisher",
    "QueueInfo",
    "SettlementError",
    "StaleDeliveryError",
    "State",
    "Support",
    "Topology",
    "UnknownSchemeError",
    "UnsupportedVerbError",
    "Verb",
    "connect",
    "connect_async",
    "open_offset_log",
]
