"""ackbridge: one acknowledgement model for every broker, carried into Spark.

Start with :func:`connect` (or :func:`connect_async`); the URL's scheme picks
the plugin. See ``docs/`` for the settlement model.
"""

from ackbridge.aclient import AsyncConfirm, AsyncConnection, AsyncConsumer, AsyncDelivery, AsyncPublisher
from ackbridge.capabilities import Capabilities, Level, Support, Verb
from ackbridge.client import Confirm, Connection, Consumer, Delivery, Publisher
from ackbridge.connect import connect, connect_async
from ackbridge.errors import (
    AckbridgeError,
    AlreadySettledError,
    BrokerError,
    ConfigurationError,
    ConnectionLostError,
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
from ackbridge.messages import ConfirmOutcome, ConfirmStatus
from ackbridge.settlement import State

__version__ = "0.1.0"

__all__ = [
    "AckbridgeError", "AggregatedAcks", "AlreadySettledError", "AsyncConfirm", "AsyncConnection",
    "AsyncConsumer", "AsyncDelivery", "AsyncPublisher", "BrokerError", "Capabilities", "ConfigurationError",
    "Confirm", "ConfirmOutcome", "ConfirmStatus", "Connection", "ConnectionLostError", "Consumer",
    "Delivery", "InvalidLabelError", "InvalidOptionError", "InvalidURLError", "LabelAck", "Level",
    "PluginError", "Publisher", "SettlementError", "StaleDeliveryError", "State", "Support",
    "UnknownSchemeError", "UnsupportedVerbError", "Verb", "connect", "connect_async",
]
