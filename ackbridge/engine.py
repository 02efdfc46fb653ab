"""The client engine: every I/O-free decision of connection, consumer and
publisher, written once for both faces.

:mod:`ackbridge.client` (threads) and :mod:`ackbridge.aclient` (asyncio) are
shells around these functions and classes: they add locks or awaits and do
the I/O, and share no private helpers with each other. Nothing here blocks,
awaits or touches a transport.
"""

from __future__ import annotations

import time
import uuid
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ackbridge import labels as labels_mod
from ackbridge.capabilities import Capabilities, Level, Verb
from ackbridge.errors import AckbridgeError, InvalidLabelError, InvalidOptionError
from ackbridge.guaranteed import ConsumerGuard, Guarantee, plan_guarantee
from ackbridge.keywords import ConsumeOptions, PublisherOptions, check_keywords
from ackbridge.labels import AckCollector, LabelAck, check_request
from ackbridge.messages import ConfirmOutcome, InboundMessage, WireSettle, WireVerb, refused, unknown, unsent
from ackbridge.options import CORE_OPTIONS, resolve_options
from ackbridge.settlement import Ledger, Record

if TYPE_CHECKING:
    from ackbridge.observability.metrics import ConnectionObserver

_CONSUMER_OPTIONS = ("prefetch", "conflate_count", "conflate_ms", "max_deliveries")
_PUBLISHER_OPTIONS = ("window", "confirm_timeout")
#: conflate_count of a manual-flush consumer: acks leave only on flush(),
#: settle_batch() or close() (the Spark source decides per committed batch).
MANUAL = "manual"
_NEVER = 2**62

# ---- options -----------------------------------------------------------------------
def _merged(base: Mapping[str, Any], names: Iterable[str], given: Mapping[str, Any]) -> dict[str, Any]:
    """Connection-level values of *names* overridden by the call's (None: not given)."""
    merged = {k: v for k, v in base.items() if k in names}
    merged.update({k: v for k, v in given.items() if k in names and v is not None})
    return merged


def plan_publisher(base: Mapping[str, Any], options: PublisherOptions) -> tuple[int, float, Guarantee]:
    """``publisher(**options)``'s window, confirm timeout and guarantee, checked."""
    check_keywords("publisher()", options, PublisherOptions)
    opts = resolve_options(CORE_OPTIONS, _merged(base, _PUBLISHER_OPTIONS, options), owner="publisher()")
    guarantee = plan_guarantee(retransmit=options.get("retransmit", False),
                               max_attempts=options.get("max_attempts", 5),
                               retransmit_deadline=options.get("retransmit_deadline", 120.0),
                               sequence=options.get("sequence", False), producer_id=options.get("producer_id"))
    return opts["window"], opts["confirm_timeout"], guarantee


# ---- consumers ---------------------------------------------------------------------
@dataclass(frozen=True)
class ConsumerPlan:
    """Everything consume() decides before it subscribes."""

    subscription: str
    ledger: Ledger
    prefetch: int
    conflate_ms: float
    guard: ConsumerGuard | None


def plan_consumer(capabilities: Capabilities, base: Mapping[str, Any], source: str, handler: object,
                  options: ConsumeOptions, observer: ConnectionObserver | None = None) -> ConsumerPlan:
    """What ``consume(source, handler=..., **options)`` subscribes with, checked."""
    check_keywords("consume()", options, ConsumeOptions)
    if handler is not None and not callable(handler):
        raise InvalidOptionError(f"handler must be callable, not {type(handler).__name__}")
    if handler is not None and options.get("on_gap") == "raise":
        # The error would reach get(), which a handler consumer never calls.
        raise InvalidOptionError('on_gap="raise" needs a consumer read with get(); with a handler, '
                                 'pass on_gap="warn" or a callable on_gap(producer_id, missing)')
    merged = _merged(base, _CONSUMER_OPTIONS, options)
    manual = merged.get("conflate_count") == MANUAL
    if manual:
        del merged["conflate_count"]
    opts = resolve_options(CORE_OPTIONS, merged, owner="consume()")
    if manual:
        opts["conflate_count"] = _NEVER
    capabilities.check_prefetch(opts["prefetch"])
    if opts["max_deliveries"] is not None:
        capabilities.require(Verb.DELIVERY_COUNT)
        capabilities.require(Verb.REJECT)
    subscription = f"sub-{uuid.uuid4().hex[:12]}"
    ledger = Ledger(subscription, capabilities, conflate_count=opts["conflate_count"],
                    conflate_ms=opts["conflate_ms"], max_deliveries=opts["max_deliveries"],
                    observer=observer.subscription(source) if observer is not None else None)
    dedupe_window, on_gap = options.get("dedupe_window"), options.get("on_gap")
    guard = (ConsumerGuard(dedupe_window, on_gap, source)
             if dedupe_window is not None or on_gap is not None else None)
    return ConsumerPlan(subscription, ledger, opts["prefetch"], opts["conflate_ms"], guard)


def require_verb(capabilities: Capabilities, verb: WireVerb) -> None:
    """Raise UnsupportedVerbError before the ledger is touched."""
    if verb is WireVerb.REQUEUE:
        capabilities.require(Verb.REQUEUE)
    elif verb is WireVerb.REJECT:
        capabilities.require(Verb.REJECT)


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


@dataclass
class BatchResult:
    """What :meth:`Consumer.settle_batch` did."""

    settled: int = 0
    #: Refused before anything was sent: stale (the broker redelivers) or settled before.
    refused: int = 0
    cumulative: bool = False


def cumulative_fits(ledger: Ledger, capabilities: Capabilities, records: Sequence[Record]) -> bool:
    """True when one cumulative ack of the last record settles exactly *records*."""
    if len(records) < 2 or capabilities.support(Verb.CUMULATIVE_ACK).level is Level.UNSUPPORTED:
        return False
    last = records[-1]
    if last.stale or records[0].message.generation != last.message.generation:
        return False
    return ledger.undecided_through(last) == {r.seq for r in records}


# ---- publishing --------------------------------------------------------------------
def check_requested(capabilities: Capabilities, requested: Iterable[str] | None) -> tuple[str, ...] | None:
    """Check labels and the capability before any reply inbox is opened."""
    if requested is None:
        return None
    checked = check_request(requested)
    capabilities.require(Verb.LABELLED_ACKS)
    return checked


def needs_inbox(requested: Iterable[str] | None) -> bool:
    return requested is not None and any(label != labels_mod.BROKER_PERSISTED for label in requested)


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


# ---- labelled acknowledgements -----------------------------------------------------
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

