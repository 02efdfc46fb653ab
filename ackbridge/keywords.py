"""The keyword arguments of ``consume()``, ``publisher()`` and ``publish()``,
declared once for both faces.

Both faces take them as ``**options: Unpack[...]``, so a type checker and an
IDE see every name and type, and a name that is not here is refused at run
time with a "did you mean".
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any, Literal, TypedDict

from ackbridge.errors import InvalidOptionError
from ackbridge.kernel.guaranteed import GapHandler


class ConsumeOptions(TypedDict, total=False):
    """``consume(source, handler=None, **options)`` (unset: the connection's value)."""

    #: Unsettled deliveries the broker may hand this consumer.
    prefetch: int | None
    #: Flush wire acks after this many acks; ``"manual"``: only on flush(), settle_batch() or close().
    conflate_count: int | Literal["manual"] | None
    #: Flush wire acks at least this often, in ms (0: no timer).
    conflate_ms: float | None
    #: Dead-letter a message delivered more often than this (None: no limit).
    max_deliveries: int | None
    #: Ack and drop a delivery whose message id was acked within the last N acked ids.
    dedupe_window: int | None
    #: Loss detection on sequence-stamped messages: "warn", "raise" or a callable(producer_id, missing).
    on_gap: str | GapHandler | None


class PublisherOptions(TypedDict, total=False):
    """``publisher(**options)`` (unset window / confirm_timeout: the connection's value)."""

    #: Unconfirmed publishes before ``publish()`` waits.
    window: int | None
    #: Seconds before an attempt's confirm is reported unknown.
    confirm_timeout: float | None
    #: Send a publish whose outcome is unknown again, with the same message id, in
    #: order, after a back-off; refused is never sent again.
    retransmit: bool
    #: Sends of one message at most (retransmit).
    max_attempts: int
    #: Seconds after the first send when retransmission gives up.
    retransmit_deadline: float
    #: Stamp ``ackbridge-producer`` / ``ackbridge-seq`` for consumers' loss detection.
    sequence: bool
    #: The producer id stamped (default: a random one per publisher).
    producer_id: str | None


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


def check_keywords(call: str, given: Mapping[str, Any], declared: type) -> None:
    """Raise InvalidOptionError (with a "did you mean") for a name *declared* lacks."""
    known = declared.__annotations__
    for name in given:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise InvalidOptionError(f"{call} got an unknown argument {name!r}{hint} "
                                     f"(known: {', '.join(sorted(known))})")
