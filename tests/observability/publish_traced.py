"""Run as a separate process by test_traces: publish one message with tracing on and
print the publish span's trace and span ids (hex), one line."""

from __future__ import annotations

import sys

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import ackbridge
from ackbridge import observability


def main(url: str, queue: str) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    observability.configure(tracer_provider=provider)
    with ackbridge.connect(url) as conn:
        outcome = conn.publish(queue, b"traced", message_id="traced-1").result(timeout=30)
        assert outcome.status.value == "confirmed", outcome
    (span,) = exporter.get_finished_spans()
    context = span.get_span_context()
    print(f"{context.trace_id:032x} {context.span_id:016x} {span.name}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
