"""The public contract of both faces, written down once.

:mod:`ackbridge.sync.connection` (threads) and :mod:`ackbridge.aio.connection` (asyncio)
implement these Protocols with the same names; the async twin awaits the methods that
wait for the broker. ``tests/core/test_parity.py`` checks both faces against this module,
so a method added to one face and not the other, or not here, fails the build.

The faces' classes subclass these Protocols, so a type checker holds each face to its
contract; a face's method carries no docstring of its own: ``help()`` and the API reference
(``griffe_inherited_docstrings``) find them here.
"""

from __future__ import annotations

from collections.abc import Generator, Hashable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any, Protocol, Unpack

from ackbridge.capabilities import Capabilities
from ackbridge.kernel.labels import AggregatedAcks
from ackbridge.kernel.settlement import BatchResult, DrainResult, State
from ackbridge.keywords import ConsumeOptions, PublisherOptions, PublishOptions
from ackbridge.messages import ConfirmOutcome, QueueInfo, WireVerb


class DeliveryView(Protocol):
    """What both faces' deliveries carry (the verbs differ only by ``await``)."""

    __slots__ = ()  # the faces' deliveries and confirms are slotted: no __dict__ from here

    @property
    def body(self) -> bytes:
        """The message body."""

    @property
    def headers(self) -> Mapping[str, Any]:
        """Application headers (ackbridge's own, such as ``ackbridge-seq``, included)."""

    @property
    def message_id(self) -> str | None:
        """The publisher's message id, where it gave one."""

    @property
    def broker_id(self) -> Hashable | None:
        """The message as the broker stores it (JetStream: stream and sequence), where it names one."""

    @property
    def redelivered(self) -> bool:
        """True when the broker delivered this message before (to anyone)."""

    @property
    def delivery_count(self) -> int | None:
        """How often the broker has delivered this message, where it counts."""

    @property
    def generation(self) -> int:
        """The connection generation it came on (a reconnect starts the next)."""

    @property
    def state(self) -> State:
        """Pending, or how it was settled."""

    @property
    def stale(self) -> bool:
        """True once the connection generation it came on has ended."""

    @property
    def settled(self) -> bool:
        """True once it has been acked, requeued or rejected."""

    @property
    def ack_handle(self) -> str:
        """This delivery's ack handle, which any connection to the broker may settle
        (``Connection.settle_handles``); UnsupportedVerbError where acks are bound to
        the receiving connection (see :mod:`ackbridge.engine.handles`)."""


class Delivery(DeliveryView, Protocol):
    __slots__ = ()

    def ack(self) -> None:
        """Settle: processed, the broker forgets the message."""

    def requeue(self) -> None:
        """Settle: hand the message back to the broker for another delivery."""

    def nack(self, requeue: bool = True) -> None:
        """Settle negatively: :meth:`requeue` (default) or, with ``requeue=False``, :meth:`reject`."""

    def reject(self) -> None:
        """Settle: the message is poison, dead-letter it (never delivered here again)."""

    def acknowledge(self, label: str, status: int = 200, payload: Any = None) -> Confirm:
        """Issue a labelled acknowledgement this message's publisher requested."""

    def extend(self) -> float | None:
        """Keep the broker from redelivering it under slow work; seconds it now waits, where
        known; UnsupportedVerbError where it cannot (:mod:`ackbridge.engine.leases`)."""

    def process(self, *, requeue: bool = False) -> AbstractContextManager[Delivery]:
        """Settle by outcome: ``with delivery.process(): handle(delivery.body)`` acks
        when the block ends normally and rejects (or, with *requeue*, requeues) when
        it raises; the exception goes on. A delivery the block settled itself, or
        one gone stale, is left alone."""


class AsyncDelivery(DeliveryView, Protocol):
    __slots__ = ()

    async def ack(self) -> None:
        """See :meth:`ackbridge.Delivery.ack`."""

    async def requeue(self) -> None:
        """See :meth:`ackbridge.Delivery.requeue`."""

    async def nack(self, requeue: bool = True) -> None:
        """See :meth:`ackbridge.Delivery.nack`."""

    async def reject(self) -> None:
        """See :meth:`ackbridge.Delivery.reject`."""

    async def acknowledge(self, label: str, status: int = 200, payload: Any = None) -> AsyncConfirm:
        """See :meth:`ackbridge.Delivery.acknowledge`."""

    async def extend(self) -> float | None:
        """See :meth:`ackbridge.Delivery.extend`."""

    def process(self, *, requeue: bool = False) -> AbstractAsyncContextManager[AsyncDelivery]:
        """``async with delivery.process(): ...``: see :meth:`ackbridge.Delivery.process`."""


class ConfirmView(Protocol):
    __slots__ = ()
    seq: int
    message_id: str | None

    def done(self) -> bool:
        """True once the outcome is known."""

    @property
    def outcome(self) -> ConfirmOutcome | None:
        """The outcome (confirmed, refused or unknown); None while it is not known."""


class Confirm(ConfirmView, Protocol):
    __slots__ = ()

    def result(self, timeout: float | None = None) -> ConfirmOutcome:
        """Wait for the outcome. ``timeout`` bounds this wait only; on expiry
        TimeoutError is raised and the confirm stays pending."""

    def wait_acks(self, timeout: float | None = None) -> AggregatedAcks:
        """The aggregated labelled acknowledgements this publish requested."""


class AsyncConfirm(ConfirmView, Protocol):
    __slots__ = ()

    def __await__(self) -> Generator[Any, None, ConfirmOutcome]: ...
    async def result(self, timeout: float | None = None) -> ConfirmOutcome:
        """The outcome; waits at most *timeout* s (TimeoutError), and reports unknown
        once the publish's confirm_timeout has passed."""

    async def wait_acks(self, timeout: float | None = None) -> AggregatedAcks:
        """Wait for the labelled acknowledgements this publish requested (``requested_acks``)."""


class ConsumerView(Protocol):
    """What both faces' consumers tell without waiting."""

    subscription: str
    source: str

    @property
    def unsettled(self) -> int:
        """Deliveries of the live generation not settled on the wire yet."""

    @property
    def duplicates_dropped(self) -> int:
        """Deliveries acked without being handed out: duplicates within ``dedupe_window``."""

    @property
    def gaps(self) -> int:
        """Messages reported missing by loss detection (``on_gap``)."""

    @property
    def missing(self) -> dict[str, list[int]]:
        """The sequence numbers reported missing, per producer id (``on_gap``)."""


class Consumer(ConsumerView, Protocol):
    def get(self, timeout: float | None = None) -> Delivery | None:
        """The next delivery, or None when *timeout* passes (or the consumer closes)."""

    def ack_through(self, delivery: Any) -> None:
        """Ack every undecided delivery received up to and including *delivery*."""

    def settle_batch(self, deliveries: Sequence[Any], verb: Any = ...) -> BatchResult:
        """Settle *deliveries* (in receive order) with one verb: acks with one
        cumulative ack when that settles exactly these deliveries, else one by one.
        Refused ones (stale, or settled before) are counted, never raised: the
        broker redelivers a stale one. Conflated acks are flushed at the end."""

    def flush(self) -> None:
        """Put every conflated ack on the wire now."""

    def close(self) -> None:
        """Flush decided acks and stop; undecided deliveries return to the broker."""

    def drain(self, timeout: float = 30.0) -> DrainResult:
        """Stop on SIGTERM: hand nothing out, give deliveries in flight *timeout* s, close; the rest
        returns unsettled, never acked or dead-lettered (:mod:`ackbridge.engine.draining`)."""


class AsyncConsumer(ConsumerView, Protocol):
    async def get(self, timeout: float | None = None) -> AsyncDelivery | None:
        """The next delivery, or None when *timeout* passes (or the consumer closes)."""

    async def ack_through(self, delivery: Any) -> None:
        """Ack *delivery* and every earlier unsettled delivery of this consumer (cumulative ack)."""

    async def settle_batch(self, deliveries: Sequence[Any], verb: Any = ...) -> BatchResult:
        """See :meth:`ackbridge.sync.connection.Consumer.settle_batch`."""

    async def flush(self) -> None:
        """Put every conflated ack on the wire now."""

    async def close(self) -> None:
        """Flush pending acks and stop consuming; unsettled deliveries return to the broker."""

    async def drain(self, timeout: float = 30.0) -> DrainResult:
        """See :meth:`ackbridge.Consumer.drain` (from a task not holding a delivery)."""


class PublisherView(Protocol):
    """What both faces' publishers tell without waiting."""

    window: int
    retransmitted: int

    @property
    def in_flight(self) -> int: ...


class Publisher(PublisherView, Protocol):
    def publish(self, destination: str, body: bytes, **options: Unpack[PublishOptions]) -> Confirm:
        """Send one message; returns its :class:`Confirm` without waiting for it.

        Waits (back-pressure) while ``window`` confirms are outstanding.
        """

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every publish so far has an outcome; False if *timeout* passed first."""


class AsyncPublisher(PublisherView, Protocol):
    async def publish(self, destination: str, body: bytes, **options: Unpack[PublishOptions]) -> AsyncConfirm:
        """Publish *body* to *destination*; returns its :class:`AsyncConfirm` (``await`` it for the outcome)."""

    async def flush(self, timeout: float | None = None) -> bool:
        """Wait until every publish has its outcome; False if *timeout* passed first."""


class Connection(Protocol):
    @property
    def capabilities(self) -> Capabilities: ...
    def close(self, *, leave_unsettled: bool = False) -> None:
        """Close every consumer, flush every publisher (up to 5 s), close the transport.

        Undecided deliveries return to the broker. With ``leave_unsettled=True``
        (brokers with connection-free acks only, else UnsupportedVerbError before
        anything is closed) the deliveries the application took are left to the
        broker instead, for another connection to settle by handle
        (:meth:`settle_handles`) or the broker to redeliver after its own timeout;
        what was received and never handed out is still requeued."""

    def settle_handles(self, handles: Iterable[str], verb: WireVerb = ...) -> BatchResult:
        """Settle deliveries by their ack handles (``delivery.ack_handle``), whichever
        connection received them; returns once the settlements are flushed to the
        broker. ``verb``: ack, or requeue where the broker requeues natively. A handle
        given twice is settled once (counted in ``refused``). Raises
        UnsupportedVerbError before anything is sent on a broker whose acks are bound
        to the receiving connection (see :mod:`ackbridge.engine.handles`)."""

    def declare_queue(self, name: str, *, dead_letter: bool = True) -> None:
        """Create queue *name* (durable) if it does not exist; with *dead_letter*, also its
        dead-letter companion, where rejected messages go. Declaring again is harmless."""

    def delete_queue(self, name: str, *, dead_letter: bool = True) -> None:
        """Delete queue *name* with its messages (and its dead-letter companion with
        *dead_letter*). Raises UnsupportedVerbError where the broker cannot."""

    def purge_queue(self, name: str) -> int | None:
        """Drop the ready messages of *name*; return how many, where the broker tells.
        Raises UnsupportedVerbError where the broker cannot."""

    def inspect_queue(self, name: str) -> QueueInfo:
        """Depth, consumers and dead-letter companion of *name*, where the broker tells.
        Raises BrokerError if the queue does not exist, UnsupportedVerbError where the
        broker tells nothing."""

    def consume(self, source: str, *, handler: Any = None, **options: Unpack[ConsumeOptions]) -> Consumer:
        """Subscribe to *source*. Without *handler*, take deliveries with get() or by
        iterating. With it, ``handler(delivery)`` is called for each delivery, one at
        a time in arrival order, on a thread of the consumer's own (never the
        transport's I/O thread, so a slow handler cannot hold back heartbeats or
        acks). The handler settles the delivery (now or later, from any thread). If
        it raises an ``Exception``, its unsettled delivery is rejected (dead-lettered),
        or requeued where the broker cannot reject; an interruption (``SystemExit``...)
        hands it back instead (see :mod:`ackbridge.kernel.interruptions`).

        ``dedupe_window=N``: a delivery whose message id was acked within the last N
        acked ids, or is held unsettled in a copy the broker stores separately, is
        acked and not handed out (``duplicates_dropped`` counts them); the broker
        delivering the held message itself again (an ack deadline) is handed out.
        ``on_gap``: loss detection on messages stamped by ``publisher(sequence=True)``:
        ``"warn"`` (a log warning), ``"raise"`` (get() raises DataLossError) or a
        callable ``on_gap(producer_id, missing_numbers)``; ``gaps`` and ``missing``
        count and list them."""

    def publisher(self, **options: Unpack[PublisherOptions]) -> Publisher:
        """A publisher with its own window of unconfirmed publishes; *options* are
        :class:`~ackbridge.keywords.PublisherOptions` (unset ``window`` and
        ``confirm_timeout``: the connection's).

        With ``retransmit=True`` a publish whose outcome is unknown is sent again,
        with the same message id (one is assigned when none was given), in order,
        after a back-off; refused is never sent again. Its confirm resolves once,
        with the final outcome and ``outcome.attempts``; each attempt waits
        ``confirm_timeout`` for its answer. ``sequence=True`` stamps
        ``ackbridge-producer`` and ``ackbridge-seq`` (1, 2, 3...) on every message
        for consumers' loss detection (``consume(on_gap=...)``).
        """

    def publish(self, destination: str, body: bytes, **options: Unpack[PublishOptions]) -> Confirm:
        """Publish through the connection's default publisher (see :meth:`Publisher.publish`)."""

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every publish of the default publisher has its outcome; False if
        *timeout* passed first."""

    def issue_ack(self, delivery: Any, label: str, status: int = 200, payload: Any = None, *,
                  reserved: bool = False) -> Confirm:
        """Send the labelled acknowledgement *label* for *delivery* to its publisher.

        Applications use :meth:`Delivery.acknowledge`; ``reserved=True`` lets an
        integration issue a reserved label it owns (the Spark source's
        ``spark-committed``)."""


class AsyncConnection(Protocol):
    @property
    def capabilities(self) -> Capabilities: ...
    async def close(self, *, leave_unsettled: bool = False) -> None:
        """See :meth:`ackbridge.Connection.close`."""

    async def settle_handles(self, handles: Iterable[str], verb: WireVerb = ...) -> BatchResult:
        """See :meth:`ackbridge.Connection.settle_handles`."""

    async def declare_queue(self, name: str, *, dead_letter: bool = True) -> None:
        """See :meth:`ackbridge.Connection.declare_queue`."""

    async def delete_queue(self, name: str, *, dead_letter: bool = True) -> None:
        """See :meth:`ackbridge.Connection.delete_queue`."""

    async def purge_queue(self, name: str) -> int | None:
        """See :meth:`ackbridge.Connection.purge_queue`."""

    async def inspect_queue(self, name: str) -> QueueInfo:
        """See :meth:`ackbridge.Connection.inspect_queue`."""

    async def consume(self, source: str, *, handler: Any = None,
                      **options: Unpack[ConsumeOptions]) -> AsyncConsumer:
        """Subscribe to *source*; see :meth:`ackbridge.sync.connection.Connection.consume`. With
        *handler*, it is called with each delivery, one at a time in arrival order, on
        the event loop, and what it returns is awaited if it is awaitable."""

    def publisher(self, **options: Unpack[PublisherOptions]) -> AsyncPublisher:
        """See :meth:`ackbridge.Connection.publisher`."""

    async def publish(self, destination: str, body: bytes, **options: Unpack[PublishOptions]) -> AsyncConfirm:
        """Publish through the connection's default publisher (see :meth:`AsyncPublisher.publish`)."""

    async def flush(self, timeout: float | None = None) -> bool:
        """See :meth:`ackbridge.Connection.flush`."""

    async def issue_ack(self, delivery: Any, label: str, status: int = 200, payload: Any = None, *,
                        reserved: bool = False) -> AsyncConfirm:
        """See :meth:`ackbridge.sync.connection.Connection.issue_ack`."""


#: (contract, sync face class name, async contract, async face class name)
PAIRS: tuple[tuple[type, type], ...] = (
    (Connection, AsyncConnection),
    (Consumer, AsyncConsumer),
    (Delivery, AsyncDelivery),
    (Publisher, AsyncPublisher),
    (Confirm, AsyncConfirm),
)
