"""Spotting a requeue loop: one consumer requeueing messages that were delivered before.

A message requeued on every delivery (a poison message under
``process(requeue=True)``) comes straight back: nothing in AMQP 0-9-1, MQTT,
AMQP 1.0 or JetStream slows it down, so it loops as fast as the broker can
redeliver (10,209 deliveries in 8 s on a RabbitMQ classic queue). ackbridge
does not bound it by default (a requeue puts the message back; changing that
would change the verb): it warns instead, naming the bound the broker offers
(``Capabilities.requeue_bound``: ``max_deliveries``, ``requeue_delay``...).

Only requeues of deliveries that were redelivered already count: handing back a
first delivery is ordinary work-sharing, not a loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from ackbridge.messages import InboundMessage

log = logging.getLogger("ackbridge")

#: Requeues of already-redelivered messages before the first warning.
EVERY = 100
#: Seconds between two warnings of one consumer (the loop may run for hours).
QUIET_S = 60.0


def is_redelivery(message: InboundMessage) -> bool:
    """True when *message* was delivered before (the redelivered flag or a count above 1)."""
    count = message.delivery_count
    return message.redelivered or (count is not None and count > 1)


class RequeueWatch:
    """Counts one consumer's requeues of redelivered messages and says when to warn:
    at the :data:`EVERY`-th, then at most once per :data:`QUIET_S` seconds while
    another :data:`EVERY` have piled up. Called under the consumer's lock (sync) or
    on its loop (async)."""

    __slots__ = ("_clock", "_count", "_highest", "_warned_at")

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._count = 0
        self._highest: int | None = None
        self._warned_at: float | None = None

    def requeued(self, message: InboundMessage) -> tuple[int, int | None] | None:
        """Note a requeue of *message*; (requeues counted, highest delivery count seen)
        when it is time to warn, else None."""
        if not is_redelivery(message):
            return None
        self._count += 1
        count = message.delivery_count
        if count is not None and (self._highest is None or count > self._highest):
            self._highest = count
        if self._count < EVERY:
            return None
        now = self._clock()
        if self._warned_at is not None and now - self._warned_at < QUIET_S:
            return None
        found = self._count, self._highest
        self._count, self._highest, self._warned_at = 0, None, now
        return found


def warn_loop(source: str, broker: str, requeues: int, highest: int | None, bound: str) -> None:
    """Log the requeue-loop warning on the ``ackbridge`` logger."""
    most = f"; a message was delivered {highest} times" if highest is not None else ""
    log.warning("ackbridge: a consumer of %r requeued %d messages that had been delivered before%s: a requeue "
                "loop is not bounded by default and redelivers as fast as the broker can. To bound it: %s "
                "[broker %s]", source, requeues, most, bound, broker)
