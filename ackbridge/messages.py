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

    ``broker_id`` names the message as the broker stores it, the same in every
    delivery of it (JetStream: stream and stream sequence), where the broker
    tells; a copy stored separately (a retransmitted publish) has another. A
    transport whose broker can deliver a message again while an earlier delivery
    of it is unsettled on the same generation (an ack deadline) must set it:
    ``dedupe_window`` acks a copy only when it is stored apart from every
    delivery the application holds.
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
    broker_id: Hashable | None = None


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


# The per-message paths read these module constants, never ``WireVerb.ACK``: on Python 3.11
# every read of an enum member goes through ``EnumType.__getattr__``'s slot hook, about 0.4 us
# (16x a global; ~900 instructions, benchmarks/instructions.py).
ACK, REQUEUE, REJECT = WireVerb.ACK, WireVerb.REQUEUE, WireVerb.REJECT


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
    """The three outcomes of a publish."""

    CONFIRMED = "confirmed"
    REFUSED = "refused"
    UNKNOWN = "unknown"


#: Read per confirm (see ACK above for why not ``ConfirmStatus.CONFIRMED``).
STATUS_CONFIRMED, STATUS_UNKNOWN = ConfirmStatus.CONFIRMED, ConfirmStatus.UNKNOWN


@dataclass(frozen=True, slots=True, repr=False)
class ConfirmOutcome:
    """The broker's answer to one publish: confirmed, refused (why) or unknown (why).

    >>> ConfirmOutcome(ConfirmStatus.CONFIRMED)
    ConfirmOutcome(status=confirmed)
    >>> ConfirmOutcome(ConfirmStatus.REFUSED, "unroutable")
    ConfirmOutcome(status=refused, reason='unroutable')
    """

    status: ConfirmStatus
    reason: str = ""
    #: How many times the message was sent: 0 when it never left the client (an
    #: outage), above 1 only with ``retransmit=True``.
    attempts: int = 1

    @property
    def confirmed(self) -> bool:
        """True when the broker took responsibility for the message."""
        return self.status is STATUS_CONFIRMED

    def __repr__(self) -> str:
        reason = f", reason={self.reason!r}" if self.reason else ""
        attempts = f", attempts={self.attempts}" if self.attempts != 1 else ""
        return f"ConfirmOutcome(status={self.status.value}{reason}{attempts})"


CONFIRMED = ConfirmOutcome(ConfirmStatus.CONFIRMED)


def refused(reason: str) -> ConfirmOutcome:
    return ConfirmOutcome(ConfirmStatus.REFUSED, reason)


def unknown(reason: str) -> ConfirmOutcome:
    return ConfirmOutcome(ConfirmStatus.UNKNOWN, reason)


def unsent(reason: str) -> ConfirmOutcome:
    """Unknown, and nothing went on the wire (the connection was down or going):
    ``attempts`` 0, so a retransmitting publisher does not count it as an attempt
    (an outage does not use up ``max_attempts``; ``retransmit_deadline`` bounds it)."""
    return ConfirmOutcome(ConfirmStatus.UNKNOWN, reason, attempts=0)


@dataclass(frozen=True)
class QueueInfo:
    """What the broker tells about a queue (``inspect_queue``); None where it does not say."""

    name: str
    #: Messages ready for delivery (not handed to a consumer), where the broker tells.
    messages: int | None = None
    #: Messages handed to consumers and not settled yet, where the broker tells.
    unacked: int | None = None
    #: Consumers attached, where the broker tells.
    consumers: int | None = None
    #: The dead-letter companion's name, when the queue has one.
    dead_letter: str | None = None
    #: Messages held by the dead-letter companion, where the broker tells.
    dead_lettered: int | None = None
