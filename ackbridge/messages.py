"""Plain data that crosses the line between the core and a transport.

The per-message types (inbound, outbound, wire settle) are treated as
read-only but are not ``frozen``: a frozen dataclass sets every field through
``object.__setattr__``, which costs ~3 us per message on the hot path (a tenth
of the whole per-message budget against a raw client). Nothing mutates them.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class InboundMessage:
    """A message as a transport received it, before the core wraps it.

    ``wire_tag`` is whatever the transport needs to settle it later (an AMQP
    delivery tag, an MQTT packet id, a proton delivery); ``generation`` names
    the connection/channel it arrived on.
    """

    wire_tag: Hashable
    generation: int
    body: bytes
    source: str
    headers: Mapping[str, Any] = field(default_factory=dict)
    routing_key: str | None = None
    message_id: str | None = None
    correlation_id: str | None = None
    reply_to: str | None = None
    content_type: str | None = None
    timestamp: float | None = None
    redelivered: bool = False
    delivery_count: int | None = None


@dataclass(slots=True)
class OutboundMessage:
    """A message to publish. ``persistent`` asks the broker to store it durably."""

    body: bytes
    headers: Mapping[str, Any] = field(default_factory=dict)
    message_id: str | None = None
    correlation_id: str | None = None
    reply_to: str | None = None
    content_type: str | None = None
    timestamp: float | None = None
    persistent: bool = True


class WireVerb(enum.StrEnum):
    ACK = "ack"
    REQUEUE = "requeue"
    REJECT = "reject"


@dataclass(slots=True)
class WireSettle:
    """One settlement the transport must put on the wire.

    ``multiple`` (only ever with ACK, and only when the adapter declares a
    native cumulative ack) settles every outstanding delivery of the same
    subscription up to and including ``wire_tag``. ``message`` is the original
    delivery, for transports that emulate requeue/reject by republishing.
    """

    verb: WireVerb
    wire_tag: Hashable
    generation: int
    subscription: str
    multiple: bool = False
    message: InboundMessage | None = None


class ConfirmStatus(enum.StrEnum):
    CONFIRMED = "confirmed"
    REFUSED = "refused"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class ConfirmOutcome:
    """The broker's answer to one publish: confirmed, refused (why) or unknown (why)."""

    status: ConfirmStatus
    reason: str = ""

    @property
    def confirmed(self) -> bool:
        return self.status is ConfirmStatus.CONFIRMED


CONFIRMED = ConfirmOutcome(ConfirmStatus.CONFIRMED)


def refused(reason: str) -> ConfirmOutcome:
    return ConfirmOutcome(ConfirmStatus.REFUSED, reason)


def unknown(reason: str) -> ConfirmOutcome:
    return ConfirmOutcome(ConfirmStatus.UNKNOWN, reason)
