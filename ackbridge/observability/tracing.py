"""Spans: a publish span whose W3C trace context (``traceparent``) travels in the
message's headers, and a settle span on the consumer linked to it.

Headers reach every broker through :class:`~ackbridge.messages.OutboundMessage`
``headers``: AMQP 0-9-1 and embedded headers, NATS headers, MQTT 5 user
properties, AMQP 1.0 application properties. MQTT 3.1.1 has no headers: its
settle spans carry no link.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.propagators.textmap import Getter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from ackbridge.messages import ConfirmOutcome, ConfirmStatus, OutboundMessage

_PROPAGATOR = TraceContextTextMapPropagator()
TRACE_HEADERS = ("traceparent", "tracestate")


class _HeaderGetter(Getter[Mapping[str, Any]]):
    """Reads trace context from received headers: any case, str or bytes values."""

    def get(self, carrier: Mapping[str, Any], key: str) -> list[str] | None:
        value = carrier.get(key)
        if value is None:
            for name, found in carrier.items():
                if name.lower() == key:
                    value = found
                    break
        if value is None:
            return None
        if isinstance(value, bytes | bytearray):
            value = bytes(value).decode("ascii", "replace")
        return [str(value)]

    def keys(self, carrier: Mapping[str, Any]) -> list[str]:
        return list(carrier)


_GETTER = _HeaderGetter()


def start_publish(tracer: Any, destination: str, message: OutboundMessage, attributes: Mapping[str, Any]) -> Any:
    """Start the publish span of *message* and put its trace context into the
    message's headers (the message is not sent yet). The span ends with the
    publish's outcome (:func:`end_publish`)."""
    span = tracer.start_span(f"send {destination}", kind=SpanKind.PRODUCER, attributes=attributes)
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
    message.headers = {**message.headers, **carrier}
    return span


def end_publish(span: Any, outcome: ConfirmOutcome) -> None:
    span.set_attribute("ackbridge.outcome", outcome.status.value)
    if outcome.status is not ConfirmStatus.CONFIRMED:
        span.set_status(Status(StatusCode.ERROR, outcome.reason or outcome.status.value))
    span.end()


def linked_context(headers: Mapping[str, Any]) -> Any:
    """The producer's span context carried in *headers*, or None."""
    if not headers:
        return None
    context = trace.get_current_span(_PROPAGATOR.extract(headers, getter=_GETTER)).get_span_context()
    return context if context.is_valid else None


def record_settle(tracer: Any, name: str, attributes: Mapping[str, Any], headers: Mapping[str, Any],
                  received_at: float) -> None:
    """One CONSUMER span from the delivery's arrival (*received_at*, monotonic
    clock) to its settlement now, linked to the publish span that sent it."""
    producer = linked_context(headers)
    now_ns = time.time_ns()
    start_ns = now_ns - int((time.monotonic() - received_at) * 1e9) if received_at else now_ns
    span = tracer.start_span(name, kind=SpanKind.CONSUMER, attributes=attributes, start_time=start_ns,
                             links=[Link(producer)] if producer is not None else None)
    span.end(end_time=now_ns)
