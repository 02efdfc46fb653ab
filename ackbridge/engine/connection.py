"""The connection half of the engine: the bookkeeping both faces share and the
router that hands each transport event to its consumer or publisher."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ackbridge.capabilities import CANNOT_TELL, Capabilities, DeadLetter, DeadLetterTarget, Verb
from ackbridge.engine import plans
from ackbridge.engine.consumer import DeliveryBase, warn_no_dead_letter
from ackbridge.errors import AckbridgeError, InvalidLabelError
from ackbridge.kernel import labels as labels_mod
from ackbridge.kernel.labels import AckCollector, LabelAck
from ackbridge.messages import ConfirmOutcome, InboundMessage
from ackbridge.observability import connection_observer
from ackbridge.observability.logs import quiet_client_libraries
from ackbridge.options import ConnectionSettings
from ackbridge.urls import BrokerURL

if TYPE_CHECKING:
    from ackbridge.observability.metrics import ConnectionObserver
    from ackbridge.transport import TransportBase

log = logging.getLogger("ackbridge")


TransportT = TypeVar("TransportT", bound="TransportBase")
ConsumerT = TypeVar("ConsumerT")
PublisherT = TypeVar("PublisherT")

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

    def failed(self, error: AckbridgeError, subscription: str | None = None) -> None:
        if subscription is not None:
            consumer = self._consumers.get(subscription)
            if consumer is not None:
                consumer._on_failure(error)
            return
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

    def __init__(self, url: BrokerURL, options: Mapping[str, Any], *, messaging_system: str = "",
                 client_loggers: tuple[str, ...] = (), settings: ConnectionSettings | None = None) -> None:
        self.url = url
        self._options = dict(options)
        #: The shared connection options as the transport got them (the retransmit back-off reads one).
        self.settings = settings if settings is not None else ConnectionSettings.from_options({})
        self._seq = itertools.count(1)
        self._inbox_address: str | None = None
        #: Records metrics and spans; None when neither is configured (see ackbridge.observability).
        # What the plugin declared (AdapterSpec): the core names no broker or client library.
        self._observer = connection_observer(url, messaging_system or url.scheme)
        quiet_client_libraries(client_loggers)
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
        reply = reply_for(delivery, label, status, payload, reserved=reserved)
        return (delivery.reply_to or "", reply.body, {"headers": reply.headers, "correlation_id": reply.correlation_id,
                                                       "content_type": reply.content_type, "persistent": False})

    def _plan_consumer(self, source: str, handler: object, options: Any) -> plans.ConsumerPlan:
        """What ``consume()`` subscribes with (both faces); looks up *source*'s dead-letter target."""
        plan = plans.plan_consumer(self.capabilities, self._options, source, handler, options, self._observer)
        self._look_up_dead_letter(source)
        return plan

    def _look_up_dead_letter(self, source: str) -> None:
        """Ask the transport once per source where its rejects go; warn when nowhere.
        The sync face asks on the caller's thread; the async face in a task of its own
        (the answer may need the broker), so its warning may follow consume()."""
        if source in self._dead_letter_targets or not self.capabilities.support(Verb.REJECT).available:
            return
        self._dead_letter_targets[source] = CANNOT_TELL  # asked once, even while the answer is on its way
        self._ask_dead_letter(source)

    def _ask_dead_letter(self, source: str) -> None:
        raise NotImplementedError  # each face asks its transport its own way, then calls _learned_dead_letter

    @staticmethod
    def _dead_letter_untold(source: str, exc: Exception) -> None:
        log.debug("ackbridge: dead-letter target of %r not told: %s", source, exc)

    def _learned_dead_letter(self, source: str, target: DeadLetterTarget) -> None:
        self._dead_letter_targets[source] = target
        if target.state is DeadLetter.NONE:
            warn_no_dead_letter(source, self.broker, target)


# ---- labelled acknowledgements ---------------------------------------------------------
def persisted_ack(outcome: ConfirmOutcome | None) -> LabelAck:
    """The broker-persisted label's answer, from a publish's confirm outcome."""
    return LabelAck(labels_mod.BROKER_PERSISTED,
                    labels_mod.confirm_status(outcome) if outcome else 503,
                    outcome.reason if outcome and outcome.reason else None)


class AckBook:
    """Open acknowledgement requests of one connection, by correlation id."""

    def __init__(self, observer: ConnectionObserver | None = None) -> None:
        self._collectors: dict[str, AckCollector] = {}
        self._observer = observer

    def open(self, capabilities: Capabilities, correlation_id: str, labels: tuple[str, ...],
             timeout: float) -> AckCollector:
        capabilities.require(Verb.LABELLED_ACKS)
        collector = AckCollector(correlation_id, labels, time.monotonic() + timeout)
        self._collectors[correlation_id] = collector
        return collector

    def add(self, correlation_id: str, ack: LabelAck) -> bool:
        """Record *ack*; True when waiters should look again."""
        collector = self._collectors.get(correlation_id)
        if collector is None or not collector.add(ack):
            return False
        if self._observer is not None:
            self._observer.labelled_ack(ack.label, ack.status)
        if collector.complete:
            del self._collectors[correlation_id]
        return True

    def add_reply(self, message: InboundMessage) -> tuple[str, LabelAck] | None:
        """Parse a reply message; the ack it carries, if any."""
        ack = labels_mod.parse_reply(message)
        if ack is None or message.correlation_id is None:
            return None
        return message.correlation_id, ack


def reply_for(delivery: Any, label: str, status: int, payload: Any, *, reserved: bool) -> Any:
    """The reply message acknowledging *label* of *delivery* (checked first).

    ``reserved`` lets an integration issue a reserved label it owns (the Spark
    connector's ``spark-committed``); applications cannot."""
    labels_mod.validate_label(label, issuing=True, internal=reserved)
    labels_mod.validate_status(status)
    if label not in delivery.requested_acks:
        raise InvalidLabelError(f"acknowledgement {label!r} was not requested by this message")
    if not delivery.reply_to or not delivery.correlation_id:
        raise InvalidLabelError("this message carries no reply address or correlation id to acknowledge to")
    return labels_mod.build_reply(delivery.correlation_id, label, status, payload)
