"""A publish span in one process, linked from the settle span in another."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

import ackbridge
from tests.local.harness import LocalHarness

HERE = Path(__file__).parent
ROOT = HERE.parent.parent


def test_publish_in_one_process_links_to_settle_in_another(spans: InMemorySpanExporter, tmp_path: Path) -> None:
    harness = LocalHarness(tmp_path)
    try:
        queue = harness.new_queue()
        out = subprocess.run([sys.executable, "-m", "tests.observability.publish_traced", harness.url(), queue],
                             cwd=ROOT, capture_output=True, text=True, timeout=120, check=True).stdout
        trace_id, span_id, name = out.split(maxsplit=2)
        assert name.strip() == f"send {queue}"
        with ackbridge.connect(harness.url()) as conn, conn.consume(queue) as consumer:
            delivery = consumer.get(timeout=30)
            assert delivery is not None
            assert delivery.headers["traceparent"].startswith(f"00-{trace_id}-{span_id}-")
            delivery.ack()
        (settle,) = [s for s in spans.get_finished_spans() if s.kind is SpanKind.CONSUMER]
        assert settle.name == f"settle {queue}"
        attributes: Any = settle.attributes
        assert attributes["messaging.operation.type"] == "settle"
        assert attributes["messaging.operation.name"] == "ack"
        assert attributes["messaging.system"] == "ackbridge_local"
        assert attributes["messaging.message.id"] == "traced-1"
        (link,) = settle.links
        assert (f"{link.context.trace_id:032x}", f"{link.context.span_id:016x}") == (trace_id, span_id)
    finally:
        harness.cleanup()


def test_publish_span_ends_with_the_outcome(spans: InMemorySpanExporter, tmp_path: Path) -> None:
    harness = LocalHarness(tmp_path)
    try:
        queue = harness.new_queue()
        with ackbridge.connect(harness.url()) as conn:
            conn.publish(queue, b"x", headers={"k": "v"}).result(timeout=30)
        (send,) = spans.get_finished_spans()
        assert send.kind is SpanKind.PRODUCER
        attributes: Any = send.attributes
        assert attributes["ackbridge.outcome"] == "confirmed"
        assert attributes["messaging.destination.name"] == queue
        assert attributes["messaging.operation.type"] == "send"
    finally:
        harness.cleanup()
