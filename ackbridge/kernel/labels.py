"""Labelled acknowledgement requests, after Eclipse Ditto's model.

A publish may request acknowledgements by label. ``broker-persisted`` is
answered by the publish confirm; every other label is issued downstream by a
consumer calling ``delivery.acknowledge(label, status, payload)``, which sends
a reply to the message's reply address carrying its correlation id. The
publisher receives one :class:`AggregatedAcks`: a status per label (2xx ok,
408 when the label timed out, 4xx/5xx as issued) and an overall status (200
when every label succeeded, 424 when any failed).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ackbridge.errors import InvalidLabelError
from ackbridge.messages import ConfirmOutcome, ConfirmStatus, InboundMessage, OutboundMessage

BROKER_PERSISTED = "broker-persisted"
SPARK_COMMITTED = "spark-committed"
#: Labels issued by ackbridge itself; a consumer's acknowledge() may not use them.
RESERVED_LABELS = frozenset({BROKER_PERSISTED, SPARK_COMMITTED})

REQUESTED_ACKS_HEADER = "ackbridge-requested-acks"
ACK_LABEL_HEADER = "ackbridge-ack-label"
ACK_STATUS_HEADER = "ackbridge-ack-status"

_LABEL = re.compile(r"^[A-Za-z0-9_:-]{3,100}$")

OK = 200
TIMEOUT = 408
FAILED_DEPENDENCY = 424


def validate_label(label: object, *, issuing: bool = False, internal: bool = False) -> str:
    if not isinstance(label, str):
        raise InvalidLabelError(f"acknowledgement label must be a string, not {type(label).__name__}")
    if not _LABEL.match(label):
        raise InvalidLabelError(
            f"acknowledgement label {label[:120]!r} is invalid: use 3-100 characters of "
            "letters, digits, '-', '_' or ':'"
        )
    if issuing and not internal and label in RESERVED_LABELS:
        raise InvalidLabelError(f"acknowledgement label {label!r} is reserved for ackbridge itself")
    return label


def validate_status(status: object) -> int:
    if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 599:
        raise InvalidLabelError(f"acknowledgement status must be an HTTP status code (100-599), not {status!r}")
    return status


def requested_labels(headers: Mapping[str, Any]) -> tuple[str, ...]:
    raw = headers.get(REQUESTED_ACKS_HEADER)
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    if not isinstance(raw, str) or not raw:
        return ()
    return tuple(part for part in raw.split(",") if part)


def confirm_status(outcome: ConfirmOutcome) -> int:
    """Map a publish confirm to the ``broker-persisted`` label's status."""
    if outcome.status is ConfirmStatus.CONFIRMED:
        return OK
    if outcome.status is ConfirmStatus.REFUSED:
        return 400
    return 503


def build_reply(correlation_id: str, label: str, status: int, payload: Any) -> OutboundMessage:
    body = json.dumps(payload).encode() if payload is not None else b""
    return OutboundMessage(
        body=body,
        headers={ACK_LABEL_HEADER: label, ACK_STATUS_HEADER: str(status)},
        correlation_id=correlation_id,
        content_type="application/json",
        persistent=False,
    )


@dataclass(frozen=True)
class LabelAck:
    label: str
    status: int
    payload: Any = None

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


def parse_reply(message: InboundMessage) -> LabelAck | None:
    label = message.headers.get(ACK_LABEL_HEADER)
    status = message.headers.get(ACK_STATUS_HEADER)
    if isinstance(label, bytes):
        label = label.decode("utf-8", "replace")
    if isinstance(status, bytes):
        status = status.decode("ascii", "replace")
    try:
        code = int(status)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    if not isinstance(label, str):
        return None
    try:
        payload = json.loads(message.body) if message.body else None
    except ValueError:
        payload = message.body.decode("utf-8", "replace")
    return LabelAck(label, code, payload)


@dataclass(frozen=True)
class AggregatedAcks:
    correlation_id: str
    acks: Mapping[str, LabelAck]

    @property
    def status(self) -> int:
        return OK if all(a.ok for a in self.acks.values()) else FAILED_DEPENDENCY

    @property
    def ok(self) -> bool:
        return self.status == OK


@dataclass
class AckCollector:
    """Collects the labels one publish requested, until all arrive or time runs out."""

    correlation_id: str
    labels: tuple[str, ...]
    deadline: float
    received: dict[str, LabelAck] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return all(label in self.received for label in self.labels)

    def add(self, ack: LabelAck) -> bool:
        """Record *ack*; True if it was requested and new (first answer wins)."""
        if ack.label not in self.labels or ack.label in self.received:
            return False
        self.received[ack.label] = ack
        return True

    def result(self) -> AggregatedAcks:
        acks = {
            label: self.received.get(label, LabelAck(label, TIMEOUT, "no acknowledgement before the timeout"))
            for label in self.labels
        }
        return AggregatedAcks(self.correlation_id, acks)


def check_request(labels: Iterable[str]) -> tuple[str, ...]:
    seen: list[str] = []
    for label in labels:
        validate_label(label)
        if label not in seen:
            seen.append(label)
    if not seen:
        raise InvalidLabelError("requested_acks must name at least one label")
    return tuple(seen)
