"""Which id the inbox records for a delivery.

The message id the publisher set comes first: it is the one id every copy of a
message carries -- a retransmitted publish the broker stored twice, an outbox
row the relay sent again after a crash -- and so the one that catches them.

Without one, a broker that names what it stores gives a stable id instead:
JetStream's (stream, stream sequence), the same in every delivery of the
stored message. It catches redeliveries of that stored message (a consumer
killed after its commit, before its ack) but not a copy stored apart, which
has another sequence. Without either the delivery is refused
(:class:`~ackbridge.errors.MissingMessageIdError`): recording nothing would
turn exactly-once effects into at-least-once without a word.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from ackbridge.errors import MissingMessageIdError

#: The prefix of an inbox id made from the broker's own id, so it never meets a publisher's id.
BROKER_PREFIX = "broker:"


def broker_key(broker_id: Hashable) -> str:
    """The inbox id of a message the broker names *broker_id* (a tuple such as JetStream's
    (stream, sequence) is written with ``/`` between its parts)."""
    parts = broker_id if isinstance(broker_id, tuple) else (broker_id,)
    return BROKER_PREFIX + "/".join(str(part) for part in parts)


def inbox_key(delivery: Any) -> str:
    """The id the inbox records for *delivery* (either face): its message id, else the
    broker's stable id; MissingMessageIdError when it has neither."""
    message_id = delivery.message_id
    if message_id:
        return str(message_id)
    broker_id = delivery.broker_id
    if broker_id is not None:
        return broker_key(broker_id)
    raise MissingMessageIdError(delivery.source, delivery.broker)
