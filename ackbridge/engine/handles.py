"""Settling by ack handle: connection-free acks, where the broker has them.

On most brokers a delivery can be settled only on the connection (channel,
link, session) that received it: its tag means nothing elsewhere. A broker
whose plugin declares ``Capabilities.connection_free_acks`` (NATS JetStream:
each delivery's reply subject) lets *any* connection settle a delivery while
the broker still holds it pending. That allows one process to receive and
another to settle -- e.g. Spark executors fetch, and the driver acks what a
committed batch held (docs/spark.md).

The rules, written once for both faces:

* ``delivery.ack_handle`` is the delivery's handle as text (picklable,
  storable); asking for it raises :class:`~ackbridge.errors.UnsupportedVerbError`
  on a broker without the capability, where a handle would settle nothing.
* ``connection.settle_handles(handles, verb)`` checks the capability and the
  verb before anything is sent: ``ack``, and ``requeue`` where the broker
  requeues natively. ``reject`` is refused: dead-lettering needs the message
  (a copy is stored), and a handle carries none.
* A handle listed twice in one call is settled once (counted as refused).
  Nothing else is remembered between calls: the broker, not the connection,
  holds a handle's state, so a handle settled before, or one whose delivery
  the broker already redelivered, is the broker's to ignore or apply to the
  same message -- never to another one (the plugin guarantees that, or does
  not declare the capability).
* The receiving connection is not told: its consumer still counts such a
  delivery unsettled. Close it with ``close(leave_unsettled=True)`` so that it
  does not release (requeue) what another process is going to settle.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

from ackbridge.capabilities import Capabilities, Level, Verb
from ackbridge.errors import InvalidOptionError, SettlementError, UnsupportedVerbError
from ackbridge.kernel.settlement import BatchResult, Ledger, State
from ackbridge.messages import InboundMessage, WireSettle, WireVerb

__all__ = ["handle_of", "plan_settle", "release_untaken"]


def handle_of(capabilities: Capabilities, message: InboundMessage) -> str:
    """The ack handle of *message* (its wire tag as text); UnsupportedVerbError where
    the broker binds acks to the receiving connection."""
    capabilities.require_connection_free_acks()
    return str(message.wire_tag)


def plan_settle(capabilities: Capabilities, handles: Iterable[str], verb: WireVerb
                ) -> tuple[tuple[str, ...], BatchResult]:
    """Check a ``settle_handles`` call before anything is sent: the handles to put on
    the wire (each once, in the order given) and the result to report."""
    capabilities.require_connection_free_acks()
    if not isinstance(verb, WireVerb):
        raise InvalidOptionError(f"settle_handles() takes a WireVerb (ack or requeue), not {verb!r}")
    if verb is WireVerb.REJECT:
        raise UnsupportedVerbError(capabilities.broker, "reject by ack handle",
                                   "dead-lettering stores a copy of the message, and a handle carries none")
    if verb is WireVerb.REQUEUE and capabilities.support(Verb.REQUEUE).level is not Level.NATIVE:
        raise UnsupportedVerbError(capabilities.broker, "requeue by ack handle",
                                   capabilities.support(Verb.REQUEUE).how or "no native requeue")
    if isinstance(handles, str):
        raise InvalidOptionError("settle_handles() takes a list of handles, not one string")
    unique: dict[str, None] = {}
    given = 0
    for handle in handles:
        if not isinstance(handle, str) or not handle:
            raise InvalidOptionError("an ack handle is the non-empty text of delivery.ack_handle")
        unique[handle] = None
        given += 1
    return tuple(unique), BatchResult(settled=len(unique), refused=given - len(unique))


def release_untaken(ledger: Ledger, ready: deque[Any]) -> list[WireSettle]:
    """``close(leave_unsettled=True)``: what a consumer received but never handed out
    is requeued (no other process knows its handle); what the application took is left
    to the broker. Empties *ready*; stale deliveries are dropped (the broker redelivers)."""
    ops: list[WireSettle] = []
    while ready:
        record = ready.popleft()._record
        if record.stale or record.state is not State.PENDING:
            continue
        try:
            ops.extend(ledger.settle(record, WireVerb.REQUEUE))
        except SettlementError:
            continue  # went stale meanwhile: nothing to send
    return ops + ledger.flush()
