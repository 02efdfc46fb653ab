"""Guaranteed publishing, duplicate detection and loss detection: the I/O-free rules.

Written once for both faces (:mod:`ackbridge.sync.publisher`,
:mod:`ackbridge.aio.publisher` and the consumers), in the spirit of Solace's
guaranteed messaging (seed 003):

* **retransmission** (``publisher(retransmit=True)``): a publish whose outcome
  is unknown (no answer within ``confirm_timeout``, the connection lost, or
  not sent during an outage) is sent again with the same message id, in
  order, after a back-off, until ``max_attempts`` or ``retransmit_deadline``;
  its confirm resolves once, with the final outcome and the attempts made.
  A refused publish is never sent again.
* **duplicate detection** (``consume(dedupe_window=N)``): a delivery whose
  message id was acked within the last *N* settled ids, or is handed out and
  unsettled in a copy the broker stores apart (another ``broker_id``), is acked
  and not handed to the application (counted in ``duplicates_dropped``); the
  broker delivering the held message itself again is handed out
  (:class:`DedupeWindow` says why).
* **loss detection**: a publisher made with ``sequence=True`` stamps each
  message with its producer id and a per-producer sequence number; a consumer
  made with ``on_gap=`` reports the numbers it never saw.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import uuid
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ackbridge.errors import DataLossError, InvalidOptionError
from ackbridge.messages import ConfirmOutcome, ConfirmStatus, InboundMessage, OutboundMessage

log = logging.getLogger("ackbridge")

PRODUCER_HEADER = "ackbridge-producer"
SEQUENCE_HEADER = "ackbridge-seq"


# ---- publishing ------------------------------------------------------------------------
@dataclass(frozen=True)
class Guarantee:
    """What a publisher promises beyond a plain publish."""

    retransmit: bool = False
    max_attempts: int = 5
    #: Seconds from the first send after which no attempt is made any more.
    deadline: float = 120.0
    #: Stamp producer id + sequence number on every message (loss detection).
    sequence: bool = False
    producer: str = ""

    @property
    def active(self) -> bool:
        return self.retransmit or self.sequence


def plan_guarantee(*, retransmit: bool, max_attempts: int, retransmit_deadline: float, sequence: bool,
                   producer_id: str | None) -> Guarantee:
    if max_attempts < 1:
        raise InvalidOptionError(f"max_attempts must be >= 1, not {max_attempts}")
    if retransmit_deadline <= 0:
        raise InvalidOptionError(f"retransmit_deadline must be > 0, not {retransmit_deadline}")
    producer = producer_id if producer_id is not None else uuid.uuid4().hex[:16]
    return Guarantee(bool(retransmit), max_attempts, float(retransmit_deadline), bool(sequence), producer)


class Attempts:
    """One guaranteed publish: what to send again and how often it went."""

    __slots__ = ("attempts", "destination", "give_up_at", "message")

    def __init__(self, destination: str, message: OutboundMessage, give_up_at: float) -> None:
        self.destination = destination
        self.message = message
        #: Sends that went on the wire and have their outcome (see :func:`decide`).
        self.attempts = 0
        self.give_up_at = give_up_at


def stamp(guarantee: Guarantee, number: int, message: OutboundMessage) -> OutboundMessage:
    """*message* with a message id (retransmission needs one) and, with ``sequence``,
    the producer id and its sequence *number* in its headers."""
    headers: Mapping[str, Any] = message.headers
    if guarantee.sequence:
        headers = {**headers, PRODUCER_HEADER: guarantee.producer, SEQUENCE_HEADER: number}
    message_id = message.message_id
    if message_id is None and guarantee.retransmit:
        message_id = f"{guarantee.producer}-{number}"
    return dataclasses.replace(message, headers=headers, message_id=message_id)


def decide(attempts: Attempts, outcome: ConfirmOutcome, now: float, max_attempts: int) -> ConfirmOutcome | None:
    """The final outcome of a guaranteed publish, or None: send it again.

    *outcome* answers one send; it counts as an attempt unless nothing went on the
    wire (``attempts`` 0, :func:`~ackbridge.messages.unsent`): during an outage a
    publish waits for the connection, bounded by the deadline, not by ``max_attempts``."""
    if outcome.attempts:
        attempts.attempts += 1
    if outcome.status is not ConfirmStatus.UNKNOWN:
        return dataclasses.replace(outcome, attempts=attempts.attempts)
    if attempts.attempts >= max_attempts:
        why = f"{outcome.reason} (gave up after {attempts.attempts} attempts)"
    elif now >= attempts.give_up_at:
        why = f"{outcome.reason} (retransmit_deadline passed after {attempts.attempts} attempts)"
    else:
        return None
    return dataclasses.replace(outcome, reason=why, attempts=attempts.attempts)


# ---- consuming -------------------------------------------------------------------------
class DedupeWindow:
    """The message ids acked most recently (at most *size*), and the deliveries handed
    out and not settled yet, to drop another copy of a message (a retransmitted
    publish, a lost ack) by acking it.

    The rule: a copy is acked only when the broker does not need that ack to hold
    what the application still has to settle. A copy of an id acked within the
    window is safe to ack (the application settled the message). A copy of an id
    handed out and unsettled is safe to ack only when the broker stores it apart
    from every unsettled delivery of the id: its ``broker_id`` differs from theirs,
    or is None (the transport's promise that its broker never delivers a message
    again while a delivery of it is unsettled on the same generation). The same
    ``broker_id`` is the broker delivering the held message again (JetStream after
    ``ack_wait``): acking it would settle that message behind the application's
    back, and a later requeue() would find nothing. It is handed out instead, as
    the redelivery it is (``redelivered``/``delivery_count`` say so; counted in
    ``redelivered_while_held``): at most one per ack deadline that passes while
    the application holds an earlier delivery. A delivery is weighed only against
    those held on its own generation: on a newer one it is the message again (the
    held ones' generation ended, whether or not the consumer has heard so yet)."""

    __slots__ = ("_ids", "_inflight", "dropped", "redelivered_while_held", "size", "source")

    def __init__(self, size: int, source: str = "") -> None:
        if size < 1:
            raise InvalidOptionError(f"dedupe_window must be >= 1, not {size}")
        self.size = size
        self.source = source
        self._ids: collections.OrderedDict[str, None] = collections.OrderedDict()
        #: Per message id, (generation, broker id) of its deliveries handed out and not settled.
        self._inflight: dict[str, list[tuple[int, Hashable | None]]] = {}
        self.dropped = 0
        #: Deliveries of a message the application held unsettled, handed out (not acked).
        self.redelivered_while_held = 0

    def seen(self, message: InboundMessage) -> bool:
        """True (and counted) when *message* is a copy to ack: of one acked within the
        window, or stored apart from the unsettled deliveries of its id; otherwise it
        is noted as handed out."""
        message_id = message.message_id
        if message_id is None:
            return False
        if message_id in self._ids:
            self.dropped += 1
            return True
        held = self._inflight.get(message_id)
        generation, broker_id = message.generation, message.broker_id
        if held is None:
            self._inflight[message_id] = [(generation, broker_id)]
            return False
        if all(held_generation != generation for held_generation, _ in held):
            # Every delivery of it the application holds is of an ended generation, though
            # the loss may not have reached the consumer yet (a transport can redeliver as
            # soon as it is back): the broker gives the message again, not a copy. Acking
            # it would settle the only stored message while its earlier delivery is stale.
            held.append((generation, broker_id))
            return False
        if broker_id is None or all(held_id != broker_id for _, held_id in held):
            self.dropped += 1
            return True
        held.append((generation, broker_id))
        self.redelivered_while_held += 1
        if self.redelivered_while_held == 1:
            log.warning("ackbridge: %r delivered message %r again while the application holds an earlier "
                        "delivery of it unsettled (an ack deadline shorter than the handler?): handed out as a "
                        "redelivery, not acked as a duplicate (logged once per consumer)", self.source, message_id)
        return False

    def settled(self, message_id: str | None, acked: bool = True, broker_id: Hashable | None = None,
                generation: int | None = None) -> None:
        """One handed-out delivery of *message_id* (stored as *broker_id*, delivered on
        *generation*; None: any) was settled."""
        if message_id is None:
            return
        held = self._inflight.get(message_id)
        if held is not None:
            for i, (held_generation, held_id) in enumerate(held):
                if held_id == broker_id and generation in (None, held_generation):
                    del held[i]
                    break
            else:
                held.pop()
            if not held:
                del self._inflight[message_id]
        if not acked:
            return
        ids = self._ids
        ids[message_id] = None
        ids.move_to_end(message_id)
        if len(ids) > self.size:
            ids.popitem(last=False)

    def unacked(self, message_id: str | None) -> None:
        """An ack of *message_id* was refused before it was sent (stale): the broker
        redelivers it, and that delivery is the message, not a copy."""
        if message_id is not None:
            self._ids.pop(message_id, None)

    def generation_ended(self) -> None:
        """Deliveries of the ended generation will come again: they are not copies."""
        self._inflight.clear()


def sequence_of(headers: Mapping[str, Any] | None) -> tuple[str, int] | None:
    """(producer id, sequence number) of a message stamped by ``publisher(sequence=True)``;
    None for a message without (or with an unreadable) stamp."""
    producer = headers.get(PRODUCER_HEADER) if headers else None
    if producer is None:
        return None
    try:
        return str(producer), int(headers[SEQUENCE_HEADER])  # type: ignore[index]
    except (KeyError, TypeError, ValueError):
        return None


GapHandler = Callable[[str, tuple[int, ...]], None]


class GapDetector:
    """Per producer, the highest sequence number seen; a jump reports the numbers
    skipped (messages published but never delivered to this consumer)."""

    __slots__ = ("_highest", "missing", "on_gap", "source")

    def __init__(self, on_gap: str | GapHandler, source: str) -> None:
        if not (callable(on_gap) or on_gap in ("warn", "raise")):
            raise InvalidOptionError(f"on_gap must be 'warn', 'raise' or a callable, not {on_gap!r}")
        self.on_gap = on_gap
        self.source = source
        self._highest: dict[str, int] = {}
        #: Every number reported missing so far, per producer.
        self.missing: dict[str, list[int]] = {}

    @property
    def gaps(self) -> int:
        """How many messages were reported missing."""
        return sum(len(v) for v in self.missing.values())

    def check(self, message: InboundMessage) -> None:
        """Note *message*'s number; report a gap (log, callback, or DataLossError)."""
        stamp = sequence_of(message.headers)
        if stamp is None:
            return
        producer, number = stamp
        highest = self._highest.get(producer)
        if highest is None:
            highest = 0  # numbers start at 1: a first message numbered 5 means 1-4 never came
        if number <= highest:
            return  # a redelivery or a retransmitted copy
        self._highest[producer] = number
        if number == highest + 1:
            return
        skipped = tuple(range(highest + 1, number))
        self.missing.setdefault(producer, []).extend(skipped)
        shown = f"{skipped[0]}..{skipped[-1]}" if len(skipped) > 1 else str(skipped[0])
        text = (f"data loss on {self.source!r}: {len(skipped)} message(s) of producer {producer} never arrived "
                f"(sequence numbers {shown})")
        log.warning("ackbridge: %s", text)
        if self.on_gap == "raise":
            raise DataLossError(text, producer, skipped)
        if callable(self.on_gap):
            self.on_gap(producer, skipped)


class ConsumerGuard:
    """A consumer's duplicate and gap screening (``dedupe_window``, ``on_gap``)."""

    __slots__ = ("dedupe", "gaps")

    def __init__(self, dedupe_window: int | None, on_gap: str | GapHandler | None, source: str) -> None:
        self.dedupe = DedupeWindow(dedupe_window, source) if dedupe_window is not None else None
        self.gaps = GapDetector(on_gap, source) if on_gap is not None else None

    def screen(self, message: InboundMessage) -> tuple[bool, DataLossError | None]:
        """(hand it out?, the error to raise from get()). A duplicate is not handed
        out (the caller acks it); with ``on_gap="raise"`` a gap stops the consumer."""
        if self.dedupe is not None and self.dedupe.seen(message):
            return False, None
        if self.gaps is not None:
            try:
                self.gaps.check(message)
            except DataLossError as exc:
                return False, exc
        return True, None

    def acked(self, messages: Iterable[InboundMessage], acked: bool = True) -> None:
        if self.dedupe is not None:
            for message in messages:
                self.dedupe.settled(message.message_id, acked, message.broker_id, message.generation)

    def unacked(self, message: InboundMessage) -> None:
        if self.dedupe is not None:
            self.dedupe.unacked(message.message_id)

    def generation_ended(self) -> None:
        if self.dedupe is not None:
            self.dedupe.generation_ended()
