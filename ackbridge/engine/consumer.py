"""The consumer half of the engine: what the sync and async consumers and their
deliveries share, and what a failed handler's delivery becomes."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ackbridge import contract
from ackbridge.capabilities import Capabilities, DeadLetter, DeadLetterTarget, Level, RejectFate, Verb
from ackbridge.engine import handles, leases, plans
from ackbridge.errors import AckbridgeError, SettlementError
from ackbridge.kernel.guaranteed import ConsumerGuard
from ackbridge.kernel.labels import requested_labels
from ackbridge.kernel.requeue_loops import RequeueWatch, warn_loop
from ackbridge.kernel.settlement import PENDING, BatchResult, Ledger, Record, State
from ackbridge.messages import ACK, REQUEUE, InboundMessage, WireSettle, WireVerb
from ackbridge.observability.logs import delivery_fields

log = logging.getLogger("ackbridge")

if TYPE_CHECKING:
    from ackbridge.engine.connection import ConnectionBase

HANDLER_OWNS = ("this consumer hands every delivery to its handler; get() and iteration are for a consumer "
                 "made without handler=")
FAILED_VERB_TEXT = {
    WireVerb.REQUEUE: "requeued it (this broker cannot reject)",
    None: "left it unsettled (settled already, stale, or neither reject nor requeue is possible)",
}


def reject_text(capabilities: Capabilities, source: str, target: DeadLetterTarget | None) -> str:
    """What a reject of a message from *source* did, as true as is known: the
    transport's answer for that queue first, else the broker's declared fate."""
    if target is not None and target.state is DeadLetter.KNOWN:
        return f"rejected it (dead-lettered to {target.where})" if target.where else "rejected it (dead-lettered)"
    if target is not None and target.state is DeadLetter.NONE:
        why = f": {target.where}" if target.where else ""
        return f"rejected it (discarded: {source!r} has no dead-letter target{why})"
    fate = capabilities.reject_outcome.fate
    if fate is RejectFate.DEAD_LETTERS:
        return "rejected it (dead-lettered)"
    if fate is RejectFate.DISCARDS:
        return f"rejected it (discarded: {capabilities.broker} drops rejected messages)"
    if fate is RejectFate.DEAD_LETTERS_IF_TARGET:
        return (f"rejected it (dead-lettered if {source!r} has a dead-letter target, else discarded; "
                "ackbridge could not tell which)")
    return "rejected it (whether the broker dead-letters or discards it is not declared)"


def failed_verb_text(capabilities: Capabilities, source: str, verb: WireVerb | None,
                     target: DeadLetterTarget | None) -> str:
    """The failed-handler log's account of *verb* on a message from *source*."""
    if verb is WireVerb.REJECT:
        return reject_text(capabilities, source, target)
    return FAILED_VERB_TEXT[verb]


def warn_no_dead_letter(source: str, broker: str, target: DeadLetterTarget) -> None:
    """``consume()``'s once-per-source warning: a reject from *source* discards the message."""
    why = f" ({target.where})" if target.where else ""
    log.warning("ackbridge: %r has no dead-letter target%s: a message rejected from it is DISCARDED, also when "
                "a handler or process() raises; declare it with a dead-letter target (declare_queue's default "
                "dead_letter=True) to keep them [broker %s]", source, why, broker,
                extra={"ackbridge_broker": broker, "ackbridge_destination": source})


def failed_handler_verb(capabilities: Capabilities, delivery: DeliveryBase) -> WireVerb | None:
    """What a handler's exception does to its unsettled delivery: reject, as a
    poison message must not loop; requeue where the broker cannot reject."""
    if delivery.settled or delivery.stale:
        return None
    if capabilities.support(Verb.REJECT).available:
        return WireVerb.REJECT
    if capabilities.support(Verb.REQUEUE).available:
        return WireVerb.REQUEUE
    return None


def handler_failed(capabilities: Capabilities, source: str, delivery: DeliveryBase,
                   target: DeadLetterTarget | None = None) -> WireVerb | None:
    """Log a handler's exception (call from its ``except``) and say what to do
    with its delivery (see :func:`failed_handler_verb`); *target*: what the
    transport told of *source*'s dead-letter target, for a true log line."""
    verb = failed_handler_verb(capabilities, delivery)
    log.exception("ackbridge handler raised on a message from %r (id %r); %s [broker %s, generation %d]",
                  source, delivery.message_id, failed_verb_text(capabilities, source, verb, target),
                  delivery.broker, delivery.generation,
                  extra=delivery_fields(delivery.broker, source, delivery.generation))
    return verb


def settle_failed(delivery: DeliveryBase, exc: Exception) -> None:
    """Log that the failed handler's delivery could not be settled either."""
    log.warning("ackbridge could not settle the failed message: %s [broker %s, destination %r, generation %d]",
                exc, delivery.broker, delivery.source, delivery.generation,
                extra=delivery_fields(delivery.broker, delivery.source, delivery.generation))


class ConsumerBase(contract.ConsumerView):
    """What the sync and async consumers share: every decision about a delivery
    (admission, settlement, batches, generation ends). The twins call these with
    their lock held (sync) or on the loop (async) and put the ops on the wire."""

    #: Deliveries received and not handed out yet (the face's Delivery objects).
    _ready: deque[Any]
    _connection: ConnectionBase[Any, Any, Any]

    def __init__(self, subscription: str, source: str, ledger: Ledger, guard: ConsumerGuard | None = None) -> None:
        self._guard = guard
        self.subscription = subscription
        self.source = source
        self._ledger = ledger
        self._closed = False
        if ledger.observer is not None:
            ledger.observer.connection.track_consumer(self)
        #: Set when the connection failed for good: get() raises it once nothing is ready.
        self._failure: AckbridgeError | None = None
        # A max_deliveries consumer bounds its loops itself; others are watched for them.
        self._requeues = RequeueWatch() if ledger.max_deliveries is None else None

    def _admit(self, message: InboundMessage) -> tuple[Record | None, list[WireSettle]]:
        """Take *message* into the ledger: its record, or None when it is not handed
        out (a duplicate, a poison message, a gap with ``on_gap="raise"``, which sets
        the failure get() raises), and ops to send first."""
        if message.redelivered:  # the broker's deadline may have passed on a delivery held here
            leases.lapsed(self._ledger, message, self._connection.capabilities.broker)
        # The per-message path (same generation, no poison policy, no screening) inline.
        record = None if self._guard is not None else self._ledger.receive_simple(message)
        if record is not None:
            return record, []
        record, ops, error = admit_screened(self._ledger, self._ready, message, self._guard)
        if error is not None:
            self._failure = error
        return record, ops

    def _handler_failed(self, delivery: DeliveryBase) -> WireVerb | None:
        """A handler raised on *delivery*: log it and say what to settle it with."""
        connection = self._connection
        return handler_failed(connection.capabilities, self.source, delivery,
                              connection._dead_letter_targets.get(self.source))

    def _decide(self, record: Record, verb: WireVerb) -> list[WireSettle]:
        """Settle *record* in the ledger (raises if it may not be); the ops to send."""
        if not (ack := verb is ACK):  # every broker acks; only requeue/reject need the table
            plans.require_verb(self._connection.capabilities, verb)
        ops = self._ledger.settle(record, verb)
        if self._guard is not None:
            self._guard.acked((record.message,), ack)
        if not ack and verb is REQUEUE and self._requeues is not None:
            self._watch_requeue(record.message)
        return ops

    def _undecide(self, record: Record, refused: Sequence[WireSettle]) -> None:
        """The transport refused *refused* as stale after :meth:`_decide`: where
        *record*'s own op is among them, nothing of it was sent, so the delivery
        reads undecided and stale again and its id is no acked copy any more (the
        broker redelivers it: the error the caller gets says so)."""
        if any(op.message is record.message for op in refused):
            self._ledger.refused_on_the_wire(record)
            if self._guard is not None:
                self._guard.unacked(record.message)

    def _watch_requeue(self, message: InboundMessage) -> None:
        """Warn (rate-limited) when this consumer keeps requeueing redelivered messages: a loop."""
        assert self._requeues is not None
        found = self._requeues.requeued(message)
        if found is not None:
            capabilities = self._connection.capabilities
            warn_loop(self.source, capabilities.broker, found[0], found[1], capabilities.requeue_bound)

    def _decide_through(self, record: Record) -> list[WireSettle]:
        """The cumulative ack of *record* and every earlier undecided delivery."""
        self._connection.capabilities.require(Verb.CUMULATIVE_ACK)
        return self._ledger.ack_through(record)

    def _decide_batch(self, records: list[Record], verb: WireVerb) -> list[WireSettle] | None:
        """One cumulative ack for *records* where it settles exactly them; else None
        (the twin settles them one by one)."""
        if verb is not WireVerb.ACK or not cumulative_fits(self._ledger, self._connection.capabilities,
                                                                  records):
            return None
        if self._guard is not None:
            self._guard.acked(r.message for r in records)
        return self._ledger.ack_through(records[-1])

    def _plan_batch(self, deliveries: Sequence[DeliveryBase], verb: WireVerb) -> tuple[list[WireSettle], BatchResult]:
        """``settle_batch``'s decisions: one cumulative ack where it settles exactly
        *deliveries*, else each on its own (a refused one is counted, never raised),
        then every conflated ack; the ops to send, in order, and the result."""
        result = BatchResult()
        records = [d._record for d in deliveries]
        ops = self._decide_batch(records, verb)
        if ops is not None:
            result.settled, result.cumulative = len(records), True
        else:
            ops = []
            for record in records:
                try:
                    ops += self._decide(record, verb)
                except SettlementError:
                    result.refused += 1
                else:
                    result.settled += 1
        ops += self._ledger.flush()
        return ops, result

    def _end_generation(self, generation: int) -> None:
        """Forget what *generation* delivered: its deliveries went stale."""
        generation_ended(self._ledger, self._ready, generation)
        if self._guard is not None:
            self._guard.generation_ended()

    @property
    def unsettled(self) -> int:
        return self._ledger.unsettled

    @property
    def duplicates_dropped(self) -> int:
        guard = self._guard
        return guard.dedupe.dropped if guard is not None and guard.dedupe is not None else 0

    @property
    def gaps(self) -> int:
        guard = self._guard
        return guard.gaps.gaps if guard is not None and guard.gaps is not None else 0

    @property
    def missing(self) -> dict[str, list[int]]:
        guard = self._guard
        return {k: list(v) for k, v in guard.gaps.missing.items()} if guard is not None and guard.gaps else {}

    def _check_extend(self, delivery: DeliveryBase) -> tuple[Any, int]:
        """Raise if *delivery*'s lease cannot be extended; its (wire tag, generation)."""
        leases.check_extend(self._connection.capabilities, self._ledger, delivery._record)
        message = delivery._record.message
        return message.wire_tag, message.generation

    @property
    def dead_lettered_by_policy(self) -> int:
        """Poison messages dead-lettered by ``max_deliveries`` instead of handed out."""
        return self._ledger.dead_lettered_by_policy


class DeliveryBase(contract.DeliveryView):
    """A received message with its settlement state. Twins add the verbs; the
    properties' documents are :class:`ackbridge.contract.DeliveryView`'s."""

    __slots__ = ("_consumer", "_record", "broker")
    _consumer: Any  # the face's consumer, which settles it

    def __init__(self, record: Record, broker: str, consumer: Any) -> None:
        self._record = record
        self.broker = broker
        self._consumer = consumer

    @property
    def ack_handle(self) -> str:
        return handles.handle_of(self._consumer._connection.capabilities, self._record.message)

    @property
    def _message(self) -> InboundMessage:
        return self._record.message

    @property
    def body(self) -> bytes:
        return self._record.message.body

    @property
    def headers(self) -> Mapping[str, Any]:
        return self._record.message.headers

    @property
    def source(self) -> str:
        """The queue, topic or address it came from."""
        return self._record.message.source

    @property
    def routing_key(self) -> str | None:
        """The routing key or topic it was published with, where the broker tells."""
        return self._record.message.routing_key

    @property
    def message_id(self) -> str | None:
        return self._record.message.message_id

    @property
    def broker_id(self) -> Hashable | None:
        return self._record.message.broker_id

    @property
    def correlation_id(self) -> str | None:
        """The publisher's correlation id, where it gave one."""
        return self._record.message.correlation_id

    @property
    def reply_to(self) -> str | None:
        """Where replies go, where the publisher said."""
        return self._record.message.reply_to

    @property
    def content_type(self) -> str | None:
        """The publisher's content type, where it gave one."""
        return self._record.message.content_type

    @property
    def timestamp(self) -> float | None:
        """When it was published (epoch seconds), where the broker or publisher tells."""
        return self._record.message.timestamp

    @property
    def redelivered(self) -> bool:
        return self._record.message.redelivered

    @property
    def delivery_count(self) -> int | None:
        return self._record.message.delivery_count

    @property
    def generation(self) -> int:
        return self._record.message.generation

    @property
    def requested_acks(self) -> tuple[str, ...]:
        """The labelled acknowledgements its publisher requested (issue them with ``acknowledge``)."""
        return requested_labels(self._record.message.headers)

    @property
    def state(self) -> State:
        return self._record.state

    @property
    def stale(self) -> bool:
        return self._record.stale

    @property
    def settled(self) -> bool:
        return self._record.state is not PENDING

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.broker} source={self.source!r} id={self.message_id!r} "
            f"state={self.state.value} redelivered={self.redelivered} count={self.delivery_count}>"
        )


# ---- admission, generation ends, cumulative batches ----------------------------------
def drop_older_than(ready: deque[Any], generation: int) -> None:
    """Remove buffered deliveries of generations before *generation* (the broker
    redelivers them; their tags may name other messages now)."""
    kept = [d for d in ready if d.generation >= generation]
    ready.clear()
    ready.extend(kept)


def admit(ledger: Ledger, ready: deque[Any], message: InboundMessage) -> tuple[Record | None, list[WireSettle]]:
    """Admit *message*: its record to hand out (None: not handed out) and the ops
    to send now (a poison message dead-lettered by ``max_deliveries``)."""
    record = ledger.receive_simple(message)
    if record is not None:
        return record, []
    admission = ledger.receive(message)
    if admission.new_generation:
        drop_older_than(ready, message.generation)  # it may arrive before generation_ended does
    return admission.record, admission.reject


def admit_screened(ledger: Ledger, ready: deque[Any], message: InboundMessage, guard: ConsumerGuard | None
                   ) -> tuple[Record | None, list[WireSettle], AckbridgeError | None]:
    """:func:`admit`, then the consumer's duplicate and gap screening: a duplicate of a
    message acked within ``dedupe_window`` is acked here and not handed out; a gap
    with ``on_gap="raise"`` gives the error get() raises (the delivery stays unsettled)."""
    record, ops = admit(ledger, ready, message)
    if record is None or guard is None:
        return record, ops, None
    hand_out, error = guard.screen(message)
    if hand_out:
        return record, ops, None
    if error is None:
        ops = ops + ledger.settle(record, WireVerb.ACK)
    return None, ops, error


def generation_ended(ledger: Ledger, ready: deque[Any], generation: int) -> None:
    ledger.generation_ended(generation)
    drop_older_than(ready, generation + 1)


def cumulative_fits(ledger: Ledger, capabilities: Capabilities, records: Sequence[Record]) -> bool:
    """True when one cumulative ack of the last record settles exactly *records*."""
    if len(records) < 2 or capabilities.support(Verb.CUMULATIVE_ACK).level is Level.UNSUPPORTED:
        return False
    last = records[-1]
    if last.stale or records[0].message.generation != last.message.generation:
        return False
    return ledger.undecided_through(last) == {r.seq for r in records}
