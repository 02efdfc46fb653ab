"""The pipeline's metrics (docs/failure-policy.md, "Metrics and logs"), read from an
in-memory OpenTelemetry reader after a message fails every attempt on the embedded broker."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import ackbridge
from ackbridge import observability
from ackbridge.pipeline import CircuitBreaker, RedeliveryPolicy, Schedule
from ackbridge.pipeline.sync import Pipeline
from tests.pipeline.brokers import broker, queue_name


@pytest.fixture
def reader() -> Iterator[InMemoryMetricReader]:
    found = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[found])
    observability.configure(meter_provider=provider)
    try:
        yield found
    finally:
        observability.configure()
        provider.shutdown()


def _points(reader: InMemoryMetricReader, name: str) -> list[tuple[dict[str, Any], float]]:
    data = reader.get_metrics_data()
    return [(dict(p.attributes), p.value) for r in (data.resource_metrics if data else []) for s in r.scope_metrics
            for m in s.metrics if m.name == name for p in m.data.data_points]


def test_attempts_retries_dead_letters_and_circuit_are_counted(reader: InMemoryMetricReader) -> None:
    with broker("local") as b, ackbridge.connect(b.url) as conn:
        queue = queue_name("metrics")
        conn.declare_queue(queue)

        def handler(delivery: Any) -> None:
            raise LookupError("never there")

        with Pipeline(conn, queue, policy=RedeliveryPolicy(attempts=3, schedule=Schedule.fixed(0.05)),
                      breaker=CircuitBreaker(failures=2, cooldown=0.01)) as pipeline:
            pipeline.consume(handler)
            conn.publish(queue, b"x", message_id="mx-1").result(10)
            b.wait_depth(conn, queue + ".dlq", 1)
    attempts = {a["ackbridge.attempt"]: v for a, v in _points(reader, "ackbridge.pipeline_attempts")}
    assert attempts == {1: 1, 2: 1, 3: 1}
    assert sorted(a["ackbridge.level"] for a, _ in _points(reader, "ackbridge.retries_scheduled")) == [0]
    assert sum(v for _, v in _points(reader, "ackbridge.retries_scheduled")) == 2
    dead = _points(reader, "ackbridge.dead_lettered")
    assert [(a["error.type"], a["ackbridge.outcome"], v) for a, v in dead] == [("LookupError", "dead-letter", 1)]
    states = {a["ackbridge.circuit"] for a, _ in _points(reader, "ackbridge.circuit_changes")}
    assert {"closed", "open"} <= states
