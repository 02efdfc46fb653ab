"""Leases for slow work: ``delivery.extend()``, and a lapsed lease reported, never hidden.

Most brokers give a delivery a deadline: JetStream redelivers it after the
consumer's ``ack_wait``, the embedded broker after its owner's ``lease_timeout``
without a heartbeat, RabbitMQ closes the whole channel after ``consumer_timeout``.
Work slower than that deadline gets its message delivered twice.

* ``delivery.extend()`` (both faces) tells the broker the work is still going,
  where it can be told: JetStream ``+WPI`` (ack_wait starts again), the
  embedded broker's lease (the owner's heartbeat, now). It returns the seconds
  the broker now waits, where known. It is checked like a settlement first: a
  settled delivery raises AlreadySettledError, a stale one StaleDeliveryError,
  and a broker whose plugin declares no ``Capabilities.lease_extension`` raises
  UnsupportedVerbError whose text says what deadline that broker keeps
  (RabbitMQ: consumer_timeout, which nothing resets). Nothing is sent then.
* A lease that lapsed anyway is reported: a redelivered message whose
  ``broker_id`` names a delivery this consumer still holds undecided is the
  broker's deadline passing (logged as a warning, counted in
  ``ackbridge.leases_lapsed``); it is still handed out, as the broker delivered it.
"""

from __future__ import annotations

import logging

from ackbridge.capabilities import Capabilities
from ackbridge.errors import UnsupportedVerbError
from ackbridge.kernel.settlement import Ledger, Record
from ackbridge.messages import InboundMessage
from ackbridge.observability.logs import delivery_fields

log = logging.getLogger("ackbridge")

__all__ = ["check_extend", "extended", "lapsed"]


def check_extend(capabilities: Capabilities, ledger: Ledger, record: Record) -> None:
    """Raise if *record*'s lease cannot be extended (unsupported, settled, stale); nothing is changed."""
    found = capabilities.lease_extension
    if not found.available:
        raise UnsupportedVerbError(capabilities.broker, "extend lease", found.how)
    ledger.check(record)


def extended(ledger: Ledger, source: str) -> None:
    """Count one lease extended."""
    observer = ledger.observer
    if observer is not None:
        observer.connection.lease(source, lapsed=False)


def lapsed(ledger: Ledger, message: InboundMessage, broker: str) -> bool:
    """True (logged and counted) when *message* is the broker delivering again a message
    whose earlier delivery this consumer still holds undecided: its lease lapsed."""
    if message.broker_id is None:
        return False
    held = ledger.held(message.broker_id)
    if held is None or held.message.generation != message.generation:
        return False  # another generation's delivery: released with it, not a deadline passing
    log.warning("ackbridge: %s delivered a message from %r (id %r) again while an earlier delivery of it was held "
                "unsettled: its ack deadline passed (delivery count %s); the work on it may run twice. Call "
                "delivery.extend() during slow work, or raise the broker's deadline [broker %s, generation %d]",
                broker, message.source, message.message_id, message.delivery_count, broker, message.generation,
                extra=delivery_fields(broker, message.source, message.generation))
    observer = ledger.observer
    if observer is not None:
        observer.connection.lease(message.source, lapsed=True)
    return True
