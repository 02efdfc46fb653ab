"""The I/O-free half of publishing, shared by the sync and async publishers.

Checking a publish's arguments, building the message to send, the guaranteed-
publishing decisions (stamp, send again, give up) and which confirms have
expired live here once; :mod:`ackbridge.sync.publisher` and
:mod:`ackbridge.aio.publisher` keep only their locks, waits and awaits.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ackbridge import contract
from ackbridge.engine import plans
from ackbridge.errors import AckbridgeError, ConnectionLostError, InvalidLabelError, InvalidOptionError
from ackbridge.kernel import guaranteed
from ackbridge.kernel.backoff import Backoff
from ackbridge.kernel.labels import BROKER_PERSISTED, REQUESTED_ACKS_HEADER, AckCollector
from ackbridge.keywords import PublishOptions
from ackbridge.messages import STATUS_UNKNOWN, ConfirmOutcome, OutboundMessage, refused, unknown, unsent

if TYPE_CHECKING:
    from ackbridge.engine.connection import ConnectionBase

_INT64 = (-(2**63), 2**63 - 1)
_HEADER_SCALARS = (str, bytes, bool, int, float, type(None))


_PUBLISH_KEYS = frozenset(PublishOptions.__annotations__)
#: Options that need no check beyond their presence: a publish giving only these
#: (and a bytes body) takes the short path, the common case of a message id.
#: Options that are OutboundMessage fields of the same name, passed as they are on the short path.
_PLAIN_KEYS = frozenset({"message_id", "correlation_id", "reply_to", "content_type", "persistent"})


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


def build_message(body: object, options: PublishOptions, labels: tuple[str, ...] | None,
                  inbox: str | None) -> OutboundMessage:
    """The message for ``publish(destination, body, **options)``, every argument
    checked; *labels* are the checked ``requested_acks``, *inbox* the reply address."""
    if labels is None and type(body) is bytes and options.keys() <= _PLAIN_KEYS:
        # Short path (the common case): nothing to check beyond the body's type.
        return OutboundMessage(body, {}, **options)  # type: ignore[misc, arg-type]  # keys: _PLAIN_KEYS
    unknown_keys = options.keys() - _PUBLISH_KEYS
    if unknown_keys:
        raise InvalidOptionError(f"publish() got unknown argument(s) {sorted(unknown_keys)}; "
                                 f"known: {', '.join(sorted(_PUBLISH_KEYS))}")
    headers = check_headers(options.get("headers"))
    correlation_id, reply_to = options.get("correlation_id"), options.get("reply_to")
    if labels is not None:
        custom = [label for label in labels if label != BROKER_PERSISTED]
        if correlation_id is None:
            correlation_id = uuid.uuid4().hex
        if custom:
            headers[REQUESTED_ACKS_HEADER] = ",".join(custom)
            reply_to = inbox
    return OutboundMessage(check_body(body), headers, options.get("message_id"), correlation_id, reply_to,
                           options.get("content_type"), None, options.get("persistent", True))


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


class ConfirmBase(contract.ConfirmView):
    """What both faces' confirms hold: which publish it answers, its outcome once
    known, when its wait ends, its retransmission record and its labelled-ack waiter."""

    __slots__ = ("_acks", "_attempts", "_callbacks", "_deadline", "_destination", "_outcome", "_publisher", "_span",
                 "correlation_id", "message_id", "seq")
    _deadline: float
    #: Set by the publisher while metrics or traces are recorded.
    _destination: str
    _span: Any

    def __init__(self, publisher: Any, seq: int, message: OutboundMessage,
                 attempts: guaranteed.Attempts | None) -> None:
        # The sync face's constructor as it is (one call per publish, the hot path):
        # _deadline is set once the window has room; _destination and _span only by
        # _observe, when something records them.
        self.seq = seq
        self.message_id = message.message_id
        self.correlation_id = message.correlation_id
        self._attempts = attempts
        self._acks: Any = None
        self._publisher = publisher
        self._outcome: ConfirmOutcome | None = None
        #: The sync face's done-callbacks (the async face's future keeps its own).
        self._callbacks: list[Callable[[Any], None]] | None = None

    def done(self) -> bool:
        return self._outcome is not None

    @property
    def outcome(self) -> ConfirmOutcome | None:
        return self._outcome

    def __repr__(self) -> str:
        return confirm_repr(self)

    def _requested_acks(self) -> Any:
        """The labelled-ack waiter, for ``wait_acks``; InvalidLabelError when none was asked."""
        if self._acks is None:
            raise InvalidLabelError("this publish requested no acknowledgements (use requested_acks=...)")
        return self._acks


class PublisherBase:
    """What the sync and async publishers share: the window, the confirm timeout
    and the guaranteed-publishing state (retransmission, sequence numbers)."""

    window: int
    retransmitted: int

    def __init__(self, connection: ConnectionBase[Any, Any, Any], window: int, confirm_timeout: float,
                 guarantee: guaranteed.Guarantee | None = None) -> None:
        self._connection = connection
        self._guarantee = guarantee if guarantee is not None and guarantee.active else None
        self._numbers = itertools.count(1)
        self._backoff = Backoff(connection.settings.reconnect_max_delay)
        #: Publishes sent more than once (retransmit=True).
        self.retransmitted = 0
        self.window = window
        self._confirm_timeout = confirm_timeout
        self._pending: dict[int, Any] = {}
        #: Guaranteed publishes whose last attempt was unknown, oldest first, to send again.
        self._retry: deque[Any] = deque()
        #: The retry batch being sent again right now: each leaves it for ``_pending`` in
        #: one step (``_next_resend``), so flush() and the window count it throughout.
        self._resending: deque[Any] = deque()
        #: Records outcomes and spans; None when neither is configured.
        self._observer = connection._observer
        if self._observer is not None:
            self._observer.track_publisher(self)
        self._init_waiting()

    def _init_waiting(self) -> None:
        """Set up the face's own waiting (locks and conditions, or asyncio events)."""
        raise NotImplementedError

    @property
    def in_flight(self) -> int:
        """Publishes without an outcome yet (waiting for a confirm or a retransmission)."""
        return len(self._pending) + len(self._retry) + len(self._resending)

    def _labels(self, options: PublishOptions) -> tuple[str, ...] | None:
        """The checked ``requested_acks`` (None: none asked), checked before a reply inbox opens."""
        requested = options.get("requested_acks")
        if requested is None:
            return None
        return plans.check_requested(self._connection.capabilities, requested)

    def _guaranteed(self, destination: str, message: OutboundMessage
                    ) -> tuple[OutboundMessage, guaranteed.Attempts | None]:
        """*message* stamped for loss detection and, with ``retransmit``, its attempt
        record (call only when the publisher has a guarantee)."""
        guarantee = self._guarantee
        assert guarantee is not None
        message = guaranteed.stamp(guarantee, next(self._numbers), message)
        if not guarantee.retransmit:
            return message, None
        return message, guaranteed.Attempts(destination, message, time.monotonic() + guarantee.deadline)

    def _observe(self, confirm: ConfirmBase, destination: str, message: OutboundMessage) -> None:
        """Note where *confirm*'s publish goes and, with tracing on, start its span and
        put the trace context into *message* (call before sending it)."""
        observer = self._observer
        if observer is None:
            return
        confirm._destination = destination
        confirm._span = None
        if observer.tracer is not None:
            from ackbridge.observability.tracing import start_publish

            confirm._span = start_publish(observer.tracer, destination, message,
                                          observer.send_attributes(destination))

    def _resolved(self, seq: int, outcome: ConfirmOutcome) -> None:
        raise NotImplementedError

    def _resolved_batch(self, outcomes: Sequence[tuple[int, ConfirmOutcome]]) -> None:
        """Many confirms of this publisher at once (``TransportEvents.confirm_batch``)."""
        for seq, outcome in outcomes:
            self._resolved(seq, outcome)

    def _expire(self) -> None:
        """Resolve (or schedule again) every confirm whose wait has ended."""
        raise NotImplementedError

    def _flush_wait(self, end: float | None) -> float | None:
        """How long flush() waits next; None once nothing is in flight or *end* has
        passed. Confirms past their deadline are expired on the way."""
        while self._pending or self._retry or self._resending:
            wait = next_flush_wait(self._oldest()._deadline, end, time.monotonic())
            if wait != 0.0:
                return wait
            self._expire()
        return None

    def _send_failed(self, seq: int, exc: AckbridgeError, again: bool) -> None:
        """The transport would not send publish *seq*: resolve it, and raise *exc* to
        the caller of a first send, except for a lost connection (the outage rule of
        :mod:`ackbridge.errors`: publish does not raise, its confirm says unknown)."""
        if isinstance(exc, ConnectionLostError):
            self._resolved(seq, not_sent(exc))
            return
        self._resolved(seq, send_failed(exc, again))
        if not again:
            raise exc

    def _final(self, confirm: ConfirmBase, outcome: ConfirmOutcome) -> ConfirmOutcome | None:
        """The outcome to resolve *confirm* with; None when it is to be sent again."""
        attempts = confirm._attempts
        if attempts is None or self._guarantee is None:
            final: ConfirmOutcome | None = outcome
        else:
            final = guaranteed.decide(attempts, outcome, time.monotonic(), self._guarantee.max_attempts)
            if outcome.attempts and attempts.attempts > 1:
                # Counted when its outcome comes: a send that never left the client is no retransmission.
                self.retransmitted += 1
                if self._observer is not None:
                    self._observer.retransmitted(attempts.destination)
            if final is not None and final.status is not STATUS_UNKNOWN:
                self._backoff.reset()  # the broker answers again: retransmit promptly next time
        if final is not None and self._observer is not None:
            self._observed(confirm, final)
        return final

    def _observed(self, confirm: ConfirmBase, final: ConfirmOutcome) -> None:
        """Record *confirm*'s final outcome: the counter, the broker's answer time
        (its last send was ``confirm_timeout`` before its deadline) and the span."""
        assert self._observer is not None
        answered = final.status is not STATUS_UNKNOWN
        self._observer.published(confirm._destination, final,
                                 confirm._deadline - self._confirm_timeout if answered else None)
        span, confirm._span = confirm._span, None
        if span is not None:
            from ackbridge.observability.tracing import end_publish

            end_publish(span, final)

    def _due_retry(self, confirm: ConfirmBase) -> None:
        """Note that *confirm* waits for a retransmission: result() and flush() wait
        on its deadline, which the resender gives up before."""
        assert confirm._attempts is not None
        confirm._deadline = confirm._attempts.give_up_at + self._confirm_timeout

    def _next_attempt(self, confirm: ConfirmBase, seq: int, now: float) -> guaranteed.Attempts | None:
        """Register one more send of *confirm* under the new *seq* as pending (its outcome
        counts it, see :func:`guaranteed.decide`); None when its retransmit deadline has
        passed (resolve it unsent instead)."""
        attempts = confirm._attempts
        assert attempts is not None
        if now >= attempts.give_up_at:
            return None
        confirm._deadline = now + self._confirm_timeout
        self._pending[seq] = confirm
        return attempts

    def _start_resend(self) -> None:
        """Make every publish waiting for a retransmission the batch to send now
        (taken one by one with :meth:`_next_resend`, in the order first published)."""
        self._resending.extend(self._retry)
        self._retry.clear()

    def _next_resend(self, seq: int, now: float) -> tuple[Any, guaranteed.Attempts | None] | None:
        """The next publish of the batch, moved to pending under *seq* (see
        :meth:`_next_attempt`), with its attempts (None: its deadline passed, resolve it
        unsent); None once the batch is done. Taken and registered in one step: a
        publish between the batch and pending would let flush() return without it."""
        if not self._resending:
            return None
        confirm = self._resending.popleft()
        return confirm, self._next_attempt(confirm, seq, now)

    def _take_expired(self, now: float) -> list[tuple[Any, ConfirmOutcome]]:
        """Remove every confirm whose wait has ended, with the outcome to give it."""
        done: list[tuple[Any, ConfirmOutcome]] = []
        for waiting in (self._retry, self._resending):
            for confirm in [c for c in waiting if c._deadline <= now]:
                waiting.remove(confirm)
                done.append((confirm, unsent("not sent again before retransmit_deadline")))
        for seq, confirm in [(s, c) for s, c in self._pending.items() if c._deadline <= now]:
            del self._pending[seq]
            self._connection._publishers.pop(seq, None)
            done.append((confirm, unknown(NO_ANSWER)))
        return done

    def _oldest(self) -> Any:
        """The confirm that will time out first (pending before waiting to be sent again)."""
        if self._pending:
            return next(iter(self._pending.values()))
        return self._retry[0] if self._retry else self._resending[0]


# ---- send failures, confirm waits ------------------------------------------------------
NO_ANSWER = "no answer from the broker within confirm_timeout"


def send_failed(exc: Exception, again: bool) -> ConfirmOutcome:
    """The outcome of a publish the transport would not send (the connection is
    not lost): unknown for a first send (the caller also gets the error), refused
    for a retransmission (sending it yet again would fail the same way)."""
    return refused(f"not sent again: {exc}") if again else unknown(str(exc))


def not_sent(exc: Exception) -> ConfirmOutcome:
    """The outcome of a publish made during an outage: unknown, nothing was sent."""
    return unsent(f"not sent: {exc}")


def confirm_repr(confirm: Any) -> str:
    outcome = confirm.outcome
    state = outcome.status.value if outcome else "pending"
    return f"<{type(confirm).__name__} seq={confirm.seq} id={confirm.message_id!r} {state}>"


def wait_limit(deadline: float, timeout: float | None) -> float:
    """When a wait for labelled acks ends: the request's deadline, or *timeout* from now."""
    return deadline if timeout is None else min(deadline, time.monotonic() + timeout)


def left_to_wait(collector: AckCollector, limit: float) -> float | None:
    """Seconds left to wait for *collector*; None once it is complete or *limit* passed."""
    if collector.complete:
        return None
    left = limit - time.monotonic()
    return left if left > 0 else None
