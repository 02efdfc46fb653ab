"""Interruptions are not failures: the one rule for a delivery whose work was stopped.

Python raises ``KeyboardInterrupt`` (Ctrl-C), ``SystemExit`` (``sys.exit``, a
SIGTERM handler that exits), ``GeneratorExit`` (a generator closed early) and
asyncio's ``CancelledError`` to stop work, not to say a message is bad. All of
them derive from ``BaseException`` and none from ``Exception``: that is the
line drawn here. ``delivery.process()`` and the handler runners dead-letter (or
requeue) on an ``Exception``; on anything else they hand the delivery back with
:func:`interrupted` and let the interruption go on.

Handed back means requeued where the broker requeues natively (it is
redelivered at once, to this or another consumer), else left unsettled: the
broker redelivers it when the subscription or connection ends. Never rejected,
never acked.
"""

from __future__ import annotations

import logging
from typing import Protocol

from ackbridge.capabilities import Capabilities, Level, Verb
from ackbridge.messages import WireVerb
from ackbridge.observability.logs import delivery_fields

log = logging.getLogger("ackbridge")


class HeldDelivery(Protocol):
    """What this rule reads of a delivery (both faces' deliveries have it)."""

    @property
    def settled(self) -> bool: ...
    @property
    def stale(self) -> bool: ...
    @property
    def source(self) -> str: ...
    @property
    def message_id(self) -> str | None: ...
    @property
    def broker(self) -> str: ...
    @property
    def generation(self) -> int: ...

#: The longest ``close()`` waits for a handler to finish the delivery it holds.
DRAIN_S = 30.0


def interrupted(capabilities: Capabilities, delivery: HeldDelivery) -> WireVerb | None:
    """What to do with *delivery* when its work was interrupted (call from the
    ``except BaseException`` after ``except Exception``): requeue where that is
    native, else None (leave it unsettled). Logs what was done."""
    if delivery.settled or delivery.stale:
        return None
    verb = WireVerb.REQUEUE if capabilities.support(Verb.REQUEUE).level is Level.NATIVE else None
    log.info("ackbridge: work on a message from %r (id %r) was interrupted; %s [broker %s, generation %d]",
             delivery.source, delivery.message_id,
             "requeued it" if verb is not None else "left it unsettled: the broker redelivers it",
             delivery.broker, delivery.generation,
             extra=delivery_fields(delivery.broker, delivery.source, delivery.generation))
    return verb
