"""The header set of the redelivery policy, one for every broker (docs/failure-policy.md).

A retried copy and a dead-lettered copy carry the same names, so a consumer of the
dead-letter queue (through ackbridge or a raw client: pika's ``properties.headers``,
a NATS ``msg.headers``...) reads why a message ended there. Times are RFC 3339 UTC
text and the attempt count an integer (text with a type tag on MQTT and NATS, which
ackbridge reads back as an integer).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ackbridge.kernel.guaranteed import PRODUCER_HEADER, SEQUENCE_HEADER
from ackbridge.urls import redact

#: The attempt this delivery is (1: the first; the dead-lettered copy: the attempts made).
#: Not ``ackbridge-attempt``: the MQTT plugin reserves that name for its emulated requeue
#: and strips it from what it delivers.
ATTEMPT = "ackbridge-retry-attempt"
#: The queue the message was consumed from when it first failed.
ORIGINAL_QUEUE = "ackbridge-original-queue"
#: When the first and the latest attempt failed (RFC 3339, UTC).
FIRST_FAILURE = "ackbridge-first-failure"
LAST_FAILURE = "ackbridge-last-failure"
#: ``ExceptionType: message`` of the latest failure, bounded and with URL passwords hidden.
FAILURE_REASON = "ackbridge-failure-reason"
#: On a copy in a delay queue: when it may go back to the original queue (RFC 3339, UTC).
RETRY_DUE = "ackbridge-retry-due"
#: The first delivery's message id. Each copy has an id of its own (:func:`copy_id`): a
#: broker that de-duplicates by message id (JetStream's ``Nats-Msg-Id``) would drop a
#: copy carrying the original's id, and a ``dedupe_window`` would too.
ORIGINAL_ID = "ackbridge-original-id"

#: Every name above (a copy drops the old values of these before writing new ones).
ALL = (ATTEMPT, ORIGINAL_QUEUE, FIRST_FAILURE, LAST_FAILURE, FAILURE_REASON, RETRY_DUE, ORIGINAL_ID)

#: The longest failure message kept (characters; the type name comes on top).
REASON_CHARS = 200


def timestamp(epoch: float) -> str:
    """*epoch* seconds as RFC 3339 UTC text, millisecond precision."""
    moment = datetime.datetime.fromtimestamp(epoch, datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def epoch_of(text: str) -> float:
    """The epoch seconds of RFC 3339 text written by :func:`timestamp`."""
    return datetime.datetime.fromisoformat(text).timestamp()


def describe(exc: BaseException) -> str:
    """``Type: message`` for the reason header: the message cut to :data:`REASON_CHARS`
    and run through :func:`ackbridge.urls.redact`, so a URL password never travels.
    A message is still the application's text: one carrying another secret should
    not be raised from a handler."""
    text = redact(" ".join(str(exc).split()))
    if len(text) > REASON_CHARS:
        text = text[:REASON_CHARS - 1] + "…"
    name = type(exc).__qualname__
    return f"{name}: {text}" if text else name


def seconds_until(due: object, now: float) -> float:
    """Seconds from *now* until the RETRY_DUE text *due* (0: due, or unreadable)."""
    if not isinstance(due, str):
        return 0.0
    try:
        return max(0.0, epoch_of(due) - now)
    except ValueError:
        return 0.0  # not ours, or mangled: move it now rather than hold it


def attempt_of(headers: Mapping[str, Any]) -> int:
    """The attempt a delivery with *headers* is (1: never retried, or another producer's
    unreadable header: counting starts here). Alone, for the per-delivery path: a
    delivery that does not fail needs nothing else from the header set."""
    raw = headers.get(ATTEMPT)
    if raw is None:
        return 1
    try:
        return max(1, int(raw))
    except (TypeError, ValueError):
        return 1


@dataclass(frozen=True)
class RetryState:
    """What a delivery's headers say about its earlier attempts."""

    attempt: int
    original_queue: str | None = None
    first_failure: str | None = None
    original_id: str | None = None

    @classmethod
    def read(cls, headers: Mapping[str, Any]) -> RetryState:
        """The state in *headers* (a message never retried: attempt 1, nothing else)."""
        attempt = attempt_of(headers)
        queue, first, ident = headers.get(ORIGINAL_QUEUE), headers.get(FIRST_FAILURE), headers.get(ORIGINAL_ID)
        return cls(attempt, queue if isinstance(queue, str) else None, first if isinstance(first, str) else None,
                   ident if isinstance(ident, str) else None)

    def failed(self, queue: str, original_id: str, exc: BaseException, now: float) -> dict[str, Any]:
        """The policy's headers after this attempt failed with *exc* at *now*."""
        last = timestamp(now)
        return {
            ORIGINAL_ID: original_id,
            ATTEMPT: self.attempt,
            ORIGINAL_QUEUE: self.original_queue or queue,
            FIRST_FAILURE: self.first_failure or last,
            LAST_FAILURE: last,
            FAILURE_REASON: describe(exc),
        }


def copy_id(original_id: str, step: str) -> str:
    """The message id of a copy: ``<original id>~<step>`` (the next attempt's number, or
    ``dead``). The same step of the same message always gets the same id, so a copy
    made twice is recognised (and a de-duplicating broker stores it once)."""
    return f"{original_id}~{step}"


#: Dropped from a copy: a copy is not a new numbered publish (loss detection would see
#: its number again), and the policy's own are written afresh.
_NOT_CARRIED = frozenset((*ALL, PRODUCER_HEADER, SEQUENCE_HEADER))


def carried(headers: Mapping[str, Any], policy: Mapping[str, Any]) -> dict[str, Any]:
    """The application's *headers* with the policy's replaced by *policy*."""
    merged = {k: v for k, v in headers.items() if k not in _NOT_CARRIED}
    merged.update(policy)
    return merged
