"""Graceful drain: the one rule for stopping a consumer with work in flight.

``consumer.drain(timeout)`` (both faces) is what a service calls on SIGTERM:

1. nothing more is handed out: ``get()`` returns None, iteration ends, a
   handler consumer's runner stops after the delivery it holds;
2. what was received and never handed out (the prefetched deliveries) is
   *withheld*: it stays unsettled, so the broker takes it back with the
   subscription -- never acked, never rejected;
3. the deliveries in flight (handed out, not settled yet) get until the
   deadline to be settled by whoever holds them (the handler, or the thread
   that took them);
4. then the consumer closes: decided acks are flushed, the subscription is
   cancelled, and whatever is still unsettled -- withheld or abandoned at the
   deadline -- goes back to the broker for redelivery.

Nothing here dead-letters: a handler that *raises* during the drain is a
failure like any other (its delivery is rejected as always); one that does not
finish in time is an interruption (its delivery is handed back unsettled, see
:mod:`ackbridge.kernel.interruptions`).

Why withheld deliveries are not requeued one by one (``basic.nack``, ``-NAK``):
a requeue frees the subscription's prefetch window, and the broker at once
sends more into a consumer that hands nothing out -- each bounce marks them
redelivered (and counts a delivery where the broker counts them). Left
unsettled, they are returned once, when the subscription ends. What each broker
then does to a returned message's delivery count is in docs/running-in-production.md.

Must not be called from the thread that settles the in-flight deliveries (it
would wait for itself until the deadline): a handler consumer's main thread, a
signal handler that starts the drain on a thread of its own, or an asyncio task
are the places for it.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from ackbridge.kernel.settlement import DrainResult, Ledger, Record, State
from ackbridge.observability.logs import delivery_fields

log = logging.getLogger("ackbridge")

__all__ = ["Drain", "DrainResult"]



class Drain:
    """One drain under way: the deliveries withheld, the deadline, what is in flight.

    Made by the face with its lock held (sync) or on the loop (async); it takes
    every buffered delivery out of *ready*."""

    def __init__(self, ledger: Ledger, ready: deque[Any], timeout: float, source: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._ledger = ledger
        self._clock = clock
        self.withheld: list[Record] = [delivery._record for delivery in ready]
        ready.clear()
        self.deadline = clock() + max(0.0, timeout)
        self.in_flight_at_start = self.in_flight()
        log.info("ackbridge: draining %r: nothing more is handed out; %d delivery(ies) in flight get %.1f s, %d "
                 "prefetched go back to the broker unsettled", source, self.in_flight_at_start, timeout,
                 len(self.withheld), extra={"ackbridge_destination": source})

    def left(self) -> float:
        """Seconds until the deadline (0 once it passed)."""
        return max(0.0, self.deadline - self._clock())

    def in_flight(self) -> int:
        """Deliveries handed out and still undecided (withheld ones are not handed out)."""
        withheld = sum(1 for r in self.withheld if r.state is State.PENDING and not r.stale)
        return max(0, self._ledger.pending - withheld)

    def result(self) -> DrainResult:
        """The outcome, read at the deadline or once nothing is in flight (before the ledger closes)."""
        abandoned = self.in_flight()
        handed_back = sum(1 for r in self.withheld if r.state is State.PENDING)
        return DrainResult(handed_back=handed_back, finished=max(0, self.in_flight_at_start - abandoned),
                           abandoned=abandoned)


def report(ledger: Ledger, source: str, broker: str, generation: int, result: DrainResult) -> None:
    """Log the drain's outcome and count it (``ackbridge.drained`` by outcome)."""
    fields = delivery_fields(broker, source, generation)
    if result.abandoned:
        log.warning("ackbridge: drain of %r reached its deadline with %d delivery(ies) unsettled: they return to "
                    "the broker for redelivery (not acked, not dead-lettered); %d finished, %d prefetched handed "
                    "back [broker %s]", source, result.abandoned, result.finished, result.handed_back, broker,
                    extra=fields)
    else:
        log.info("ackbridge: drained %r: %d in-flight delivery(ies) finished, %d prefetched handed back to the "
                 "broker unsettled [broker %s]", source, result.finished, result.handed_back, broker, extra=fields)
    observer = ledger.observer
    if observer is not None:
        observer.connection.drained(source, result.finished, result.handed_back, result.abandoned)
