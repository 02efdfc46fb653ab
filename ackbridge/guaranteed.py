"""Guaranteed publishing, duplicate detection and loss detection: the I/O-free rules.

Written once for both faces (:mod:`ackbridge.sync_publisher`,
:mod:`ackbridge.async_publisher` and the consumers), in the spirit of Solace's
guaranteed messaging (seed 003):

* **retransmission** (``publisher(retransmit=True)``): a publish whose outcome
  is unknown (no answer within ``confirm_timeout``, the connection lost, or
  not sent during an outage) is sent again with the same message id, in
  order, after a back-off, until ``max_attempts`` or ``retransmit_deadline``;
  its confirm resolves once, with the final outcome and the attempts made.
  A refused publish is never sent again.
* **duplicate detection** (``consume(dedupe_window=N)``): a delivery whose
  message id was acked within the last *N* settled ids is acked and not handed
  to the application (counted in ``duplicates_dropped``).
* **loss detection**: a publisher made with ``sequence=True`` stamps each
  message with its producer id and a per-producer sequence number; a consumer
  made with ``on_gap=`` reports the numbers it never saw.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
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
    """The message ids acked most recently (at most *size*), and those handed out
    and not settled yet, to drop another copy of a message (a retransmitted
    publish, a lost ack). Acking a copy while the original is unsettled is safe:
    the broker still holds the original and redelivers it unless it is acked."""

    __slots__ = ("_ids", "_inflight", "dropped", "size")

    def __init__(self, size: int) -> None:
        if size < 1:
            raise InvalidOptionError(f"dedupe_window must be >= 1, not {size}")
        self.size = size
        self._ids: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._inflight: dict[str, int] = {}
        self.dropped = 0

    def seen(self, message: InboundMessage) -> bool:
        """True (and counted) when *message* is a copy of one acked within the window
        or handed out and unsettled; otherwise it is noted as handed out."""
        message_id = message.message_id
        if message_id is None:
            return False
        if message_id in self._ids or message_id in self._inflight:
            self.dropped += 1
            return True
        self._inflight[message_id] = 1
        return False

    def settled(self, message_id: str | None, acked: bool = True) -> None:
        if message_id is None:
            return
        self._inflight.pop(message_id, None)
        if not acked:
            return
        ids = self._ids
        ids[message_id] = None
        ids.move_to_end(message_id)
        if len(ids) > self.size:
            ids.popitem(last=False)

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
        self.dedupe = DedupeWindow(dedupe_window) if dedupe_window is not None else None
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
                self.dedupe.settled(message.message_id, acked)

    def generation_ended(self) -> None:
        if self.dedupe is not None:
            self.dedupe.generation_ended()
