"""I/O-free pieces shared by the sync and async clients."""

from __future__ import annotations

import itertools
import logging
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from ackbridge.backoff import Backoff
from ackbridge.capabilities import Capabilities, Verb
from ackbridge.engine import AckBook
from ackbridge.errors import AckbridgeError, InvalidOptionError
from ackbridge.guaranteed import ConsumerGuard, Guarantee
from ackbridge.labels import BROKER_PERSISTED, REQUESTED_ACKS_HEADER, check_request, requested_labels
from ackbridge.messages import InboundMessage, OutboundMessage, WireVerb
from ackbridge.settlement import Ledger, Record, State
from ackbridge.transport import TransportBase
from ackbridge.urls import BrokerURL

log = logging.getLogger("ackbridge")

_INT64 = (-(2**63), 2**63 - 1)
_HEADER_SCALARS = (str, bytes, bool, int, float, type(None))


def check_headers(headers: Mapping[str, Any] | None) -> dict[str, Any]:
    """Validate header names and values; every protocol can carry what passes."""
    if headers is None:
        return {}
    if not isinstance(headers, Mapping):
        raise InvalidOptionError(f"headers must be a mapping, not {type(headers).__name__}")
    checked: dict[str, Any] = {}
    for key, value in headers.items():
        if not isinstance(key, str) or not key:
            raise InvalidOptionError(f"header names must be non-empty strings, not {key!r:.80}")
        if len(key.encode("utf-8", "surrogatepass")) > 255:
            raise InvalidOptionError(f"header name {key[:40]!r}... is longer than 255 bytes")
        if not isinstance(value, _HEADER_SCALARS):
            raise InvalidOptionError(
                f"header {key!r} has a value of type {type(value).__name__}; "
                "use str, bytes, int, float, bool or None"
            )
        if isinstance(value, int) and not isinstance(value, bool) and not _INT64[0] <= value <= _INT64[1]:
            raise InvalidOptionError(f"header {key!r} holds an integer outside 64 bits")
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise InvalidOptionError(f"header {key!r} holds a string that is not valid Unicode") from None
        checked[key] = value
    return checked


def check_body(body: object) -> bytes:
    if isinstance(body, bytes):
        return body
    if isinstance(body, (bytearray, memoryview)):
        return bytes(body)
    raise InvalidOptionError(f"message body must be bytes, not {type(body).__name__} (encode it first)")


def next_flush_wait(oldest_deadline: float, end: float | None, now: float) -> float | None:
    """How long flush() waits for the next confirm: None once *end* has passed,
    0.0 when the oldest pending confirm must expire (as unknown) now."""
    if end is not None and now >= end:
        return None
    if oldest_deadline <= now:
        return 0.0
    left = oldest_deadline - now
    if end is not None:
        left = min(left, end - now)
    return min(left, 1.0)


class PublishOptions(TypedDict, total=False):
    """The keyword arguments of every ``publish`` (both faces, publishers and connections)."""

    headers: Mapping[str, Any] | None
    message_id: str | None
    correlation_id: str | None
    reply_to: str | None
    content_type: str | None
    #: False: the broker may keep it in memory only (faster, lost on a broker restart).
    persistent: bool
    #: Labelled acknowledgements to request from consumers (and ``broker-persisted``).
    requested_acks: Iterable[str] | None
    #: Seconds to wait for the requested labelled acknowledgements.
    ack_timeout: float


_PUBLISH_KEYS = frozenset(PublishOptions.__annotations__)


def prepare(body: object, options: PublishOptions, requested: tuple[str, ...] | None,
            inbox: str | None) -> PreparedPublish:
    """The message to send for ``publish(destination, body, **options)``; *requested*
    are the checked labels (``engine.check_requested``), *inbox* the reply address."""
    if not options and type(body) is bytes:
        # Hot path: nothing to validate beyond the body's type.
        return PreparedPublish(OutboundMessage(body, {}, None, None, None, None, None, True), (), ())
    unknown_keys = options.keys() - _PUBLISH_KEYS
    if unknown_keys:
        raise InvalidOptionError(f"publish() got unknown argument(s) {sorted(unknown_keys)}; "
                                 f"known: {', '.join(sorted(_PUBLISH_KEYS))}")
    return prepare_publish(
        body, headers=options.get("headers"), message_id=options.get("message_id"),
        correlation_id=options.get("correlation_id"), reply_to=options.get("reply_to"),
        content_type=options.get("content_type"), persistent=options.get("persistent", True),
        requested_acks=requested, inbox=inbox)


@dataclass(frozen=True)
class PreparedPublish:
    message: OutboundMessage
    #: Labels issued downstream (not broker-persisted), empty when none requested.
    custom_labels: tuple[str, ...]
    all_labels: tuple[str, ...]


def prepare_publish(
    body: object,
    *,
    headers: Mapping[str, Any] | None,
    message_id: str | None,
    correlation_id: str | None,
    reply_to: str | None,
    content_type: str | None,
    persistent: bool,
    requested_acks: Iterable[str] | None,
    inbox: str | None,
) -> PreparedPublish:
    if type(body) is bytes and not headers and requested_acks is None:
        # Hot path: nothing to validate beyond the body's type.
        return PreparedPublish(OutboundMessage(body, {}, message_id, correlation_id, reply_to, content_type,
                                               None, persistent), (), ())
    data = check_body(body)
    checked = check_headers(headers)
    labels: tuple[str, ...] = ()
    custom: tuple[str, ...] = ()
    if requested_acks is not None:
        labels = check_request(requested_acks)
        custom = tuple(label for label in labels if label != BROKER_PERSISTED)
        if correlation_id is None:
            correlation_id = uuid.uuid4().hex
        if custom:
            checked[REQUESTED_ACKS_HEADER] = ",".join(custom)
            reply_to = inbox
    message = OutboundMessage(
        body=data, headers=checked, message_id=message_id, correlation_id=correlation_id,
        reply_to=reply_to, content_type=content_type, persistent=persistent,
    )
    return PreparedPublish(message, custom, labels)


HANDLER_OWNS = ("this consumer hands every delivery to its handler; get() and iteration are for a consumer "
                 "made without handler=")
FAILED_VERB_TEXT = {
    WireVerb.REJECT: "rejected it (dead-lettered)",
    WireVerb.REQUEUE: "requeued it (this broker cannot reject)",
    None: "left it unsettled (settled already, stale, or neither reject nor requeue is possible)",
}


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
    log.exception("ackbridge handler raised on a message from %r (id %r); %s", source, delivery.message_id,
                  FAILED_VERB_TEXT[verb])
    return verb


class ConnectionBase:
    """What the sync and async connections share: their bookkeeping and the live
    capability table."""

    _transport: TransportBase

    def __init__(self, url: BrokerURL, options: Mapping[str, Any]) -> None:
        self.url = url
        self._options = dict(options)
        self._seq = itertools.count(1)
        self._inbox_address: str | None = None
        self._acks = AckBook()
        self._closed = False

    @property
    def capabilities(self) -> Capabilities:
        """The adapter's verb table; read live, as a transport may refine it on connect."""
        return self._transport.capabilities

    @property
    def broker(self) -> str:
        return self._transport.capabilities.broker


class PublisherBase:
    """What the sync and async publishers share: the window, the confirm timeout
    and the guaranteed-publishing state (retransmission, sequence numbers)."""

    _pending: Mapping[int, Any]
    _retry: Any

    def __init__(self, connection: ConnectionBase, window: int, confirm_timeout: float,
                 guarantee: Guarantee | None) -> None:
        self._connection = connection
        self._guarantee = guarantee if guarantee is not None and guarantee.active else None
        self._numbers = itertools.count(1)
        self._backoff = Backoff(connection._options.get("reconnect_max_delay", 10.0))
        #: Publishes sent more than once (retransmit=True).
        self.retransmitted = 0
        self.window = window
        self._confirm_timeout = confirm_timeout

    @property
    def in_flight(self) -> int:
        """Publishes without an outcome yet (waiting for a confirm or a retransmission)."""
        return len(self._pending) + len(self._retry)


class ConsumerBase:
    """What the sync and async consumers share."""

    def __init__(self, subscription: str, source: str, ledger: Ledger, guard: ConsumerGuard | None = None) -> None:
        self._guard = guard
        self.subscription = subscription
        self.source = source
        self._ledger = ledger
        self._closed = False
        #: Set when the connection failed for good: get() raises it once nothing is ready.
        self._failure: AckbridgeError | None = None

    @property
    def unsettled(self) -> int:
        """Deliveries of the live generation not settled on the wire yet."""
        return self._ledger.unsettled

    @property
    def duplicates_dropped(self) -> int:
        """Deliveries acked without being handed out: duplicates within ``dedupe_window``."""
        guard = self._guard
        return guard.dedupe.dropped if guard is not None and guard.dedupe is not None else 0

    @property
    def gaps(self) -> int:
        """Messages reported missing by loss detection (``on_gap``)."""
        guard = self._guard
        return guard.gaps.gaps if guard is not None and guard.gaps is not None else 0

    @property
    def missing(self) -> dict[str, list[int]]:
        """The sequence numbers reported missing, per producer id (``on_gap``)."""
        guard = self._guard
        return {k: list(v) for k, v in guard.gaps.missing.items()} if guard is not None and guard.gaps else {}

    @property
    def dead_lettered_by_policy(self) -> int:
        """Poison messages dead-lettered by ``max_deliveries`` instead of handed out."""
        return self._ledger.dead_lettered_by_policy


class DeliveryBase:
    """A received message with its settlement state. Twins add the verbs."""

    __slots__ = ("_record", "broker")

    def __init__(self, record: Record, broker: str) -> None:
        self._record = record
        self.broker = broker

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
        return self._record.message.source

    @property
    def routing_key(self) -> str | None:
        return self._record.message.routing_key

    @property
    def message_id(self) -> str | None:
        return self._record.message.message_id

    @property
    def correlation_id(self) -> str | None:
        return self._record.message.correlation_id

    @property
    def reply_to(self) -> str | None:
        return self._record.message.reply_to

    @property
    def content_type(self) -> str | None:
        return self._record.message.content_type

    @property
    def timestamp(self) -> float | None:
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
        return requested_labels(self._record.message.headers)

    @property
    def state(self) -> State:
        return self._record.state

    @property
    def stale(self) -> bool:
        """True once the connection generation it came on has ended."""
        return self._record.stale

    @property
    def settled(self) -> bool:
        return self._record.state is not State.PENDING

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.broker} source={self.source!r} id={self.message_id!r} "
            f"state={self.state.value} redelivered={self.redelivered} count={self.delivery_count}>"
        )
