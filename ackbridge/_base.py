"""I/O-free pieces shared by the sync and async clients."""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from ackbridge import contract, engine, handles
from ackbridge.capabilities import CANNOT_TELL, Capabilities, DeadLetter, DeadLetterTarget, RejectFate, Verb
from ackbridge.engine import AckBook, BatchResult
from ackbridge.errors import AckbridgeError, SettlementError
from ackbridge.guaranteed import ConsumerGuard
from ackbridge.labels import LabelAck, requested_labels
from ackbridge.messages import ConfirmOutcome, InboundMessage, WireSettle, WireVerb
from ackbridge.observability import connection_observer
from ackbridge.observability.logs import delivery_fields, quiet_client_libraries
from ackbridge.requeue_loops import RequeueWatch, warn_loop
from ackbridge.settlement import Ledger, Record, State
from ackbridge.transport import SyncTransport, TransportBase
from ackbridge.urls import BrokerURL

log = logging.getLogger("ackbridge")

TransportT = TypeVar("TransportT", bound=TransportBase)
ConsumerT = TypeVar("ConsumerT")
PublisherT = TypeVar("PublisherT")

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


def handler_failed(capabilities: Capabilities, source: str, delivery: DeliveryBase) -> WireVerb | None:
    """Log a handler's exception (call from its ``except``) and say what to do
    with its delivery (see :func:`failed_handler_verb`)."""
    verb = failed_handler_verb(capabilities, delivery)
    connection = getattr(delivery._consumer, "_connection", None)
    target = connection._dead_letter_targets.get(source) if isinstance(connection, ConnectionBase) else None
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


class EventRouter:
    """Hands each transport event to the consumer or publisher it belongs to. Both
    faces route through it; the async face first moves the event onto its loop."""

    __slots__ = ("_consumers", "_observer", "_publishers", "reply")

    def __init__(self, consumers: Mapping[str, Any], publishers: dict[int, Any], observer: Any,
                 reply: Callable[[InboundMessage], None]) -> None:
        self._consumers = consumers
        self._publishers = publishers
        self._observer = observer
        #: A labelled acknowledgement arrived in the reply inbox.
        self.reply = reply

    def deliver(self, subscription: str, message: InboundMessage) -> None:
        consumer = self._consumers.get(subscription)
        if consumer is not None:
            consumer._on_message(message)

    def confirm(self, seq: int, outcome: ConfirmOutcome) -> None:
        # dict.pop is atomic under the GIL; no lock on the per-message path.
        publisher = self._publishers.pop(seq, None)
        if publisher is not None:
            publisher._resolved(seq, outcome)

    def confirm_batch(self, outcomes: Sequence[tuple[int, ConfirmOutcome]]) -> None:
        # Each run of publishes of one publisher (the common case: the whole batch)
        # is resolved under one lock, with one wake-up.
        publishers = self._publishers
        run: list[tuple[int, ConfirmOutcome]] = []
        owner: Any = None
        for answer in outcomes:
            publisher = publishers.pop(answer[0], None)
            if publisher is None:
                continue
            if publisher is not owner and run:
                owner._resolved_batch(run)
                run = []
            owner = publisher
            run.append(answer)
        if run:
            owner._resolved_batch(run)

    def failed(self, error: AckbridgeError) -> None:
        for consumer in list(self._consumers.values()):
            consumer._on_failure(error)

    def generation_ended(self, generation: int, reason: str = "") -> None:
        if self._observer is not None:
            self._observer.generation_ended(generation)
        for consumer in list(self._consumers.values()):
            consumer._on_generation_end(generation)


class ConnectionBase(Generic[TransportT, ConsumerT, PublisherT]):
    """What the sync and async connections share: their bookkeeping and the live
    capability table. Each face names its transport, consumer and publisher types."""

    _transport: TransportT

    def __init__(self, url: BrokerURL, options: Mapping[str, Any]) -> None:
        self.url = url
        self._options = dict(options)
        self._seq = itertools.count(1)
        self._inbox_address: str | None = None
        #: Records metrics and spans; None when neither is configured (see ackbridge.observability).
        self._observer = connection_observer(url)
        quiet_client_libraries()
        self._acks = AckBook(self._observer)
        self._closed = False
        self._consumers: dict[str, ConsumerT] = {}
        #: Publisher of each publish awaiting its confirm, by sequence number.
        self._publishers: dict[int, PublisherT] = {}
        self._default_publisher: PublisherT | None = None
        # The transport's events go to a router, not to the connection: its
        # callbacks are not public API (the async face moves them onto its loop).
        self._router = EventRouter(self._consumers, self._publishers, self._observer, self._on_reply)
        #: What the transport told about each consumed source's dead-letter target (asked once per source).
        self._dead_letter_targets: dict[str, DeadLetterTarget] = {}

    @property
    def capabilities(self) -> Capabilities:
        """The adapter's verb table; read live, as a transport may refine it on connect."""
        return self._transport.capabilities

    @property
    def broker(self) -> str:
        return self._transport.capabilities.broker

    def _add_ack(self, correlation_id: str, ack: LabelAck) -> None:
        raise NotImplementedError  # each face wakes its waiters its own way

    def _on_reply(self, message: InboundMessage) -> None:
        """A labelled acknowledgement arrived in the reply inbox."""
        found = self._acks.add_reply(message)
        if found is not None:
            self._add_ack(*found)

    @staticmethod
    def _reply(delivery: DeliveryBase, label: str, status: int, payload: Any,
               reserved: bool) -> tuple[str, bytes, dict[str, Any]]:
        """Where the labelled acknowledgement *label* of *delivery* goes, its body and publish options."""
        reply = engine.reply_for(delivery, label, status, payload, reserved=reserved)
        return (delivery.reply_to or "", reply.body, {"headers": reply.headers, "correlation_id": reply.correlation_id,
                                                       "content_type": reply.content_type, "persistent": False})

    def _plan_consumer(self, source: str, handler: object, options: Any) -> engine.ConsumerPlan:
        """What ``consume()`` subscribes with (both faces); looks up *source*'s dead-letter target."""
        plan = engine.plan_consumer(self.capabilities, self._options, source, handler, options, self._observer)
        self._look_up_dead_letter(source)
        return plan

    def _look_up_dead_letter(self, source: str) -> None:
        """Ask the transport once per source where its rejects go; warn when nowhere.
        The sync face asks on the caller's thread; the async face in a task of its own
        (the answer may need the broker), so its warning may follow consume()."""
        if source in self._dead_letter_targets or not self.capabilities.support(Verb.REJECT).available:
            return
        self._dead_letter_targets[source] = CANNOT_TELL  # asked once, even while the answer is on its way
        transport: Any = self._transport
        if isinstance(transport, SyncTransport):
            try:
                target = transport.dead_letter_target(source)
            except Exception as exc:  # a plugin's check must never stop consume()
                log.debug("ackbridge: dead-letter target of %r not told: %s", source, exc)
                return
            self._learned_dead_letter(source, target)
        else:
            self._spawn(self._look_up_dead_letter_async(transport, source))

    async def _look_up_dead_letter_async(self, transport: Any, source: str) -> None:
        try:
            target = await transport.dead_letter_target_async(source)
        except Exception as exc:
            log.debug("ackbridge: dead-letter target of %r not told: %s", source, exc)
            return
        self._learned_dead_letter(source, target)

    def _learned_dead_letter(self, source: str, target: DeadLetterTarget) -> None:
        self._dead_letter_targets[source] = target
        if target.state is DeadLetter.NONE:
            warn_no_dead_letter(source, self.broker, target)

    def _spawn(self, coro: Any) -> None:
        raise NotImplementedError  # the async face runs it as a task on its loop


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
        self._requeues = RequeueWatch() if getattr(ledger, "_max_deliveries", None) is None else None

    def _admit(self, message: InboundMessage) -> tuple[Record | None, list[WireSettle]]:
        """Take *message* into the ledger: its record, or None when it is not handed
        out (a duplicate, a poison message, a gap with ``on_gap="raise"``, which sets
        the failure get() raises), and ops to send first."""
        # The per-message path (same generation, no poison policy, no screening) inline.
        record = None if self._guard is not None else self._ledger.receive_simple(message)
        if record is not None:
            return record, []
        record, ops, error = engine.admit_screened(self._ledger, self._ready, message, self._guard)
        if error is not None:
            self._failure = error
        return record, ops

    def _decide(self, record: Record, verb: WireVerb) -> list[WireSettle]:
        """Settle *record* in the ledger (raises if it may not be); the ops to send."""
        if verb is not WireVerb.ACK:  # every broker acks; only requeue/reject need the table
            engine.require_verb(self._connection.capabilities, verb)
        ops = self._ledger.settle(record, verb)
        if self._guard is not None:
            self._guard.acked((record.message,), verb is WireVerb.ACK)
        if verb is WireVerb.REQUEUE and self._requeues is not None:
            self._watch_requeue(record.message)
        return ops

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
        if verb is not WireVerb.ACK or not engine.cumulative_fits(self._ledger, self._connection.capabilities,
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
        engine.generation_ended(self._ledger, self._ready, generation)
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
        return self._record.state is not State.PENDING

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.broker} source={self.source!r} id={self.message_id!r} "
            f"state={self.state.value} redelivered={self.redelivered} count={self.delivery_count}>"
        )
