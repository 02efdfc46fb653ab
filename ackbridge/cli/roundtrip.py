"""Publish N messages with confirms, consume and settle them, count what happened.

Used by ``ackbridge demo`` (until a plugin such as the Spark connector replaces
it) and by ``publish``/``consume``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from ackbridge.messages import ConfirmStatus
from ackbridge.sync.connection import Connection
from ackbridge.sync.consumer import Delivery


@dataclass
class Tally:
    """What a publish or consume run counted."""

    published: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    #: (status, the broker's reason) of every publish not confirmed.
    reasons: Counter[tuple[str, str]] = field(default_factory=Counter)
    received: int = 0
    settled: int = 0
    redelivered: int = 0
    seen: Counter[str] = field(default_factory=Counter)

    @property
    def confirmed(self) -> int:
        return self.outcomes[ConfirmStatus.CONFIRMED.value]

    @property
    def duplicates(self) -> int:
        return sum(n - 1 for n in self.seen.values() if n > 1)

    def lost(self, confirmed_ids: set[str]) -> int:
        return len(confirmed_ids - set(self.seen))

    def receive(self, delivery: Delivery) -> None:
        """Count *delivery* as received (by its id, else its body's start) and redelivered."""
        self.received += 1
        self.seen[delivery.message_id or delivery.body[:64].decode("utf-8", "replace")] += 1
        if delivery.redelivered:
            self.redelivered += 1


def settle_as(delivery: Delivery, mode: str) -> bool:
    """Settle *delivery* as the CLI's --mode says; True when it was settled ("none" leaves it)."""
    if mode == "ack":
        delivery.ack()
    elif mode == "requeue":
        delivery.requeue()
    elif mode == "reject":
        delivery.reject()
    return mode != "none"


def publish_many(conn: Connection, destination: str, count: int, size: int, window: int,
                 prefix: str, advance: Callable[[int], None], *, body: bytes | None = None,
                 message_id: str | None = None) -> tuple[Tally, set[str]]:
    """Publish *count* messages with confirms: *body* each time if given, else a generated body
    of *size* bytes starting with its id; ids ``prefix-i``, or *message_id* for a single one."""
    tally = Tally()
    publisher = conn.publisher(window=window)
    confirms = []
    filler = b"." * max(size - 24, 0)
    for i in range(count):
        this_id = message_id if message_id is not None else f"{prefix}-{i}"
        payload = body if body is not None else this_id.encode() + b"|" + filler
        confirms.append(publisher.publish(destination, payload, message_id=this_id))
        tally.published += 1
        advance(1)
    publisher.flush()
    confirmed_ids: set[str] = set()
    for confirm in confirms:
        outcome = confirm.result()
        tally.outcomes[outcome.status.value] += 1
        if not outcome.confirmed:
            tally.reasons[(outcome.status.value, outcome.reason)] += 1
        if outcome.confirmed and confirm.message_id is not None:
            confirmed_ids.add(confirm.message_id)
    return tally, confirmed_ids


def consume_many(conn: Connection, source: str, tally: Tally, *, expect: int, mode: str, prefetch: int,
                 idle_timeout: float, advance: Callable[[int], None], conflate_count: int = 1,
                 conflate_ms: float = 0.0) -> None:
    with conn.consume(source, prefetch=prefetch, conflate_count=conflate_count, conflate_ms=conflate_ms) as consumer:
        while tally.received < expect:
            delivery = consumer.get(timeout=idle_timeout)
            if delivery is None:
                break
            tally.receive(delivery)
            if settle_as(delivery, mode):
                tally.settled += 1
            advance(1)
