"""Deliveries and confirms handed to the core once per reactor pass, not one by one.

Why: the container thread reads a socket's worth of frames (tens of transfers
or outcomes) and dispatches an event per frame; between two events it calls
into proton's C binding, which releases the GIL each time. Handed over one by
one, every delivery woke the consumer's thread (or the asyncio loop), which
took the GIL at the container's next C call, handled that one message and
slept again: the two threads passed the GIL back and forth several times per
message (measured with ``strace -c -f``: 3.7 futex calls per received message,
one loop wake-up per confirm on the asyncio face), and that kernel time was
most of the CPU the AMQP 1.0 plugin spent above raw proton.

:class:`BurstEvents` holds them until the reactor has dispatched every event
at hand (:meth:`BurstEvents.flush`, from the handler's ``on_reactor_quiesced``,
just before the container waits in ``select``): the other thread wakes once
for the burst. Nothing waits longer than that pass, and the order is kept:
deliveries in arrival order, confirms in outcome order, and every other event
(a generation's end, a reply, a failure) first hands over what is held, so it
never overtakes a delivery or a confirm reported before it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from ackbridge.errors import AckbridgeError
from ackbridge.messages import ConfirmOutcome, InboundMessage
from ackbridge.transport import TransportEvents


class BurstEvents:
    """The core's events as the transport reports them. Deliveries and confirms
    reported on the container thread (*thread_id* once it runs) are held until
    :meth:`flush`; from any other thread they go through at once (only confirms
    come from elsewhere: a publish refused on the publishing thread)."""

    __slots__ = ("_confirms", "_deliveries", "_events", "thread_id")

    def __init__(self, events: TransportEvents) -> None:
        self._events = events
        #: The container thread's ident (set by it when it starts); None before.
        self.thread_id: int | None = None
        self._deliveries: list[tuple[str, InboundMessage]] = []
        self._confirms: list[tuple[int, ConfirmOutcome]] = []

    def flush(self) -> None:
        """Hand over what is held (container thread): deliveries, then confirms."""
        deliveries, confirms = self._deliveries, self._confirms
        if deliveries:
            # Swapped out before handing over: an event the core reports back from
            # inside (e.g. an ack settled on this thread) never sees a half-sent list.
            self._deliveries = []
            deliver = self._events.deliver
            for subscription, message in deliveries:
                deliver(subscription, message)
        if confirms:
            self._confirms = []
            if len(confirms) == 1:
                self._events.confirm(*confirms[0])
            else:
                self._events.confirm_batch(confirms)

    def _here(self) -> bool:
        return threading.get_ident() == self.thread_id

    # ---- TransportEvents ----------------------------------------------------------
    def deliver(self, subscription: str, message: InboundMessage) -> None:
        # Only the container thread receives (receiving.py).
        self._deliveries.append((subscription, message))

    def confirm(self, seq: int, outcome: ConfirmOutcome) -> None:
        if self._here():
            self._confirms.append((seq, outcome))
        else:
            self._events.confirm(seq, outcome)

    def confirm_batch(self, outcomes: Sequence[tuple[int, ConfirmOutcome]]) -> None:
        if self._here():
            self._confirms.extend(outcomes)
        else:
            self._events.confirm_batch(outcomes)

    def generation_ended(self, generation: int, reason: str) -> None:
        if self._here():
            self.flush()
        self._events.generation_ended(generation, reason)

    def reply(self, message: InboundMessage) -> None:
        if self._here():
            self.flush()
        self._events.reply(message)

    def failed(self, error: AckbridgeError, subscription: str | None = None) -> None:
        if self._here():
            self.flush()
        self._events.failed(error, subscription)
