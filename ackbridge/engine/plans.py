"""The engine's plans: what a consumer and a publisher will be, decided from the
connection's options and the capability table before anything is opened
(option merging, guarantees, labelled-ack requests, verbs the broker must have).

Nothing here blocks, awaits or touches a transport; :mod:`ackbridge.sync` and
:mod:`ackbridge.aio` call these and do the I/O.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ackbridge.capabilities import Capabilities, Verb
from ackbridge.errors import InvalidOptionError
from ackbridge.kernel import labels as labels_mod
from ackbridge.kernel.guaranteed import ConsumerGuard, Guarantee, plan_guarantee
from ackbridge.kernel.labels import check_request
from ackbridge.kernel.settlement import Ledger
from ackbridge.keywords import ConsumeOptions, PublisherOptions, check_keywords
from ackbridge.messages import WireVerb
from ackbridge.options import CORE_OPTIONS, resolve_options

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


def check_requested(capabilities: Capabilities, requested: Iterable[str] | None) -> tuple[str, ...] | None:
    """Check labels and the capability before any reply inbox is opened."""
    if requested is None:
        return None
    checked = check_request(requested)
    capabilities.require(Verb.LABELLED_ACKS)
    return checked


def needs_inbox(requested: Iterable[str] | None) -> bool:
    return requested is not None and any(label != labels_mod.BROKER_PERSISTED for label in requested)
