"""The settlement state machine: the one place that decides what may be settled.

A :class:`Ledger` belongs to one subscription. It admits deliveries in receive
order, refuses double and stale settlements before anything is sent, and turns
the application's decisions into :class:`~ackbridge.messages.WireSettle` ops:
immediately, or conflated (flushed every ``conflate_count`` acks or
``conflate_ms`` milliseconds, whichever comes first, and on close), using a
cumulative ``multiple`` ack where the broker has one, and releasing ops only
in receive order where the broker demands it (MQTT).

The ledger does no I/O and takes no locks: the sync consumer serialises calls
with a lock, the async consumer runs them on its event loop.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ackbridge.capabilities import Capabilities, Level, Verb
from ackbridge.errors import AlreadySettledError
from ackbridge.kernel.generations import closed_error, stale_error
from ackbridge.messages import ACK, InboundMessage, WireSettle, WireVerb

if TYPE_CHECKING:
    from ackbridge.observability.metrics import SubscriptionObserver


#: The longest a conflation timer sleeps between looks at its ledger.
_TIMER_POLL_S = 0.05


class State(enum.StrEnum):
    PENDING = "pending"
    ACKED = "acked"
    REQUEUED = "requeued"
    REJECTED = "rejected"


#: Read per message (messages.ACK says why not ``State.PENDING``).
PENDING = State.PENDING
_VERB_STATE = {WireVerb.ACK: State.ACKED, WireVerb.REQUEUE: State.REQUEUED, WireVerb.REJECT: State.REJECTED}
_STATE_VERB = {state: verb for verb, state in _VERB_STATE.items()}


@dataclass(frozen=True, slots=True)
class Admission:
    """What to do with a message the transport delivered."""

    #: Hand this delivery to the application (None: do not).
    record: Record | None
    #: Put these on the wire now (a poison message dead-lettered by policy).
    reject: list[WireSettle]
    #: The message opened a newer generation: drop older buffered deliveries.
    new_generation: bool


@dataclass(slots=True, eq=False)
class Record:
    """One delivery's settlement state, as the ledger sees it."""

    message: InboundMessage
    seq: int
    state: State = State.PENDING
    stale: bool = False
    #: Monotonic arrival time, noted only while metrics or traces are recorded.
    received_at: float = 0.0


class Ledger:
    def __init__(
        self,
        subscription: str,
        capabilities: Capabilities,
        *,
        conflate_count: int = 1,
        conflate_ms: float = 0.0,
        max_deliveries: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        observer: SubscriptionObserver | None = None,
    ) -> None:
        self.subscription = subscription
        #: Records receipts and settlements (None: metrics and traces are off).
        self.observer = observer
        self._capabilities = capabilities
        self._ordered = capabilities.ordered_acks
        self._multiple = capabilities.support(Verb.CUMULATIVE_ACK).level is Level.NATIVE
        self._conflate_count = conflate_count
        self._conflate_s = conflate_ms / 1000.0
        self._conflating = conflate_count > 1 or conflate_ms > 0
        self._clock = clock
        self._max_deliveries = max_deliveries
        #: Poison messages this ledger dead-lettered instead of handing out.
        self.dead_lettered_by_policy = 0
        self._generation: int | None = None
        # Records delivered on the live generation whose settlement is not on
        # the wire yet, in receive order (dicts keep insertion order).
        self._outstanding: dict[int, Record] = {}
        self._next_seq = 0
        self._acked_unsent = 0
        # ACKED records still in _outstanding: lets flush() skip scanning the
        # whole window for acks decided out of order (O(released), not O(window)).
        self._acked_held = 0
        self._first_buffered_at: float | None = None
        #: Set by :meth:`close`: every later settlement raises ConsumerClosedError.
        self.closed = False

    # ---- admission ----------------------------------------------------------
    def admit(self, message: InboundMessage) -> Record | None:
        """Track a new delivery; None if it belongs to a generation already ended."""
        if self._generation is None or message.generation > self._generation:
            self._end(self._generation)
            self._generation = message.generation
        elif message.generation < self._generation:
            return None
        return self._track(message)

    def receive_simple(self, message: InboundMessage) -> Record | None:
        """The per-message path of :meth:`receive`: the same generation and no
        poison policy, so the delivery is simply admitted. None: nothing was done;
        call :meth:`receive`."""
        if message.generation != self._generation or self._max_deliveries is not None:
            return None
        return self._track(message)

    def _track(self, message: InboundMessage) -> Record:
        self._next_seq += 1
        record = Record(message, self._next_seq)
        self._outstanding[record.seq] = record
        if self.observer is not None:
            self.observer.received(record)
        return record

    def receive(self, message: InboundMessage) -> Admission:
        """Admit *message* and apply the poison policy (``max_deliveries``)."""
        previous = self._generation
        record = self.admit(message)
        new_generation = record is not None and (previous is None or message.generation > previous)
        if record is None:
            return Admission(None, [], False)
        count = message.delivery_count
        if self._max_deliveries is not None and count is not None and count > self._max_deliveries:
            self.dead_lettered_by_policy += 1
            return Admission(None, self.settle(record, WireVerb.REJECT, by_policy=True), new_generation)
        return Admission(record, [], new_generation)

    def generation_ended(self, generation: int) -> None:
        # Exact match: a transport with a channel/connection per subscription ends
        # one generation without touching the other subscriptions' ledgers.
        if self._generation is not None and generation == self._generation:
            self._end(self._generation)

    def _end(self, generation: int | None) -> None:
        if generation is None:
            return
        for record in self._outstanding.values():
            record.stale = True
        self._outstanding.clear()
        self._acked_unsent = 0
        self._acked_held = 0
        self._first_buffered_at = None

    def close(self) -> None:
        """The consumer is closed: its subscription is cancelled and the broker takes
        back what is undecided, so those deliveries go stale and any later settlement
        raises (flush decided acks first)."""
        self.closed = True
        self._end(self._generation)

    @property
    def max_deliveries(self) -> int | None:
        """The poison policy's limit (None: no limit: requeue loops are the consumer's to watch)."""
        return self._max_deliveries

    @property
    def unsettled(self) -> int:
        """Deliveries of the live generation not settled on the wire yet."""
        return len(self._outstanding)

    def undecided_through(self, record: Record) -> set[int]:
        """Seqs of the undecided deliveries received up to and including *record*."""
        found: set[int] = set()
        for seq, held in self._outstanding.items():
            if seq > record.seq:
                break
            if held.state is State.PENDING:
                found.add(seq)
        return found

    @property
    def pending(self) -> int:
        """Deliveries the application has not decided on yet."""
        return sum(1 for r in self._outstanding.values() if r.state is State.PENDING)

    def held(self, broker_id: Hashable) -> Record | None:
        """The undecided delivery of the live generation that the broker stores as
        *broker_id*, if one is held (a scan: called for redeliveries only)."""
        for record in self._outstanding.values():
            if record.state is State.PENDING and record.message.broker_id == broker_id:
                return record
        return None

    # ---- decisions ----------------------------------------------------------
    def check(self, record: Record) -> None:
        """Raise if *record* may not be settled; nothing is changed."""
        if record.state is not PENDING:
            raise AlreadySettledError(
                f"delivery {record.message.message_id or record.seq} from {record.message.source!r} "
                f"was already {record.state.value}; nothing was sent"
            )
        if record.stale or record.message.generation != self._generation:
            if self.observer is not None:
                self.observer.stale()  # a closed consumer's delivery is stale too (counted alike)
            if self.closed:
                raise closed_error(f"delivery {record.message.message_id or record.seq}", record.message.source)
            raise stale_error(f"delivery {record.message.message_id or record.seq} from {record.message.source!r}",
                              record.message.generation)

    def settle(self, record: Record, verb: WireVerb, *, by_policy: bool = False) -> list[WireSettle]:
        """Decide *record* with *verb* (``by_policy``: a poison message dead-lettered by
        ``max_deliveries``); the ops to put on the wire now."""
        self.check(record)
        record.state = _VERB_STATE[verb]
        if self.observer is not None:
            self.observer.settled(record, verb, by_policy=by_policy)
        if not self._conflating:
            outstanding = self._outstanding
            if not self._ordered or next(iter(outstanding)) == record.seq:
                # The per-message path: settled alone (not ordered), or the oldest
                # outstanding one (ordered): release it, and in ordered mode any
                # decided deliveries queued behind it.
                del outstanding[record.seq]
                message = record.message
                op = WireSettle(verb, message.wire_tag, message.generation, self.subscription, False, message)
                if not self._ordered or not outstanding:
                    return [op]
                return [op, *self._release_ordered_prefix()]
        if self._ordered:
            # Acks may wait for a conflated flush; requeue/reject release the prefix now.
            if verb is ACK and self._conflating:
                return self._buffer_acks(1)
            return self._release_ordered_prefix()
        if verb is not ACK:
            del self._outstanding[record.seq]
            return [self._op(record)]
        if not self._conflating:
            del self._outstanding[record.seq]
            return [self._op(record)]
        self._acked_held += 1
        return self._buffer_acks(1)

    def refused_on_the_wire(self, record: Record) -> None:
        """The transport refused *record*'s settlement as stale after this ledger
        decided it: the loss reached the transport first. Nothing was sent, so the
        delivery reads undecided and stale again, as the error says (the decision's
        own count stays: counters only go up; ``stale_refused`` counts this too)."""
        record.state = State.PENDING
        record.stale = True
        if self.observer is not None:
            self.observer.stale()

    def ack_through(self, record: Record) -> list[WireSettle]:
        """Ack every undecided delivery received up to and including *record*."""
        self.check(record)
        newly = 0
        for seq, other in self._outstanding.items():
            if seq > record.seq:
                break
            if other.state is State.PENDING:
                other.state = State.ACKED
                newly += 1
                if self.observer is not None:
                    self.observer.settled(other, WireVerb.ACK)
        self._acked_held += newly
        if not self._conflating:
            return self._release_ordered_prefix() if self._ordered else self.flush()
        return self._buffer_acks(newly)

    def _buffer_acks(self, count: int) -> list[WireSettle]:
        self._acked_unsent += count
        if self._first_buffered_at is None:
            self._first_buffered_at = self._clock()
        if self._acked_unsent >= self._conflate_count:
            return self.flush()
        return []

    # ---- flushing -------------------------------------------------------------
    def deadline(self) -> float | None:
        """Clock time at which buffered acks must be flushed, if any are buffered."""
        if self._first_buffered_at is None or self._conflate_s <= 0:
            return None
        return self._first_buffered_at + self._conflate_s

    def flush_wait(self) -> float:
        """How long a conflation timer sleeps before it looks again: 0 when the
        buffered acks are due now, at most 50 ms (acks buffered meanwhile start a
        deadline of their own)."""
        deadline = self.deadline()
        if deadline is None:
            return _TIMER_POLL_S
        return max(0.0, min(deadline - self._clock(), _TIMER_POLL_S))

    def due(self) -> list[WireSettle]:
        deadline = self.deadline()
        if deadline is not None and self._clock() >= deadline:
            return self.flush()
        return []

    def flush(self) -> list[WireSettle]:
        """Every decided ack not yet on the wire, as few ops as the broker allows."""
        self._acked_unsent = 0
        self._first_buffered_at = None
        if self._ordered:
            self._acked_held = 0  # unused in ordered mode: release walks the prefix
            return self._release_ordered_prefix()
        ops: list[WireSettle] = []
        prefix: list[Record] = []
        for record in self._outstanding.values():
            if record.state is not State.ACKED:
                break
            prefix.append(record)
        if prefix:
            if self._multiple and len(prefix) > 1:
                ops.append(self._op(prefix[-1], multiple=True))
            else:
                ops.extend(self._op(r) for r in prefix)
            for r in prefix:
                del self._outstanding[r.seq]
        if self._acked_held > len(prefix):
            # Some acks were decided behind a still-pending delivery: send them singly.
            rest = [r for r in self._outstanding.values() if r.state is State.ACKED]
            for r in rest:
                del self._outstanding[r.seq]
                ops.append(self._op(r))
        self._acked_held = 0
        return ops

    def _release_ordered_prefix(self) -> list[WireSettle]:
        # Walk only the decided prefix (stops at the first pending delivery), so a
        # settle costs O(released), not O(window).
        outstanding = self._outstanding
        released: list[Record] = []
        for record in outstanding.values():
            if record.state is State.PENDING:
                break
            released.append(record)
        ops: list[WireSettle] = []
        for record in released:
            del outstanding[record.seq]
            message = record.message
            ops.append(WireSettle(_STATE_VERB[record.state], message.wire_tag, message.generation,
                                  self.subscription, False, message))
        return ops

    def _op(self, record: Record, *, multiple: bool = False) -> WireSettle:
        message = record.message
        return WireSettle(
            _STATE_VERB[record.state], message.wire_tag, message.generation,
            self.subscription, multiple, message,
        )


@dataclass
class BatchResult:
    """What :meth:`Consumer.settle_batch` did."""

    settled: int = 0
    #: Refused before anything was sent: stale (the broker redelivers) or settled before.
    refused: int = 0
    cumulative: bool = False

@dataclass(frozen=True)
class DrainResult:
    """What ``consumer.drain()`` did."""

    #: Received and never handed out: returned to the broker unsettled (redelivered).
    handed_back: int = 0
    #: In flight when the drain began and settled before the deadline.
    finished: int = 0
    #: Still unsettled at the deadline: returned to the broker with the subscription.
    abandoned: int = 0

    @property
    def complete(self) -> bool:
        """True when every delivery in flight was settled before the deadline."""
        return self.abandoned == 0

